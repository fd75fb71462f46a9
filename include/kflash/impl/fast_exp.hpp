// exp for the arguments kflash evaluates (x <= 0, -inf, NaN), written so that compilers vectorise
// loops that call it: no branches beyond selects, no library call, no float-to-int conversion.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kflash::impl {

template <class T>
struct ExpConstants;

template <>
struct ExpConstants<float> {
  using bits_type = std::int32_t;
  static constexpr float log2e = 1.44269504088896341f;
  static constexpr float ln2_hi = 0.693145751953125f;  // 12 significant bits: k * ln2_hi is exact
  static constexpr float ln2_lo = 1.42860682030941723212e-6f;
  static constexpr float round_magic = 12582912.0f;      // 1.5 * 2^23: adding it rounds to an integer
  static constexpr bits_type magic_bits = 0x4B400000;   // the bits of round_magic
  static constexpr float lowest = -87.33654f;           // below: the result is subnormal; flushed to 0
  static constexpr int mantissa_bits = 23;
  static constexpr bits_type exponent_bias = 127;
  static constexpr int degree = 7;
};

template <>
struct ExpConstants<double> {
  using bits_type = std::int64_t;
  static constexpr double log2e = 1.4426950408889634074;
  static constexpr double ln2_hi = 0.693147180369123816490;  // 32 significant bits
  static constexpr double ln2_lo = 1.90821492927058770002e-10;
  static constexpr double round_magic = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr bits_type magic_bits = 0x4338000000000000LL;
  static constexpr double lowest = -708.3964185322641;
  static constexpr int mantissa_bits = 52;
  static constexpr bits_type exponent_bias = 1023;
  static constexpr int degree = 12;
};

/// 1 / n! rounded to T (computed in long double at compile time).
template <class T, int N>
inline constexpr T inv_factorial = [] {
  long double f = 1;
  for (int i = 2; i <= N; ++i) f *= i;
  return static_cast<T>(1.0L / f);
}();

/// sum_{i <= N} r^i / i! by Horner's rule (one multiply-add per degree), written out (no loop, so
/// that loops calling it vectorise).
template <class T, int N, int I = 0>
KOKKOS_INLINE_FUNCTION T taylor_exp(T r) {
  if constexpr (I == N) {
    return inv_factorial<T, N>;
  } else {
    return inv_factorial<T, I> + r * taylor_exp<T, N, I + 1>(r);
  }
}

template <class To, class From>
KOKKOS_INLINE_FUNCTION To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From), "kflash: bit cast between types of different sizes");
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

/// exp(x) within 2 ulp for x in [lowest, 0.5]; exactly 0 below (-inf included); NaN for NaN.
/// x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite), exp(r) by its Taylor polynomial (the remainder
/// is below half an ulp at the degrees chosen), times 2^k built in the exponent bits. Arguments
/// below `lowest` go through the same arithmetic (their intermediate values are meaningless, and
/// the integer part is unsigned, so nothing overflows) and are masked to 0 at the end.
/// Written so that loops calling it vectorise: the select is an integer mask on the bits (an
/// ordered floating-point comparison may trap on NaN, and compilers then keep a branch).
template <class T>
KOKKOS_INLINE_FUNCTION T exp_nonpositive(T x) {
  using C = ExpConstants<T>;
  using bits_type = typename C::bits_type;
  using ubits_type = std::make_unsigned_t<bits_type>;
  const bits_type xb = bits_as<bits_type>(x);
  // x < lowest or x = -inf: negative floats order like their bits read as signed integers (the
  // larger the magnitude, the larger the integer), and neither positive values nor NaNs (bits
  // beyond -inf's) are flagged.
  const bits_type under =
      -bits_type((xb > bits_as<bits_type>(C::lowest)) & (xb <= bits_as<bits_type>(-infinity<T>())));
  const T t = x * C::log2e + C::round_magic;
  const T k = t - C::round_magic;
  const ubits_type kbits = ubits_type(bits_as<bits_type>(t)) - ubits_type(C::magic_bits);  // k mod 2^n
  const T r = (x - k * C::ln2_hi) - k * C::ln2_lo;
  const T p = taylor_exp<T, C::degree>(r);
  const T scale = bits_as<T>(ubits_type((kbits + ubits_type(C::exponent_bias)) << C::mantissa_bits));
  return bits_as<T>(bits_as<bits_type>(p * scale) & ~under);
}

/// a and b have the same bits (a == b but for signed zeros, whose exp(a - b) is 1 anyway) ?
/// if_same : otherwise, as integer masks, like exp_nonpositive.
template <class T>
KOKKOS_INLINE_FUNCTION T select_same_bits(T a, T b, T if_same, T otherwise) {
  using bits_type = typename ExpConstants<T>::bits_type;
  const bits_type same = -bits_type(bits_as<bits_type>(a) == bits_as<bits_type>(b));
  return bits_as<T>((bits_as<bits_type>(if_same) & same) | (bits_as<bits_type>(otherwise) & ~same));
}

}  // namespace kflash::impl
