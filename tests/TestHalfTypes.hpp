// kflash::half_t and kflash::bhalf_t (GUIDE §9): 2-byte storage, widened to float and rounded back
// to nearest even inside TEST_EXECSPACE kernels, checked against a reference that decodes every bit
// pattern by its formula in long double and rounds by searching the ordered values.
#pragma once

#include <TestCommon.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

namespace kflash_test {

/// The format of a 16-bit type: mantissa bits and exponent bias; both have a sign bit and all-ones
/// exponents for infinities and NaNs.
struct Format16 {
  int mantissa, bias;
  std::uint16_t max_finite;  // bits of the largest finite value
};
template <class H>
Format16 format_of() {
  if constexpr (std::is_same<H, kflash::half_t>::value)
    return {10, 15, 0x7BFF};
  else
    return {7, 127, 0x7F7F};
}

/// The value of bits under format f, from its formula (NaN as a quiet NaN).
inline long double decode16(std::uint16_t bits, const Format16& f) {
  const int e = (bits & 0x7FFF) >> f.mantissa, m = bits & ((1 << f.mantissa) - 1);
  const int emax = (1 << (15 - f.mantissa)) - 1;
  const long double sign = bits & 0x8000 ? -1.0L : 1.0L;
  if (e == emax) return m ? std::numeric_limits<long double>::quiet_NaN() : sign * HUGE_VALL;
  if (e == 0) return sign * std::ldexp((long double)m, 1 - f.bias - f.mantissa);
  return sign * std::ldexp((long double)((1 << f.mantissa) + m), e - f.bias - f.mantissa);
}

/// x rounded to nearest even under format f, by searching the ordered non-negative finite values.
inline std::uint16_t round16(float x, const Format16& f) {
  if (std::isnan(x)) return 0x7FFF;  // a NaN (the caller compares NaN-ness only)
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const long double a = std::fabs((long double)x);
  const std::uint16_t inf = std::uint16_t(f.max_finite + 1);
  std::uint16_t lo = 0, hi = f.max_finite;  // largest value <= a
  if (a >= decode16(f.max_finite, f)) {
    lo = f.max_finite;
  } else {
    while (hi - lo > 1) {
      const std::uint16_t mid = std::uint16_t((lo + hi) / 2);
      (decode16(mid, f) <= a ? lo : hi) = mid;
    }
  }
  if (decode16(lo, f) == a) return std::uint16_t(sign | lo);
  // Past the largest finite value the next one up is its exponent's next power of two (where
  // rounding gives infinity).
  const long double below = decode16(lo, f);
  const long double above =
      lo == f.max_finite ? std::ldexp(1.0L, (1 << (15 - f.mantissa)) - 1 - f.bias) : decode16(std::uint16_t(lo + 1), f);
  const std::uint16_t up = std::uint16_t(lo + 1);  // (inf where lo is the largest finite value)
  const long double dl = a - below, du = above - a;
  const std::uint16_t r = dl < du ? lo : du < dl ? up : (lo & 1 ? up : lo);
  return std::uint16_t(sign | (r > inf ? inf : r));
}

/// Floats to round to 16 bits under format f: special values, every 7th value of the 16-bit lattice
/// and its midpoint with the next, with their float neighbours, and random floats over the whole
/// range.
inline std::vector<float> rounding_cases(const Format16& f) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           HUGE_VALF,
                           -HUGE_VALF,
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::min()};
  for (std::uint32_t b = 0; b < 0x7FFF; b += 7) {
    const long double v = decode16(std::uint16_t(b), f), w = decode16(std::uint16_t(b + 1), f);
    if (std::isnan(v) || std::isinf(v)) continue;
    const float mid = float((v + (std::isinf(w) ? v : w)) / 2);  // exact: 16-bit midpoints fit a float
    for (float x : {float(v), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, HUGE_VALF)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  std::mt19937 gen(4242);
  for (int n = 0; n < 200000; ++n) {
    std::uint32_t u = gen();
    float x;
    std::memcpy(&x, &u, 4);
    xs.push_back(x);
  }
  return xs;
}

template <class H>
void check_half_type() {
  using mem = TEST_EXECSPACE::memory_space;
  const Format16 f = format_of<H>();
  static_assert(sizeof(H) == 2, "2-byte storage");

  // Every bit pattern widened to float in a kernel.
  Kokkos::View<H*, mem> all("all", 65536);
  Kokkos::View<float*, mem> wide("wide", 65536);
  {
    const auto h = Kokkos::create_mirror_view(all);
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const std::uint16_t bits = std::uint16_t(b);
      std::memcpy(static_cast<void*>(&h(b)), &bits, 2);  // (the bits of a type that may not be trivial)
    }
    Kokkos::deep_copy(all, h);
  }
  Kokkos::parallel_for(
      Kokkos::RangePolicy<TEST_EXECSPACE>(0, 65536),
      KOKKOS_LAMBDA(int b) { wide(b) = kflash::impl::to_float(all(b)); });
  const auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), wide);
  int wrong = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const long double ref = decode16(std::uint16_t(b), f);
    const bool ok =
        std::isnan(ref) ? std::isnan(hw(b)) : (long double)hw(b) == ref && std::signbit(hw(b)) == std::signbit(ref);
    if (!ok && ++wrong <= 5)
      ADD_FAILURE() << "bits 0x" << std::hex << b << std::dec << ": " << hw(b) << " vs " << double(ref);
  }
  EXPECT_EQ(wrong, 0) << "16-bit patterns widened wrongly";

  // Floats rounded to 16 bits in a kernel.
  const std::vector<float> xs = rounding_cases(f);
  Kokkos::View<float*, mem> in("in", xs.size());
  Kokkos::View<H*, mem> out("out", xs.size());
  {
    const auto h = Kokkos::create_mirror_view(in);
    for (std::size_t n = 0; n < xs.size(); ++n) h(n) = xs[n];
    Kokkos::deep_copy(in, h);
  }
  Kokkos::parallel_for(
      Kokkos::RangePolicy<TEST_EXECSPACE>(0, xs.size()),
      KOKKOS_LAMBDA(int n) { out(n) = kflash::impl::narrow<H>(in(n)); });
  const auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  wrong = 0;
  for (std::size_t n = 0; n < xs.size(); ++n) {
    std::uint16_t got;
    std::memcpy(&got, &ho(n), 2);
    const std::uint16_t want = round16(xs[n], f);
    const bool ok = std::isnan(xs[n]) ? std::isnan(decode16(got, f)) : got == want;
    if (!ok && ++wrong <= 5)
      ADD_FAILURE() << xs[n] << " rounded to 0x" << std::hex << got << ", nearest even is 0x" << want;
  }
  EXPECT_EQ(wrong, 0) << "floats rounded wrongly, of " << xs.size();
}

