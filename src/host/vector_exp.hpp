// exp over a vector's lanes for the host kernels: exp_nonpositive in plain loops the compiler
// vectorises, and variants with a table where exp bounds the row kernels: fp32 on AVX2 and AVX-512,
// fp64 on AVX-512 (whose degree-12 polynomial would otherwise be the bound); and a shorter one for
// weights whose outputs are rounded to 16 bits (ExpAccuracy).
#pragma once

#include "vector.hpp"

#include <cstdint>
#include <type_traits>

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

#ifdef KFLASH_IMPL_VECTOR_EXT
/// fp32 on vectors of W = 8 or 16 lanes (AVX2, AVX-512), where exp bounds the state pass: a table
/// of 2^(j/W), one entry per lane, picked by one variable permute, so that the range is W times
/// narrower than exp_nonpositive's and a degree-3 polynomial suffices (7 multiply-adds and
/// multiplies in all, against 10). x = (W k + j) ln2/W + r with |r| <= ln2/(2W), exp(x) = 2^k
/// 2^(j/W) exp(r), exp(r) - 1 = q by a polynomial fitted to exp's relative error on |r| <= ln2/16;
/// the result is s + s q with s = 2^k 2^(j/W) built in the exponent bits. Within 1.2 ulp over every
/// fp32 argument in [lowest, 0.5] (checked exhaustively), with exp_nonpositive's results for 0,
/// -inf, NaN and arguments below `lowest`.
template <int VB>
struct TableExp {
  using V = Vec<float, VB>;
  using bits = typename Vec<std::int32_t, VB>::type;
  using ubits = typename Vec<std::uint32_t, VB>::type;  // bit arithmetic that wraps
  using C = ExpConstants<float>;
  static constexpr int W = VB / int(sizeof(float));
  static_assert(W == 8 || W == 16, "kflash: TableExp has tables for 8 and 16 lanes");
  static constexpr int index_shift = C::mantissa_bits - (W == 8 ? 3 : 4);  // 2^index_shift W = 2^23

  /// The bits of 2^(j/W) less j << index_shift: adding t's bits shifted by index_shift (W k + j,
  /// the magic constant shifted out) gives those of 2^k 2^(j/W).
  static constexpr std::int32_t table_bits(int j) {
    constexpr std::int32_t entries[16] = {  // 2^(i/16) rounded to fp32
        0x3f800000, 0x3f85aac3, 0x3f8b95c2, 0x3f91c3d3, 0x3f9837f0, 0x3f9ef532, 0x3fa5fed7, 0x3fad583f,
        0x3fb504f3, 0x3fbd08a4, 0x3fc5672a, 0x3fce248c, 0x3fd744fd, 0x3fe0ccdf, 0x3feac0c7, 0x3ff5257d};
    return entries[j * (16 / W)] - (j << index_shift);
  }

  /// The table as it sits in memory: built at compile time, so that each exp loads it as one vector
  /// (a table filled lane by lane at run time is stored element by element and then read as a whole
  /// vector, which stalls on the stores: on AVX-512, where the compiler did not fold the loop, that
  /// made exp six times slower).
  struct Table {
    alignas(VB) std::int32_t entry[W];
  };
  static constexpr Table make_table() {
    Table t{};
    for (int j = 0; j < W; ++j) t.entry[j] = table_bits(j);
    return t;
  }
  static constexpr Table table_entries = make_table();

  /// x = exp_nonpositive(x) lane by lane (in place: vectors passed by value change the ABI per
  /// instruction set).
  static void exp(typename V::type& x) {
    using F = typename V::type;
    bits table;
    __builtin_memcpy(&table, table_entries.entry, sizeof table);
    const F t = x * (W * C::log2e) + C::round_magic;
    const F k = t - C::round_magic;                                  // W k + j
    const F r = (x - k * (C::ln2_hi / W)) - k * (C::ln2_lo / W);     // k * ln2_hi / W is exact
    F q = r * 0x1.5548eap-3f + 0x1.00087ep-1f;
    q = q * r + 1.0f;
    q = q * r;
    const bits tb = (bits)t;  // vector casts keep the bits
    // The shuffle takes j = tb mod W; the sum is taken unsigned, as the shift pushes t's exponent out.
    // clang has no shuffle by a variable mask: there a lane loop, which clang 14 compiles to lane
    // extracts and inserts rather than one permute (correct, slower: clang builds are not tuned).
#if defined(__clang__)
    bits picked;
    for (int i = 0; i < W; ++i) picked[i] = table[tb[i] & (W - 1)];
#else
    const bits picked = __builtin_shuffle(table, tb);
#endif
    const F s = (F)((ubits)picked + ((ubits)tb << index_shift));
    x = x < C::lowest ? F{} : s * q + s;
  }

