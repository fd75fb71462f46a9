// Peak kernels and streaming stores of the host CPU (see host_peak.hpp). The peak kernels are one
// generic body over GCC vector types, inlined into a function per instruction set; this file is
// compiled with -ffp-contract=fast, so that a * m + c becomes one fused multiply-add where the set
// has it.
#include "host_peak.hpp"

#include <immintrin.h>

#include <cstdint>
#include <kflash/impl/host/host_kernels.hpp>

namespace kflash_bench {
namespace {

volatile double sink;

template <class T, int Bytes>
using Vec [[gnu::vector_size(Bytes)]] = T;

/// `Chains` independent chains a = a * m + c of Bytes-wide vectors of T for `iterations` steps;
/// returns the operations done.
template <class T, int Bytes, int Chains>
[[gnu::always_inline]] inline double chains(long iterations) {
  using V = Vec<T, Bytes>;
  constexpr int lanes = Bytes / int(sizeof(T));
  V a[Chains];
  for (int c = 0; c < Chains; ++c)
    for (int l = 0; l < lanes; ++l) a[c][l] = T(1) + T(c) * T(0.01) + T(l) * T(0.001);
  V m, add;
  for (int l = 0; l < lanes; ++l) m[l] = T(0.999999), add[l] = T(1e-7);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < Chains; ++c) a[c] = a[c] * m + add;
  }
  double total = 0;
  for (int c = 0; c < Chains; ++c)
    for (int l = 0; l < lanes; ++l) total += double(a[c][l]);
  sink = total;
  return 2.0 * double(iterations) * Chains * lanes;
}

// 12 chains fill the 16 registers of SSE2 and AVX2 beside m and c (two FMA pipes of latency 4-5
// need 8-10); AVX-512 has 32 registers.
double baseline(int bytes, long n) {
  return bytes == 4 ? chains<float, 16, 12>(n) : chains<double, 16, 12>(n);
}
[[gnu::target("avx2,fma")]] double avx2(int bytes, long n) {
  return bytes == 4 ? chains<float, 32, 12>(n) : chains<double, 32, 12>(n);
}
[[gnu::target("avx512f")]] double avx512(int bytes, long n) {
  return bytes == 4 ? chains<float, 64, 16>(n) : chains<double, 64, 16>(n);
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define KFLASH_PEAK_HAS_BF16 1
[[gnu::target("avx512f,avx512bf16")]] double bf16_dot(long n) {
  constexpr int chains = 16;
  __m512 acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(float(c));
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
  for (long i = 0; i < n; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
  }
  __m512 s = acc[0];
  for (int c = 1; c < chains; ++c) s = _mm512_add_ps(s, acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  double total = 0;
  for (float v : lanes) total += double(v);
  sink = total;
  return 4.0 * 16 * chains * double(n);
}

/// AMX-BF16: four accumulator tiles of 16 x 16 floats, each step adding the product of two tiles
/// of 16 rows by 16 bf16 pairs to each (the 2 x 2 block of a matrix product).
[[gnu::target("amx-tile,amx-bf16")]] double amx_tiles(long n) {
  struct Config {
    std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
    std::uint16_t bytes_per_row[16] = {};
    std::uint8_t rows[16] = {};
  };
  alignas(64) Config config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.bytes_per_row[t] = 64;
  _tile_loadconfig(&config);
  alignas(64) std::uint16_t operand[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) operand[i] = std::uint16_t(0x3A80 + i % 7);  // bf16 near 1e-3
  alignas(64) float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (long i = 0; i < n; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  sink = double(out[0]);
  return 4.0 * 16 * 16 * 32 * 2 * double(n);
}
#else
#define KFLASH_PEAK_HAS_BF16 0
#endif

/// out[i] = two(i) for pairs of elements, stored past the caches where out is 16-byte aligned;
/// one(i) for a misaligned head and an odd tail. SSE2's 16-byte stores suffice: a core issues one a
/// cycle, several times its share of memory bandwidth.
template <class Two, class One>
void stream_out(double* out, long n, Two two, One one) {
  long i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 16 != 0; ++i) out[i] = one(i);
  for (; i + 2 <= n; i += 2) _mm_stream_pd(out + i, two(i));
  for (; i < n; ++i) out[i] = one(i);
  _mm_sfence();  // the streamed lines are visible to the other threads once the kernel returns
}

}  // namespace

void stream_copy(const double* a, double* b, long n) {
  stream_out(b, n, [&](long i) { return _mm_loadu_pd(a + i); }, [&](long i) { return a[i]; });
}

void stream_triad(double* a, const double* b, const double* c, double s, long n) {
  const __m128d vs = _mm_set1_pd(s);
  stream_out(
      a, n, [&](long i) { return _mm_add_pd(_mm_loadu_pd(b + i), _mm_mul_pd(vs, _mm_loadu_pd(c + i))); },
      [&](long i) { return b[i] + s * c[i]; });
}

PeakIsa best_peak_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return PeakIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PeakIsa::avx2;
#endif
  return PeakIsa::baseline;
}

const char* peak_isa_name(PeakIsa isa) {
  return isa == PeakIsa::avx512 ? "AVX-512" : isa == PeakIsa::avx2 ? "AVX2 + FMA" : "baseline (SSE2, no FMA)";
}

double run_fma_chains(PeakIsa isa, int bytes, long iterations) {
  switch (isa) {
    case PeakIsa::avx512: return avx512(bytes, iterations);
    case PeakIsa::avx2: return avx2(bytes, iterations);
    default: return baseline(bytes, iterations);
  }
}

bool has_bf16_dot() {
#if KFLASH_PEAK_HAS_BF16 && defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool has_amx() { return kflash::impl::host::isa() == kflash::impl::host::Isa::amx; }

double run_amx_tiles(long iterations) {
#if KFLASH_PEAK_HAS_BF16
  if (has_amx()) return amx_tiles(iterations);
#endif
  (void)iterations;
  return 0;
}

double run_bf16_dot_chains(long iterations) {
#if KFLASH_PEAK_HAS_BF16
  if (has_bf16_dot()) return bf16_dot(iterations);
#endif
  (void)iterations;
  return 0;
}

}  // namespace kflash_bench
