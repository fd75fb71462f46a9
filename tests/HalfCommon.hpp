// What the 16-bit tests share: the storage types' units in the last place, and conversions.
#pragma once

#include <TestCommon.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace kflash_test {

/// The 16-bit type's mantissa bits and its smallest positive value (the spacing of its subnormals).
template <class H>
struct Half16 {
  static constexpr int mantissa = std::is_same<H, kflash::half_t>::value ? 10 : 7;
  static ld tiny() { return std::is_same<H, kflash::half_t>::value ? std::ldexp(1.0L, -24) : std::ldexp(1.0L, -133); }
  /// One unit in the last place of any value of magnitude up to |v|: the spacing of the 16-bit
  /// values in |v|'s binade (2^-mantissa |v| at most, half that just below a power of two), at least
  /// the subnormal spacing.
  static ld ulp(ld v) {
    if (v == 0 || !std::isfinite(v)) return v == 0 ? tiny() : std::fabs(v);
    return std::max(std::ldexp(1.0L, std::ilogb(v) - mantissa), tiny());
  }
  static const char* name() { return std::is_same<H, kflash::half_t>::value ? "half_t" : "bhalf_t"; }
};

/// A value of any storage type the tests use (16-bit, float, double, long double) in long double.
template <class S>
ld wide(S s) {
  if constexpr (kflash::impl::is_half_type<S>) {
    return ld(kflash::impl::to_float(s));
  } else {
    return ld(s);
  }
}

template <class S>
std::vector<ld> wide_all(const std::vector<S>& v) {
  std::vector<ld> out;
  for (const S& s : v) out.push_back(wide(s));
  return out;
}

template <class H>
std::vector<H> halves(const std::vector<float>& v) {
  std::vector<H> out;
  for (float f : v) out.push_back(kflash::impl::narrow<H>(f));
  return out;
}

}  // namespace kflash_test