  template <int N>
  static void apply(const float* x, float m, float* w) {
    static_assert(N % W == 0, "kflash: whole vectors only");
    for (int i = 0; i < N; i += W) {
      typename V::type v;
      V::load(v, x + i);
      v -= m;
      exp(v);
      V::store(w + i, v);
    }
  }
};
template <>
struct LaneExp<float, 32> : TableExp<32> {};
template <>
struct LaneExp<float, 64> : TableExp<64> {};
#endif

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
/// fp32 on AVX-512 for weights whose outputs are rounded to 16 bits (ExpAccuracy): exp(x) = 2^t with
/// t = x log2(e) (rounded: an error of |t| 2^-24, below 2^-17 relative where t >= -126), 2^(t -
/// floor t) by a polynomial of degree `Degree` on [0, 1) fitted to its relative error, with 2^0 = 1
/// exactly (degree 4: within 2^-18.4, ExpAccuracy::output16; degree 3: within 2^-13.5,
/// ExpAccuracy::output_bf16), scaled by 2^floor(t) with `vscalefps`, which also gives 0 for -inf
/// and t below -150, subnormals between, and NaN for NaN. 6-7 operations a vector, against
/// TableExp's 13.
template <int Degree>
struct ScalefExp {
  using V = Vec<float, 64>;
  __attribute__((target("avx512f,avx512dq"))) static void exp(V::type& x) {
    const V::type t = x * ExpConstants<float>::log2e;
    // t - floor(t), in [0, 1) (imm8: round down, precision exception suppressed). The zero-masking
    // forms with every lane set are the plain instructions; the plain intrinsics start from an
    // undefined vector that GCC 12 warns about.
    const V::type f = (V::type)_mm512_maskz_reduce_ps(__mmask16(0xffff), (__m512)t, 0x09);
    V::type q;
    if constexpr (Degree == 4) {
      q = f * 0x1.b7f732p-7f + 0x1.abf868p-5f;
      q = q * f + 0x1.ee245p-3f;
      q = q * f + 0x1.62d6c6p-1f;
    } else {
      static_assert(Degree == 3, "kflash: ScalefExp has polynomials of degree 3 and 4");
      q = f * 0x1.3ba78cp-4f + 0x1.d2393ap-3f;
      q = q * f + 0x1.63e64p-1f;
    }
    const V::type p = q * f + 1.0f;
    x = (V::type)_mm512_maskz_scalef_ps(__mmask16(0xffff), (__m512)p, (__m512)t);
  }
  template <int N>
  __attribute__((target("avx512f,avx512dq"))) static void apply(const float* x, float m, float* w) {
    static_assert(N % 16 == 0, "kflash: whole vectors only");
    for (int i = 0; i < N; i += 16) {
      V::type v;
      V::load(v, x + i);
      v -= m;
      exp(v);
      V::store(w + i, v);
    }
  }
};
#endif

/// How exact a row kernel's exp must be. full: LaneExp's (about an ulp of T). output16: for weights
/// whose outputs are rounded to 16 bits and nothing else (softmax of bf16 and fp16 rows, and the
/// sums of log_softmax's short rows, short_exp_takes; not logsumexp's, which it returns): within
/// 2^-17 relative, so that an output stays within the 1 ulp GUIDE §9 allows (half an ulp of fp16 is
/// at least 2^-12). output_bf16: the same for outputs rounded to bf16 only: within 2^-13 relative
/// (half an ulp of bf16 is at least 2^-9).
enum class ExpAccuracy { full, output16, output_bf16 };

/// The exp of accuracy A on vectors of VB bytes of T: LaneExp unless a cheaper one meets A.
template <class T, int VB, ExpAccuracy A>
struct ExpOf {
  using type = LaneExp<T, VB>;
};
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
template <>
struct ExpOf<float, 64, ExpAccuracy::output16> {
  using type = ScalefExp<4>;
};
template <>
struct ExpOf<float, 64, ExpAccuracy::output_bf16> {
  using type = ScalefExp<3>;
};
#endif

/// The accuracy a kernel that allows A asks for: A where it has an exp of its own, full elsewhere
/// (so that no kernel is compiled twice with the same exp).
template <class T, int VB, ExpAccuracy A>
constexpr ExpAccuracy exp_accuracy =
    std::is_same<typename ExpOf<T, VB, A>::type, LaneExp<T, VB>>::value ? ExpAccuracy::full : A;

/// The accuracy a kernel of 16-bit outputs (bf16 or fp16) asks for.
template <class T, int VB>
constexpr ExpAccuracy output16_accuracy = exp_accuracy<T, VB, ExpAccuracy::output16>;

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
  using ubits = std::uint64_t __attribute__((vector_size(64)));  // bit arithmetic that wraps
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
    const ubits sb = (ubits)entry + ((ubits)tb << 48);  // unsigned: the shift pushes t's exponent out
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