/// The host kernels' vector conversions (each variant this CPU runs) against the rounding reference:
/// every 16-bit pattern widened, the rounding cases rounded, at an odd length (vectors, then a
/// scalar tail) and from an odd offset.
template <class H>
void check_host_conversions() {
  namespace host = kflash::impl::host;
  const Format16 f = format_of<H>();
  const host::Storage16 storage = host::storage16_of<H>;
  std::vector<std::uint16_t> bits(65536 + 1);
  for (std::uint32_t b = 0; b < 65536; ++b) bits[b + 1] = std::uint16_t(b);
  const std::vector<float> xs = rounding_cases(f);
  for (host::Isa which : {host::Isa::baseline, host::Isa::avx2, host::Isa::avx512}) {
    if (int(which) > int(host::isa())) continue;  // a variant this CPU (or KFLASH_HOST_ISA) rules out
    std::vector<float> wide(65536);
    host::widen16(which, storage, bits.data() + 1, wide.data(), 65536);
    int wrong = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const long double ref = decode16(std::uint16_t(b), f);
      const bool ok = std::isnan(ref) ? std::isnan(wide[b])
                                      : (long double)wide[b] == ref && std::signbit(wide[b]) == std::signbit(ref);
      if (!ok && ++wrong <= 5) ADD_FAILURE() << host::isa_name(which) << ": bits 0x" << std::hex << b;
    }
    EXPECT_EQ(wrong, 0) << host::isa_name(which) << ": 16-bit patterns widened wrongly";
    std::vector<std::uint16_t> narrow(xs.size());
    host::narrow16(which, storage, xs.data() + 1, narrow.data(), kflash::impl::index_t(xs.size() - 1));
    wrong = 0;
    for (std::size_t n = 1; n < xs.size(); ++n) {
      const std::uint16_t got = narrow[n - 1], want = round16(xs[n], f);
      const std::uint16_t own = std::is_same<H, kflash::half_t>::value ? kflash::impl::Float16::from_float(xs[n])
                                                                       : kflash::impl::Bfloat16::from_float(xs[n]);
      const bool ok = got == own && (std::isnan(xs[n]) ? std::isnan(decode16(got, f)) : got == want);
      if (!ok && ++wrong <= 5)
        ADD_FAILURE() << host::isa_name(which) << ": " << xs[n] << " rounded to 0x" << std::hex << got
                      << ", nearest even is 0x" << want;
    }
    EXPECT_EQ(wrong, 0) << host::isa_name(which) << ": floats rounded wrongly, of " << xs.size() - 1;
  }
}

TEST(TEST_CATEGORY, HalfTypesHostKernelConversions) {
  check_host_conversions<kflash::half_t>();
  check_host_conversions<kflash::bhalf_t>();
}

TEST(TEST_CATEGORY, HalfTypesWidenAndRoundToNearestEven) {
  check_half_type<kflash::half_t>();
  check_half_type<kflash::bhalf_t>();
}

}  // namespace kflash_test
