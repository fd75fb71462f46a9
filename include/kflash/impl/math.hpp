// The math kflash evaluates, one home for its constants: exp for arguments <= 0 (and -inf, NaN) and
// log for a finished state's total, written so that compilers vectorise loops that call them (no
// branches beyond selects, no library call, no float-to-int conversion).
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kflash::impl {

/// Indices and extents.
using index_t = std::int64_t;

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

/// exp(r) for |r| <= ln2 / 2 (and up to 0.5 at the top of exp_nonpositive's range) by Horner's
/// rule, one multiply-add per degree. fp32: a degree-6 polynomial fitted to exp's relative error
/// (0.3 ulp with its coefficients rounded to fp32, where a Taylor polynomial needs degree 7; its
/// constant term is 1, so exp(0) is 1). fp64: the Taylor polynomial of degree 12.
template <class T>
KOKKOS_INLINE_FUNCTION T exp_polynomial(T r) {
  if constexpr (std::is_same_v<T, float>) {
    T p = r * 0x1.6ae726p-10f + 0x1.126782p-7f;
    p = p * r + 0x1.555822p-5f;
    p = p * r + 0x1.55541ap-3f;
    p = p * r + 0x1.fffffcp-2f;
    p = p * r + 1.0f;
    return p * r + 1.0f;
  } else {
    return taylor_exp<T, 12>(r);
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
/// x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite), exp(r) by exp_polynomial, times 2^k built in
/// the exponent bits. Arguments below `lowest` go through the same arithmetic (their intermediate
/// values are meaningless, and the integer part is unsigned, so nothing overflows) and are masked
/// to 0 at the end.
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
      -bits_type(int(xb > bits_as<bits_type>(C::lowest)) & int(xb <= bits_as<bits_type>(-infinity<T>())));
  const T t = x * C::log2e + C::round_magic;
  const T k = t - C::round_magic;
  const ubits_type kbits = ubits_type(bits_as<bits_type>(t)) - ubits_type(C::magic_bits);  // k mod 2^n
  const T r = (x - k * C::ln2_hi) - k * C::ln2_lo;
  const T p = exp_polynomial(r);
  const T scale = bits_as<T>(ubits_type((kbits + ubits_type(C::exponent_bias)) << C::mantissa_bits));
  return bits_as<T>(bits_as<bits_type>(p * scale) & ~under);
}

/// tanh(x) as sign(x) (1 - e) / (1 + e) with e = exp(-2 |x|) <= 1, by exp_nonpositive: within a
/// few units of T's epsilon in absolute terms (not relative, near 0), which is what a score
/// softcap * tanh(s / softcap) needs; +-1 at +-inf, NaN for NaN. Vectorises like exp_nonpositive.
template <class T>
KOKKOS_INLINE_FUNCTION T tanh(T x) {
  const T a = x < T(0) ? -x : x;
  const T e = exp_nonpositive(T(-2) * a);
  const T t = (T(1) - e) / (T(1) + e);
  return x < T(0) ? -t : t;
}

/// Whether x is finite: x - x is 0 for finite x, NaN for infinities and NaN.
template <class T>
KOKKOS_INLINE_FUNCTION bool is_finite(T x) {
  return x - x == T(0);
}

/// a and b have the same bits (a == b but for signed zeros, whose exp(a - b) is 1 anyway) ?
/// if_same : otherwise, as integer masks, like exp_nonpositive.
template <class T>
KOKKOS_INLINE_FUNCTION T select_same_bits(T a, T b, T if_same, T otherwise) {
  using bits_type = typename ExpConstants<T>::bits_type;
  const bits_type same = -bits_type(bits_as<bits_type>(a) == bits_as<bits_type>(b));
  return bits_as<T>((bits_as<bits_type>(if_same) & same) | (bits_as<bits_type>(otherwise) & ~same));
}

/// log_of_total's domain: the totals l of finished states of finite entries (their maximum weighs
/// exactly 1, so l >= 1), up to fp64's largest power of two.
KOKKOS_INLINE_FUNCTION bool in_log_of_total_range(double l) { return l >= 1.0 && l <= 0x1p1023; }

/// log(l) for l in log_of_total's domain, in double, within an ulp of libm's log, written so that
/// loops over it vectorise (libm's log is a call per element). l = 2^e f with f in [sqrt(1/2),
/// sqrt(2)), t = f - 1 (exact), s = t / (2 + t), log f = 2 atanh(s) = t - (t^2/2 - s (t^2/2 +
/// R(s^2))), R by its series (s^2 <= 0.0295: the terms left out are below 1e-17 of the result); e ln2
/// in two parts.
KOKKOS_INLINE_FUNCTION double log_of_total(double l) {
  using C = ExpConstants<double>;
  using bits_type = C::bits_type;
  constexpr bits_type sqrt_half_bits = 0x3fe6a09e667f3bcdLL;  // sqrt(1/2) rounded down
  constexpr bits_type one_bits = 0x3ff0000000000000LL;
  constexpr bits_type mantissa = (bits_type(1) << C::mantissa_bits) - 1;
  // Adding 1 - sqrt(1/2) to the bits carries into the exponent exactly when f >= sqrt(2).
  const bits_type u = bits_as<bits_type>(l) + (one_bits - sqrt_half_bits);
  const bits_type e = (u >> C::mantissa_bits) - C::exponent_bias;  // in [0, 1023]
  const double f = bits_as<double>((u & mantissa) + sqrt_half_bits);
  // e as a double without an integer conversion (which AVX2 lacks for 64-bit integers).
  const double ed = bits_as<double>(bits_type(0x4330000000000000LL) | e) - 4503599627370496.0;
  const double t = f - 1.0;
  const double s = t / (2.0 + t);
  const double z = s * s;
  double r = 2.0 / 21.0;  // R(z) = sum_{k=1..10} 2 z^k / (2k + 1), by Horner's rule
  r = 2.0 / 19.0 + z * r;
  r = 2.0 / 17.0 + z * r;
  r = 2.0 / 15.0 + z * r;
  r = 2.0 / 13.0 + z * r;
  r = 2.0 / 11.0 + z * r;
  r = 2.0 / 9.0 + z * r;
  r = 2.0 / 7.0 + z * r;
  r = 2.0 / 5.0 + z * r;
  r = 2.0 / 3.0 + z * r;
  r *= z;
  const double half_t2 = 0.5 * t * t;
  return ed * C::ln2_hi + ((ed * C::ln2_lo) + (t - (half_t2 - s * (half_t2 + r))));
}

}  // namespace kflash::impl
