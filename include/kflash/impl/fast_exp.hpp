// exp for the arguments kflash evaluates (x <= 0, -inf, NaN), written so that compilers vectorise
// loops that call it: no branches beyond selects, no library call, no float-to-int conversion.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstdint>
#include <cstring>

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

/// sum_{i <= N} r^i / i!, written out (no loop, so that loops calling it vectorise), nested as
/// 1 + r (1 + r/2 (1 + r/3 (...))).
template <class T, int N, int I = 1>
KOKKOS_INLINE_FUNCTION T taylor_exp(T r) {
  if constexpr (I > N) {
    return T(1);
  } else {
    return T(1) + r * (T(1) / T(I)) * taylor_exp<T, N, I + 1>(r);
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
/// is below half an ulp at the degrees chosen), times 2^k built in the exponent bits.
/// Written so that loops calling it vectorise: the selects are integer masks on the bits (an
/// ordered floating-point comparison may trap on NaN, and compilers then keep a branch).
template <class T>
KOKKOS_INLINE_FUNCTION T exp_nonpositive(T x) {
  using C = ExpConstants<T>;
  using bits_type = typename C::bits_type;
  const bits_type xb = bits_as<bits_type>(x);
  const bits_type lowest_b = bits_as<bits_type>(C::lowest);
  const bits_type minus_inf_b = bits_as<bits_type>(-infinity<T>());
  // x < lowest or x = -inf: negative floats order like their bits read as signed integers, and
  // neither positive values nor NaNs (bits beyond -inf's) are flagged.
  const bits_type under = -bits_type((xb < 0) & (xb > lowest_b) & (xb <= minus_inf_b));  // all ones or 0
  const T xc = bits_as<T>((lowest_b & under) | (xb & ~under));
  const T t = xc * C::log2e + C::round_magic;
  const T k = t - C::round_magic;
  const bits_type kbits = bits_as<bits_type>(t) - C::magic_bits;  // k as an integer
  const T r = (xc - k * C::ln2_hi) - k * C::ln2_lo;
  const T p = taylor_exp<T, C::degree>(r);
  const T scale = bits_as<T>(bits_type((kbits + C::exponent_bias) << C::mantissa_bits));
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
