// exp over a vector's lanes for the host kernels: exp_nonpositive in plain loops the compiler
// vectorises, and on AVX-512 for fp64 a variant with a table (whose degree-12 polynomial would
// otherwise bound the row kernels).
#pragma once

#include "vector.hpp"

#include <cstdint>

namespace kflash::impl::host::internal {

/// w[l] = exp_nonpositive(x[l] - m), l in [0, N) (N a multiple of the vector's lanes): plain loops
/// that the compiler vectorises.
template <class T, int VB>
struct LaneExp {
  template <int N>
  static void apply(const T* x, T m, T* w) {
    for (int l = 0; l < N; ++l) w[l] = exp_nonpositive(x[l] - m);
  }
};

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
/// fp64 on AVX-512, where exp_nonpositive's degree-12 polynomial bounds the row kernels: a table of
/// 2^(j/16) in two registers (one permute picks an entry), and so a range 16 times narrower.
/// x = (16 k + j) ln2/16 + r with |r| <= ln2/32, exp(x) = 2^k 2^(j/16) exp(r), exp(r) - 1 = q by
/// its Taylor polynomial to degree 7 (the remainder is below 2^-59); the result is s + s q with s =
/// 2^k 2^(j/16) built in the exponent bits. Within 2 ulp, like exp_nonpositive (the table's entries
/// are rounded, half an ulp), with the same results for 0, -inf, NaN and arguments below `lowest`.
template <>
struct LaneExp<double, 64> {
  using V = Vec<double, 64>;
  using bits = std::int64_t __attribute__((vector_size(64)));
  using C = ExpConstants<double>;

  /// The bits of 2^(j/16) - j 2^48: adding t's bits shifted by 48 (16 k + j, the magic constant
  /// shifted out) gives those of 2^k 2^(j/16).
  static constexpr std::int64_t table_bits(int j) {
    constexpr std::int64_t entries[16] = {
        0x3ff0000000000000LL, 0x3ff0b5586cf9890fLL, 0x3ff172b83c7d517bLL, 0x3ff2387a6e756238LL,
        0x3ff306fe0a31b715LL, 0x3ff3dea64c123422LL, 0x3ff4bfdad5362a27LL, 0x3ff5ab07dd485429LL,
        0x3ff6a09e667f3bcdLL, 0x3ff7a11473eb0187LL, 0x3ff8ace5422aa0dbLL, 0x3ff9c49182a3f090LL,
        0x3ffae89f995ad3adLL, 0x3ffc199bdd85529cLL, 0x3ffd5818dcfba487LL, 0x3ffea4afa2a490daLL};
    return entries[j] - (std::int64_t(j) << 48);
  }

  __attribute__((target("avx512f"))) static V::type exp(V::type x) {
    constexpr double scale = 16 * C::log2e;
    constexpr double ln2_hi = C::ln2_hi / 16;  // exact: a power of two
    constexpr double ln2_lo = C::ln2_lo / 16;
    const bits lo = {table_bits(0), table_bits(1), table_bits(2), table_bits(3),
                     table_bits(4), table_bits(5), table_bits(6), table_bits(7)};
    const bits hi = {table_bits(8),  table_bits(9),  table_bits(10), table_bits(11),
                     table_bits(12), table_bits(13), table_bits(14), table_bits(15)};
    const V::type t = x * scale + C::round_magic;
    const V::type k = t - C::round_magic;  // 16 k + j
    const V::type r = (x - k * ln2_hi) - k * ln2_lo;
    V::type q = inv_factorial<double, 7> * r + inv_factorial<double, 6>;
    q = q * r + inv_factorial<double, 5>;
    q = q * r + inv_factorial<double, 4>;
    q = q * r + inv_factorial<double, 3>;
    q = q * r + inv_factorial<double, 2>;
    q = q * r + 1.0;
    q = q * r;
    const bits tb = (bits)t;  // vector casts keep the bits
    const bits entry = (bits)_mm512_permutex2var_epi64((__m512i)lo, (__m512i)tb, (__m512i)hi);
    const bits sb = entry + (tb << 48);
    const V::type s = (V::type)sb;
    const V::type e = s * q + s;
    return x < C::lowest ? V::type{} : e;  // false for NaN: its e is NaN
  }

  template <int N>
  __attribute__((target("avx512f"))) static void apply(const double* x, double m, double* w) {
    static_assert(N % 8 == 0, "kflash: whole vectors only");
    for (int i = 0; i < N; i += 8) {
      V::type v;
      V::load(v, x + i);
      V::store(w + i, exp(v - m));
    }
  }
};
#endif

}  // namespace kflash::impl::host::internal
