// kflash's own 2-byte storage types, for Kokkos builds that have no 2-byte half_t or bhalf_t (Kokkos
// 3.4 has no bhalf_t; host-only builds of every version emulate both by float). compat.hpp picks
// them or Kokkos' as kflash::half_t and kflash::bhalf_t. Storage only (GUIDE §9): values are
// converted to float for arithmetic and rounded back once, to nearest even.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace kflash::impl {

KOKKOS_INLINE_FUNCTION std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
KOKKOS_INLINE_FUNCTION float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// bfloat16: float's sign, 8-bit exponent and the top 7 bits of its mantissa.
struct Bfloat16 {
  std::uint16_t bits;

  Bfloat16() = default;
  /// x rounded to nearest even; NaN stays NaN (quiet, sign kept), overflow rounds to infinity.
  KOKKOS_INLINE_FUNCTION explicit Bfloat16(float x) : bits(from_float(x)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return bits_float(std::uint32_t(bits) << 16); }

  KOKKOS_INLINE_FUNCTION static std::uint16_t from_float(float x) {
    const std::uint32_t u = float_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return std::uint16_t((u >> 16) | 0x40u);
    return std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
};

/// IEEE 754 binary16: sign, 5-bit exponent (bias 15), 10-bit mantissa, subnormals below 2^-14.
struct Float16 {
  std::uint16_t bits;

  Float16() = default;
  /// x rounded to nearest even (subnormals included); NaN stays NaN (quiet, sign kept), magnitudes
  /// from 65520 on round to infinity.
  KOKKOS_INLINE_FUNCTION explicit Float16(float x) : bits(from_float(x)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return to_float(bits); }

  /// m shifted right by s (1 <= s <= 31), rounded to nearest even.
  KOKKOS_INLINE_FUNCTION static std::uint32_t shift_even(std::uint32_t m, int s) {
    const std::uint32_t r = m >> s, rest = m & ((1u << s) - 1u), half = 1u << (s - 1);
    return r + (rest > half || (rest == half && (r & 1u)) ? 1u : 0u);
  }
  KOKKOS_INLINE_FUNCTION static std::uint16_t from_float(float x) {
    const std::uint32_t u = float_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return std::uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN
    if (a >= 0x477FF000u) return std::uint16_t(sign | 0x7C00u);                        // 65520 and above: infinity
    if (a >= 0x38800000u) {  // normal: rebias the exponent, round the mantissa's low 13 bits away
      const std::uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3FFu);
      const std::uint32_t rest = a & 0x1FFFu;
      return std::uint16_t(sign | (h + (rest > 0x1000u || (rest == 0x1000u && (h & 1u)) ? 1u : 0u)));
    }
    if (a <= 0x33000000u) return std::uint16_t(sign);  // up to 2^-25 (a tie with 2^-24): zero
    // Subnormal: the value in units of 2^-24 is the mantissa (with its hidden bit) shifted right by
    // 126 - the exponent (14 to 24 here); rounding up may reach the smallest normal, 0x0400.
    const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    return std::uint16_t(sign | shift_even(m, int(126u - (a >> 23))));
  }
  KOKKOS_INLINE_FUNCTION static float to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) {  // zero or subnormal: m 2^-24, exact in float
      const float v = float(m) * 5.9604644775390625e-8f;
      return bits_float(float_bits(v) | sign);
    }
    if (e == 31) return bits_float(sign | 0x7F800000u | (m << 13));
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  }
};

}  // namespace kflash::impl
