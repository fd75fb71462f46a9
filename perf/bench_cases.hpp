// Benchmark bodies of kflash-bench: machine limits, baselines and kflash kernels, per backend.
// Every body warms up once (first touch, workspaces), then times each iteration between fences
// (manual time). Limits and baselines run before the kflash case that refers to them, in the same
// process, so each kflash figure carries its fraction of the limit and its speed-up as counters.
#pragma once

#include <kflash/kflash.hpp>

#include <benchmark/benchmark.h>

#if KFLASH_BENCH_HAS_HOST_PEAK
#include "host_peak.hpp"
#endif
#if KFLASH_BENCH_HAS_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#if KFLASH_BENCH_HAS_CBLAS
#include <cblas.h>
#endif

namespace kflash_bench {

using index_t = std::int64_t;

/// Results shared between the benchmarks of one run: limits per backend ("OpenMP/copy_bw" in
/// bytes/s, "OpenMP/sgemm" in FLOP/s) and the best baseline time per case (seconds per iteration).
struct Shared {
  std::map<std::string, double> limit;
  /// Limits measured again on request (bandwidths; see case_limit), by the same keys. Their
  /// kernels hold Views: Kokkos's finalisation clears them.
  std::map<std::string, std::function<double()>> measure_limit;
  std::map<std::string, double> baseline_seconds;
  std::map<std::string, double> baseline_extra_bytes;
  std::map<std::string, std::string> baseline_name;  ///< the fastest baseline's variant, per case
};
inline Shared& shared() {
  static Shared s;
  static const bool cleared_at_finalize = [] {
    Kokkos::push_finalize_hook([] { s.measure_limit.clear(); });
    return true;
  }();
  (void)cleared_at_finalize;
  return s;
}

/// Times f between fences for every iteration; returns the mean seconds per call, and keeps the
/// median iteration's in the counter "median_s" (median_call). On devices, where a fence costs tens
/// of microseconds, an iteration makes enough calls of f to last about a millisecond (as many as the
/// warm-up call says) and counts their mean.
template <class Exec, class F>
double run_timed(benchmark::State& state, const Exec& exec, F&& f) {
  exec.fence();
  const auto w0 = std::chrono::steady_clock::now();
  f();  // warm-up: first touch of outputs, workspaces
  exec.fence();
  const double warm = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  int calls = 1;
  if (!kflash::impl::ScheduleTraits<Exec>::is_host && warm < 1e-3) calls = warm > 1e-5 ? int(1e-3 / warm) + 1 : 100;
  double total = 0;
  std::vector<double> times;
  times.reserve(std::size_t(std::min<benchmark::IterationCount>(state.max_iterations, 1 << 20)));
  for (auto _ : state) {
    exec.fence();
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) f();
    exec.fence();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
    state.SetIterationTime(s);
    total += s;
    times.push_back(s);
  }
  state.counters["calls_per_fence"] = calls;
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    const std::size_t n = times.size();
    state.counters["median_s"] = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  }
  return state.iterations() > 0 ? total / double(state.iterations()) : 0;
}

/// The seconds of run_timed's median call, or `mean` where it kept none. Limits and fractions use
/// it: on a shared machine a few calls take several times the others (other work on the cores),
/// which moves a mean by tens of percent from run to run but not the median.
inline double median_call(const benchmark::State& state, double mean) {
  const auto it = state.counters.find("median_s");
  return it != state.counters.end() && it->second.value > 0 ? double(it->second.value) : mean;
}

/// Rate counter (units per second) plus the label naming its unit.
inline void set_rate(benchmark::State& state, double units_per_iteration, const char* unit) {
  state.counters["rate"] = benchmark::Counter(units_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(unit);
}

/// The work of one call for the roofline plot: floating-point operations and the minimum bytes
/// moved. Row kernels count nominal operations per element (see row_ops).
inline void set_work(benchmark::State& state, double flop, double bytes) {
  state.counters["flop"] = flop;
  state.counters["bytes"] = bytes;
}

/// The limit a case's fraction divides by. A bandwidth is measured again right after the case (the
/// best of 4 calls in each kind of store): on a shared machine it moves by tens of percent within
/// minutes, more than a kernel's distance from it. Other limits are the run's.
inline double case_limit(const std::string& limit_key) {
  auto& sh = shared();
  const auto m = sh.measure_limit.find(limit_key);
  if (m != sh.measure_limit.end()) return m->second();
  const auto l = sh.limit.find(limit_key);
  return l == sh.limit.end() ? 0.0 : l->second;
}

/// Fraction of the limit `limit_key` (counter "limit": the value it divides by) reached by the
/// median call doing `units` of work (median_call), speed-up over the baseline of `case_key` by the
/// mean `seconds` of both, extra memory.
inline void set_relative(benchmark::State& state, const std::string& limit_key, double units,
                         const std::string& case_key, double seconds, double extra_bytes) {
  auto& sh = shared();
  if (const double limit = case_limit(limit_key); limit > 0 && seconds > 0) {
    state.counters["limit"] = limit;
    state.counters["frac_of_limit"] = units / median_call(state, seconds) / limit;
  }
  if (sh.baseline_seconds.count(case_key) && seconds > 0)
    state.counters["speedup_vs_baseline"] = sh.baseline_seconds[case_key] / seconds;
  state.counters["extra_MiB"] = extra_bytes / (1 << 20);
  if (sh.baseline_extra_bytes.count(case_key))
    state.counters["baseline_extra_MiB"] = sh.baseline_extra_bytes[case_key] / (1 << 20);
}

inline void record_baseline(const std::string& case_key, double seconds, double extra_bytes, const std::string& name) {
  auto& sh = shared();
  auto it = sh.baseline_seconds.find(case_key);
  if (it == sh.baseline_seconds.end() || seconds < it->second) {
    sh.baseline_seconds[case_key] = seconds;
    sh.baseline_name[case_key] = name;
  }
  sh.baseline_extra_bytes[case_key] = extra_bytes;
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same<T, kflash::bhalf_t>::value) return "bf16";
  if constexpr (std::is_same<T, kflash::half_t>::value) return "fp16";
  return sizeof(T) == 4 ? "fp32" : "fp64";
}

/// Fills a View with normal(0, 1) values (generated on the host, copied).
template <class V>
void fill_normal(const V& v, unsigned seed) {
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = static_cast<typename V::value_type>(dist(gen));
  Kokkos::deep_copy(v, h);
}

// --- Host BLAS (OpenBLAS through CBLAS): the GEMM limit and the materialised-attention baseline.
#if KFLASH_BENCH_HAS_CBLAS
inline void blas_threads(int n) { openblas_set_num_threads(n); }
/// C (m x n) = alpha op(A) op(B) + beta C, row-major; A is (k x m) when trans_a, B (n x k) when trans_b.
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b,
                 float beta, float* c) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
              alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, const double* b,
                 double beta, double* c) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
              alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}
#endif

// --- Machine limits ----------------------------------------------------------------------------

/// STREAM-like kernels over arrays of 2^25 doubles on hosts (256 MiB each, far beyond the last-level
/// cache) and 2^27 on devices (1 GiB each): read (kind 0), copy (1) and triad (2). On x86-64 hosts
/// copy and triad have two kinds of store: non-temporal (host_peak.hpp) and plain. Either may be
/// the faster on a given machine, so a limit is the faster of the two (best_rate).
template <class Exec>
class BandwidthKernel {
 public:
  using mem = typename Exec::memory_space;
  static constexpr bool host = kflash::impl::ScheduleTraits<Exec>::is_host;
  static constexpr index_t n = index_t(1) << (host ? 25 : 27);
  enum class Stores { streamed, plain };

  explicit BandwidthKernel(int kind)
      : kind_(kind), a_("a", n), b_("b", kind > 0 ? n : 0), c_("c", kind > 1 ? n : 0) {
    Kokkos::deep_copy(a_, 1.0);
    Kokkos::deep_copy(b_, 2.0);
    Kokkos::deep_copy(c_, 3.0);
  }

  double bytes() const { return double(n) * sizeof(double) * (kind_ + 1); }

  /// Whether this kernel writes in both kinds of store (else only Stores::plain's loops run).
  bool has_streamed() const {
#if KFLASH_BENCH_HAS_HOST_PEAK
    return host && kind_ > 0;
#else
    return false;
#endif
  }

  void operator()(const Exec& exec, Stores stores) const {
    const auto a = a_, b = b_, c = c_;
#if KFLASH_BENCH_HAS_HOST_PEAK
    if constexpr (host) {
      if (kind_ > 0 && stores == Stores::streamed) {
        // Chunks of 512 KiB: the threads' shares end within a chunk of each other.
        constexpr index_t chunk = index_t(1) << 16;
        const int kind = kind_;
        Kokkos::parallel_for("bench::stream", Kokkos::RangePolicy<Exec>(exec, 0, n / chunk), [=](index_t k) {
          const index_t i = k * chunk;
          if (kind == 1) stream_copy(a.data() + i, b.data() + i, chunk);
          else stream_triad(a.data() + i, b.data() + i, c.data() + i, 3.0, chunk);
        });
        return;
      }
    }
#endif
    (void)stores;  // read only where hosts have the non-temporal kernels
    // Plain stores. Devices: each thread takes `ways` elements n / ways apart, so that every warp
    // access stays coalesced and each thread has several independent loads in flight.
    constexpr index_t ways = host ? 1 : 4;
    constexpr index_t part = n / ways;
    if (kind_ == 0) {
      // On the host, one dependent add per element would make this a measure of the add latency
      // (about half the bandwidth on the 2-core Xeon): each step sums a group in 4 independent chains.
      constexpr index_t group = host ? 16 : ways;
      double sink = 0;
      Kokkos::parallel_reduce(
          "bench::read", Kokkos::RangePolicy<Exec>(exec, 0, n / group),
          KOKKOS_LAMBDA(index_t g, double& acc) {
            double sum[4] = {0, 0, 0, 0};
            for (index_t j = 0; j < group; ++j) sum[j % 4] += ways == 1 ? a(g * group + j) : a(g + j * part);
            acc += (sum[0] + sum[1]) + (sum[2] + sum[3]);
          },
          sink);
      benchmark::DoNotOptimize(sink);
    } else if (kind_ == 1) {
      Kokkos::parallel_for("bench::copy", Kokkos::RangePolicy<Exec>(exec, 0, part), KOKKOS_LAMBDA(index_t i) {
        for (index_t j = 0; j < ways; ++j) b(i + j * part) = a(i + j * part);
      });
    } else {
      Kokkos::parallel_for("bench::triad", Kokkos::RangePolicy<Exec>(exec, 0, part), KOKKOS_LAMBDA(index_t i) {
        for (index_t j = 0; j < ways; ++j) a(i + j * part) = b(i + j * part) + 3.0 * c(i + j * part);
      });
    }
  }

  /// Bytes per second of the best of `calls` calls in each kind of store the kernel has, {plain,
  /// streamed} (streamed 0 where it has only plain stores), each call between fences, the kinds
  /// alternated so that both see the same state of the machine.
  std::array<double, 2> best_rates(int calls) const {
    const Exec exec;
    std::array<double, 2> best = {0, 0};
    for (int k = 0; k < calls; ++k)
      for (Stores stores : {Stores::plain, Stores::streamed}) {
        if (stores == Stores::streamed && !has_streamed()) continue;
        exec.fence();
        const auto t0 = std::chrono::steady_clock::now();
        (*this)(exec, stores);
        exec.fence();
        const double rate = bytes() / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double& b = best[stores == Stores::streamed];
        b = std::max(b, rate);
      }
    return best;
  }
  double best_rate(int calls) const {
    const auto r = best_rates(calls);
    return std::max(r[0], r[1]);
  }

 private:
  int kind_;
  Kokkos::View<double*, mem> a_, b_, c_;
};

/// The run's bandwidth limit of one kind, in the faster kind of store (BandwidthKernel); the kernel
/// is kept to measure it again beside each case (see case_limit).
template <class Exec>
void limit_bandwidth(benchmark::State& state, const std::string& backend, int kind) {
  const Exec exec;
  auto kernel = std::make_shared<BandwidthKernel<Exec>>(kind);
  using Stores = typename BandwidthKernel<Exec>::Stores;
  Stores stores = Stores::plain;
  if (kernel->has_streamed()) {  // the timed calls take the faster kind of store
    const auto rates = kernel->best_rates(2);
    state.counters["plain_GBps"] = rates[0] * 1e-9;
    state.counters["streamed_GBps"] = rates[1] * 1e-9;
    if (rates[1] > rates[0]) stores = Stores::streamed;
    state.counters["streamed"] = stores == Stores::streamed;
  }
  const double s = run_timed(state, exec, [&] { (*kernel)(exec, stores); });
  set_rate(state, kernel->bytes(), "GB/s");
  const std::string key = backend + (kind == 0 ? "/read_bw" : kind == 1 ? "/copy_bw" : "/triad_bw");
  shared().limit[key] = kernel->bytes() / median_call(state, s);
  shared().measure_limit[key] = [kernel] { return kernel->best_rate(4); };
}

/// The sets of a case's arrays its timed calls take in turn (Rotation): together at least as large
/// as the copy limit's two arrays, so that a case whose arrays fit the last-level cache streams them
/// from memory, as the bandwidth it is a fraction of does, rather than from the cache (at most 64).
template <class Exec>
index_t rotated_sets(double bytes_per_set) {
  const double floor = 2.0 * double(BandwidthKernel<Exec>::n) * sizeof(double);
  const double sets = bytes_per_set > 0 ? std::ceil(floor / bytes_per_set) : 1.0;
  return sets < 1 ? 1 : sets > 64 ? 64 : index_t(sets);
}

/// A case's Views in `sets` copies, each call of the case on the next (copies of the first Views,
/// made once, outside the timed calls). The copies do not count as the case's extra memory.
template <class... V>
class Rotation {
 public:
  Rotation(index_t sets, const V&... first) : sets_(std::size_t(sets)) {
    sets_[0] = std::make_tuple(first...);
    for (std::size_t i = 1; i < sets_.size(); ++i) sets_[i] = std::make_tuple(copy(first)...);
  }
  index_t sets() const { return index_t(sets_.size()); }
  /// The Views of the next call.
  const std::tuple<V...>& next() {
    const std::size_t i = call_;
    call_ = (call_ + 1) % sets_.size();
    return sets_[i];
  }
  const std::tuple<V...>& set(index_t i) const { return sets_[std::size_t(i)]; }

 private:
  template <class W>
  static W copy(const W& w) {
    W out(Kokkos::view_alloc(Kokkos::WithoutInitializing, w.label()), w.layout());
    Kokkos::deep_copy(out, w);
    return out;
  }
  std::vector<std::tuple<V...>> sets_;
  std::size_t call_ = 0;
};

/// Arithmetic limit of a device: every thread runs `chains` independent multiply-add chains in
/// registers, no memory traffic but one store per thread at the end. FLOP = 2 per multiply-add.
template <class Exec, class T>
void limit_fma(benchmark::State& state, const std::string& backend) {
  constexpr int chains = 8;
  const index_t threads = index_t(Exec().concurrency()) * 8;
  const int iterations = 4096;
  const Exec exec;
  Kokkos::View<T*, typename Exec::memory_space> out("out", threads);
  const double s = run_timed(state, exec, [&] {
    Kokkos::parallel_for("bench::fma", Kokkos::RangePolicy<Exec>(exec, 0, threads), KOKKOS_LAMBDA(index_t i) {
      T a[chains];
      for (int c = 0; c < chains; ++c) a[c] = T(i % 7) * T(0.001) + T(c);
      const T mul = T(0.999999), add = T(1e-7) * T(i % 3);
      for (int it = 0; it < iterations; ++it)
        for (int c = 0; c < chains; ++c) a[c] = a[c] * mul + add;
      T sum = 0;
      for (int c = 0; c < chains; ++c) sum += a[c];
      out(i) = sum;
    });
  });
  const double flops = 2.0 * double(threads) * chains * iterations;
  set_rate(state, flops, "GFLOP/s");
  shared().limit[backend + (sizeof(T) == 4 ? "/fma_fp32" : "/fma_fp64")] = flops / median_call(state, s);
}

#if KFLASH_BENCH_HAS_HOST_PEAK
/// The arithmetic limits of a host: multiply-add chains, AVX512-BF16 dot-product chains, AMX tiles.
enum class HostPeak { fma, bf16_dot, amx_bf16 };

/// Arithmetic limit of a host backend: each of its threads runs the multiply-add chains of the
/// best instruction set the CPU has (host_peak.hpp) for fp32 or fp64 (bytes 4 or 8), or the bf16
/// products of `kind`.
template <class Exec>
void limit_host_peak(benchmark::State& state, const std::string& backend, int bytes, HostPeak kind = HostPeak::fma) {
  const Exec exec;
  const int threads = exec.concurrency();
  const long iterations = 1 << 21;
  const PeakIsa isa = best_peak_isa();
  std::vector<double> flops(std::size_t(threads), 0.0);
  const double s = run_timed(state, exec, [&] {
    Kokkos::parallel_for("bench::host_peak", Kokkos::RangePolicy<Exec>(exec, 0, threads), [&](int t) {
      flops[std::size_t(t)] = kind == HostPeak::amx_bf16   ? run_amx_tiles(iterations / 16)
                              : kind == HostPeak::bf16_dot ? run_bf16_dot_chains(iterations)
                                                           : run_fma_chains(isa, bytes, iterations);
    });
  });
  double total = 0;
  for (double f : flops) total += f;
  set_rate(state, total, "GFLOP/s");
  shared().limit[backend + (kind == HostPeak::amx_bf16   ? "/amx_bf16"
                            : kind == HostPeak::bf16_dot ? "/bf16_dot"
                            : bytes == 4                 ? "/fma_fp32"
                                                         : "/fma_fp64")] = total / median_call(state, s);
}
#endif

#if KFLASH_BENCH_HAS_CBLAS
template <class T>
void limit_gemm(benchmark::State& state, const std::string& backend, int threads, int n = 2048) {
  std::vector<T> a(std::size_t(n) * n), b(a.size()), c(a.size());
  std::mt19937 gen(3);
  std::normal_distribution<double> dist;
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = T(dist(gen)), b[i] = T(dist(gen));
  blas_threads(threads);
  const double s = run_timed(state, Kokkos::DefaultHostExecutionSpace(),
                             [&] { gemm(false, false, n, n, n, T(1), a.data(), b.data(), T(0), c.data()); });
  const double flops = 2.0 * n * double(n) * n;
  set_rate(state, flops, "GFLOP/s");
  shared().limit[backend + (sizeof(T) == 4 ? "/sgemm" : "/dgemm") + (n == 2048 ? "" : "_" + std::to_string(n))] =
      flops / median_call(state, s);
}
#endif

// --- softmax, log_softmax, logsumexp --------------------------------------------------------------

enum class RowKind { softmax, log_softmax, logsumexp };
/// Nominal operations per element for the roofline: the maximum, the exponential (counted as
/// one), the sum, and softmax's scaling or log_softmax's subtraction.
inline double row_ops(RowKind k) { return k == RowKind::logsumexp ? 3 : 4; }
inline const char* row_kind_name(RowKind k) {
  return k == RowKind::softmax ? "softmax" : k == RowKind::log_softmax ? "log_softmax" : "logsumexp";
}

/// Baselines as hand-written Kokkos code does it, one team per row: `passes` = 3 runs a kernel for
/// the row maxima, one for the sums of exponentials, one to write; `passes` = 2 computes maximum and
/// sum as two reductions in one kernel, then writes. With causal_shift >= 0, entries j > r + shift
/// count as -inf (the masked scores of materialised attention).
template <class Exec, class X, class Y, class Stat>
void baseline_rows(const Exec& exec, RowKind kind, int passes, const X& x, const Y& y, const Stat& mx,
                   const Stat& sm, index_t causal_shift = -1) {
  using T = typename X::non_const_value_type;
  using policy = Kokkos::TeamPolicy<Exec>;
  using member = typename policy::member_type;
  const index_t rows = x.extent(0), cols = x.extent(1);
  auto value = [=] KOKKOS_FUNCTION(index_t r, index_t j) {
    return causal_shift >= 0 && j > r + causal_shift ? -kflash::impl::infinity<T>() : x(r, j);
  };
  auto row_max = [=] KOKKOS_FUNCTION(const member& t, index_t r) {
    T m = -kflash::impl::infinity<T>();
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(t, cols), [&](index_t j, T& acc) {
      const T v = value(r, j);
      if (v > acc) acc = v;
    }, Kokkos::Max<T>(m));
    return m;
  };
  auto row_sum = [=] KOKKOS_FUNCTION(const member& t, index_t r, T m) {
    T s = 0;
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(t, cols),
                            [&](index_t j, T& acc) { acc += kflash::impl::exp(value(r, j) - m); }, s);
    return s;
  };
  const auto pol = policy(exec, int(rows), Kokkos::AUTO);
  if (passes == 3) {
    Kokkos::parallel_for("baseline::max", pol, KOKKOS_LAMBDA(const member& t) {
      const T m = row_max(t, t.league_rank());
      Kokkos::single(Kokkos::PerTeam(t), [&] { mx(t.league_rank()) = m; });
    });
    Kokkos::parallel_for("baseline::sum", pol, KOKKOS_LAMBDA(const member& t) {
      const T s = row_sum(t, t.league_rank(), mx(t.league_rank()));
      Kokkos::single(Kokkos::PerTeam(t), [&] { sm(t.league_rank()) = s; });
    });
  } else {
    Kokkos::parallel_for("baseline::max_sum", pol, KOKKOS_LAMBDA(const member& t) {
      const T m = row_max(t, t.league_rank());
      const T s = row_sum(t, t.league_rank(), m);
      Kokkos::single(Kokkos::PerTeam(t), [&] {
        mx(t.league_rank()) = m;
        sm(t.league_rank()) = s;
      });
    });
  }
  if (kind == RowKind::logsumexp) {
    Kokkos::parallel_for("baseline::lse", Kokkos::RangePolicy<Exec>(exec, 0, rows),
                         KOKKOS_LAMBDA(index_t r) { mx(r) = mx(r) + kflash::impl::log(sm(r)); });
    return;
  }
  const bool log_space = kind == RowKind::log_softmax;
  Kokkos::parallel_for("baseline::write", pol, KOKKOS_LAMBDA(const member& t) {
    const index_t r = t.league_rank();
    const T m = mx(r), s = sm(r);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(t, cols), [&](index_t j) {
      const T v = value(r, j) - m;
      y(r, j) = log_space ? v - kflash::impl::log(s) : kflash::impl::exp(v) / s;
    });
  });
}

/// One case: kind, type, rows x cols. `variant`: 0 = kflash, 2 or 3 = the baseline of that many passes.
/// row_case's variant of SoftmaxStream, and its tile width.
constexpr int stream_variant = 4;
constexpr int onednn_variant = 5;

#if KFLASH_BENCH_HAS_ONEDNN
/// oneDNN's data type of T, where oneDNN 2.x computes it on CPUs: fp32 and bf16 (its softmax and
/// matmul have no fp16 there).
template <class T>
constexpr bool onednn_has = std::is_same<T, float>::value || std::is_same<T, kflash::bhalf_t>::value;
template <class T>
constexpr dnnl::memory::data_type onednn_type =
    std::is_same<T, float>::value ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;

/// oneDNN runs on the OpenMP runtime with `threads` threads while a scope lives. A primitive
/// fixes its threads when it is created: create it in such a scope too, or it runs with the
/// process's (OMP_NUM_THREADS), whatever the scope around its calls says.
class OneDnnThreads {
 public:
  explicit OneDnnThreads(int threads) : before_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OneDnnThreads() { omp_set_num_threads(before_); }
  OneDnnThreads(const OneDnnThreads&) = delete;
  OneDnnThreads& operator=(const OneDnnThreads&) = delete;

 private:
  int before_;
};

/// oneDNN's softmax or log_softmax forward (inference) over the rows of x into y, fp32 or bf16 on
/// the host, with `threads` threads; the primitive is created once, outside the timed calls, as an
/// application would cache it.
class OneDnnRows {
 public:
  OneDnnRows(RowKind kind, index_t rows, index_t cols, dnnl::memory::data_type type, void* x, void* y, int threads)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), threads_(threads) {
    const OneDnnThreads scope(threads_);
    const dnnl::memory::desc md({rows, cols}, type, dnnl::memory::format_tag::ab);
    src_ = dnnl::memory(md, engine_, x);
    dst_ = dnnl::memory(md, engine_, y);
    const auto algorithm = kind == RowKind::softmax ? dnnl::algorithm::softmax_accurate : dnnl::algorithm::softmax_log;
    const dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, md, md, 1);
    primitive_ = dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(desc, engine_));
  }
  void operator()() {
    const OneDnnThreads scope(threads_);
    primitive_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  int threads_;
  dnnl::memory src_, dst_;
  dnnl::softmax_v2_forward primitive_;
};

/// bf16 attention of one head as a oneDNN user would materialise it: S = scale Q K^T (bf16 matmul,
/// fp32 S), P = softmax(S) rounded to bf16, O = P V (bf16 matmul, bf16 O), with one Nq x Nk buffer
/// of S and one of P, with `threads` threads; the primitives are created once. Between the two
/// steps, `mask` may write -inf into S (scores()).
class OneDnnAttention {
 public:
  OneDnnAttention(index_t Nq, index_t Nk, index_t D, float scale, int threads)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), threads_(threads) {
    const OneDnnThreads scope(threads_);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc q({Nq, D}, dt::bf16, tag::ab), kt({D, Nk}, dt::bf16, tag::ba),
        s({Nq, Nk}, dt::f32, tag::ab), p({Nq, Nk}, dt::bf16, tag::ab), v({Nk, D}, dt::bf16, tag::ab),
        o({Nq, D}, dt::bf16, tag::ab);
    dnnl::primitive_attr scaled;
    scaled.set_output_scales(0, {scale});
    scores_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q, kt, s), scaled, engine_));
    softmax_ = dnnl::softmax_v2_forward(dnnl::softmax_v2_forward::primitive_desc(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate, s, p, 1),
        engine_));
    output_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p, v, o), engine_));
    q_ = dnnl::memory(q, engine_, nullptr), k_ = dnnl::memory(kt, engine_, nullptr);
    v_ = dnnl::memory(v, engine_, nullptr), o_ = dnnl::memory(o, engine_, nullptr);
    s_ = dnnl::memory(s, engine_), p_ = dnnl::memory(p, engine_);
  }
  float* scores() const { return static_cast<float*>(s_.get_data_handle()); }
  std::size_t buffer_bytes() const { return s_.get_desc().get_size() + p_.get_desc().get_size(); }

  /// One head: q (Nq x D), k and v (Nk x D) and o (Nq x D), rows contiguous, bf16.
  template <class Mask>
  void operator()(const void* q, const void* k, const void* v, void* o, Mask&& mask) {
    const OneDnnThreads scope(threads_);
    q_.set_data_handle(const_cast<void*>(q)), k_.set_data_handle(const_cast<void*>(k));
    v_.set_data_handle(const_cast<void*>(v)), o_.set_data_handle(o);
    scores_.execute(stream_, {{DNNL_ARG_SRC, q_}, {DNNL_ARG_WEIGHTS, k_}, {DNNL_ARG_DST, s_}});
    stream_.wait();
    mask();
    softmax_.execute(stream_, {{DNNL_ARG_SRC, s_}, {DNNL_ARG_DST, p_}});
    output_.execute(stream_, {{DNNL_ARG_SRC, p_}, {DNNL_ARG_WEIGHTS, v_}, {DNNL_ARG_DST, o_}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  int threads_;
  dnnl::matmul scores_, output_;
  dnnl::softmax_v2_forward softmax_;
  dnnl::memory q_, k_, v_, o_, s_, p_;
};
#endif
constexpr index_t stream_tile = 4096;

template <class Exec, class T>
void row_case(benchmark::State& state, const std::string& backend, RowKind kind, index_t rows, index_t cols,
              int variant) {
  using mem = typename Exec::memory_space;
  const Exec exec;
  Kokkos::View<T**, Kokkos::LayoutRight, mem> x("x", rows, cols), y("y", kind == RowKind::logsumexp ? 0 : rows,
                                                                    kind == RowKind::logsumexp ? 0 : cols);
  Kokkos::View<T*, mem> mx("max", rows), sm("sum", rows);
  fill_normal(x, 1);
  using Rows = decltype(x);
  Rotation<Rows, Rows> rotation(rotated_sets<Exec>(double(x.span() + y.span()) * sizeof(T)), x, y);
  state.counters["sets"] = double(rotation.sets());
  const std::string key = backend + "/" + row_kind_name(kind) + "/" + type_name<T>() + "/" +
                          std::to_string(rows) + "x" + std::to_string(cols);
  constexpr bool half = kflash::impl::is_half_type<T>;  // 16-bit rows: kflash's call only
  if constexpr (!half) {
    if (variant == stream_variant) {
      // SoftmaxStream fed x in tiles of stream_tile columns, then finalized in place; its speed-up is
      // against the one-shot kflash kernel of the same case.
      const double s = run_timed(state, exec, [&] {
        const auto& [xc, yc] = rotation.next();
        kflash::SoftmaxStream<T, Exec> stream(exec, yc);
        for (index_t c0 = 0; c0 < cols; c0 += stream_tile)
          stream.update(exec, Kokkos::subview(xc, Kokkos::ALL, Kokkos::make_pair(c0, std::min(cols, c0 + stream_tile))),
                        c0);
        stream.finalize(exec, yc, kind == RowKind::softmax ? kflash::Normalize::prob : kflash::Normalize::log_prob);
      });
      const double bytes = double(rows) * cols * sizeof(T) * 2;
      set_rate(state, bytes, "GB/s");
      set_relative(state, backend + "/copy_bw", bytes, key + "/one-shot", s,
                   double(rows) * sizeof(kflash::SoftmaxState<T>));
      return;
    }
  }
#if KFLASH_BENCH_HAS_ONEDNN
  if (variant == onednn_variant) {
    if constexpr (onednn_has<T> && kflash::impl::ScheduleTraits<Exec>::is_host) {
      std::vector<OneDnnRows> onednn;  // a primitive on each set's memory
      onednn.reserve(std::size_t(rotation.sets()));
      for (index_t i = 0; i < rotation.sets(); ++i)
        onednn.emplace_back(kind, rows, cols, onednn_type<T>, std::get<0>(rotation.set(i)).data(),
                            std::get<1>(rotation.set(i)).data(), exec.concurrency());
      index_t call = 0;
      const double s = run_timed(state, exec, [&] {
        onednn[std::size_t(call)]();
        call = (call + 1) % rotation.sets();
      });
      set_rate(state, double(rows) * cols * sizeof(T) * 2, "GB/s");
      record_baseline(key, s, 0, "baseline_onednn");
    }
    return;
  }
#endif
  const double s = run_timed(state, exec, [&] {
    const auto& [xc, yc] = rotation.next();
    if (variant != 0) {
      if constexpr (!half) baseline_rows(exec, kind, variant, xc, yc, mx, sm);
    } else if (kind == RowKind::softmax) kflash::softmax(exec, xc, yc);
    else if (kind == RowKind::log_softmax) kflash::log_softmax(exec, xc, yc);
    else kflash::logsumexp(exec, xc, mx);
  });
  // Minimum traffic: one read and one write of the matrix (one read for logsumexp).
  const double bytes = double(rows) * cols * sizeof(T) * (kind == RowKind::logsumexp ? 1 : 2);
  set_rate(state, bytes, "GB/s");
  if (variant != 0) {
    record_baseline(key, s, 2.0 * rows * sizeof(T), variant == 3 ? "baseline_3pass" : "baseline_2pass");  // row max, sum
    return;
  }
  using Traits = kflash::impl::ScheduleTraits<Exec>;
  using A = kflash::impl::arith_t<T>;
  const auto plan = kflash::impl::plan_rows<A, Traits>(exec, rows, cols);
  double extra = plan.chunks > 1 ? double(plan.rows * plan.chunks) * sizeof(kflash::SoftmaxState<A>) : 0;
  if constexpr (Traits::host_kernels) {  // team scratch: softmax's weights, or 16-bit rows' float buffer
    if (kind == RowKind::softmax || half)
      extra += double(exec.concurrency()) *
               double(kflash::impl::host::plan_host_rows<T>(kflash::impl::RowOp::softmax, plan).weights_bytes);
  }
  set_relative(state, backend + (kind == RowKind::logsumexp ? "/read_bw" : "/copy_bw"), bytes, key, s, extra);
  set_work(state, row_ops(kind) * double(rows) * double(cols), bytes);
  record_baseline(key + "/one-shot", s, extra, "kflash");
}

// --- cross-entropy -------------------------------------------------------------------------------

/// One case: rows x vocabulary logits (fp32, fp64 or 16-bit; the loss in fp32 or fp64) against random
/// targets, label smoothing 0.1. variant 0: kflash::cross_entropy (one read of the logits: its limit is
/// read bandwidth); 1 (fp32 and fp64): the baseline as frameworks compose it, kflash::log_softmax into a
/// rows x vocabulary buffer, then the target's entry and the mean of each row gathered from it;
/// 2: kflash::cross_entropy without label smoothing (the default options), which needs no logits' sum.
template <class Exec, class T>
void cross_entropy_case(benchmark::State& state, const std::string& backend, index_t rows, index_t cols,
                        int variant) {
  using mem = typename Exec::memory_space;
  using A = kflash::impl::arith_t<T>;  // the loss's type
  const Exec exec;
  Kokkos::View<T**, Kokkos::LayoutRight, mem> x("x", rows, cols), lp("log_p", variant == 1 ? rows : 0, cols);
  Kokkos::View<std::int64_t*, mem> targets("targets", rows);
  Kokkos::View<A*, mem> loss("loss", rows);
  fill_normal(x, 1);
  Kokkos::parallel_for("targets", Kokkos::RangePolicy<Exec>(exec, 0, rows),
                       KOKKOS_LAMBDA(index_t r) { targets(r) = (r * 7919) % cols; });
  using Logits = decltype(x);
  Rotation<Logits, Logits> rotation(rotated_sets<Exec>(double(x.span() + lp.span()) * sizeof(T)), x, lp);
  state.counters["sets"] = double(rotation.sets());
  const std::string key = backend + "/cross_entropy/" + type_name<T>() + "/" + std::to_string(rows) + "x" +
                          std::to_string(cols);
  kflash::CrossEntropyOptions o;
  o.label_smoothing = variant == 2 ? 0.0 : 0.1;
  using member = typename Kokkos::TeamPolicy<Exec>::member_type;
  const double s = run_timed(state, exec, [&] {
    const auto& set = rotation.next();
    const Logits& xc = std::get<0>(set);
    const Logits lpc = std::get<1>(set);  // a copy: the baseline's device lambda captures it
    if (variant != 1) {
      kflash::cross_entropy(exec, xc, targets, loss, o);
      return;
    }
    if constexpr (!kflash::impl::is_half_type<T>) {  // 16-bit logits: kflash's call only
      kflash::log_softmax(exec, xc, lpc);
      const T eps = T(o.label_smoothing);
      Kokkos::parallel_for("baseline::gather", Kokkos::TeamPolicy<Exec>(exec, int(rows), Kokkos::AUTO),
                           KOKKOS_LAMBDA(const member& t) {
                             const index_t r = t.league_rank();
                             T sum = 0;
                             Kokkos::parallel_reduce(Kokkos::TeamThreadRange(t, cols),
                                                     [&](index_t j, T& acc) { acc += lpc(r, j); }, sum);
                             Kokkos::single(Kokkos::PerTeam(t), [&] {
                               loss(r) = -(1 - eps) * lpc(r, targets(r)) - eps * sum / T(cols);
                             });
                           });
    }
  });
  const double bytes = double(rows) * cols * sizeof(T);  // one read of the logits
  set_rate(state, bytes, "GB/s");
  if (variant == 1) {
    record_baseline(key, s, double(rows) * cols * sizeof(T), "baseline_log_softmax");  // the log-probabilities
    return;
  }
  using Traits = kflash::impl::ScheduleTraits<Exec>;
  const auto plan = kflash::impl::plan_rows<A, Traits>(exec, rows, cols);
  // The baseline smooths: no speedup over it is reported without smoothing (a key it has not recorded).
  set_relative(state, backend + "/read_bw", bytes, variant == 2 ? key + "/without_smoothing" : key, s,
               double(plan.rows * plan.chunks) * sizeof(kflash::impl::LogitStats<A>));
  set_work(state, row_ops(RowKind::logsumexp) * double(rows) * double(cols), bytes);
}

// --- gradients ---------------------------------------------------------------------------------

/// The row gradients as hand-written Kokkos code does them: a team per row reducing the row's sum
/// into sums, then a second kernel writing dx (log_softmax's gradient where log_space, else softmax's).
template <class Exec, class V, class Sums>
void baseline_row_backward(const Exec& exec, bool log_space, const V& a, const V& dy, const V& dx, const Sums& sums) {
  using member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using T = typename V::value_type;
  const index_t rows = index_t(a.extent(0)), cols = index_t(a.extent(1));
  Kokkos::parallel_for(
      "baseline::row_sums", Kokkos::TeamPolicy<Exec>(exec, int(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const member& t) {
        const index_t r = t.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(t, cols),
            [&](index_t j, T& acc) { acc += log_space ? dy(r, j) : dy(r, j) * a(r, j); }, sum);
        Kokkos::single(Kokkos::PerTeam(t), [&] { sums(r) = sum; });
      });
  Kokkos::parallel_for(
      "baseline::row_grad", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(index_t r, index_t j) {
        dx(r, j) = log_space ? dy(r, j) - kflash::impl::exp(a(r, j)) * sums(r) : a(r, j) * (dy(r, j) - sums(r));
      });
}

/// One gradient case of the row operations at rows x cols: softmax_backward and log_softmax_backward
/// from y and dy into dx (two reads and one write: the triad's limit), logsumexp_backward from x, lse
/// and dlse into dx (one read, one write: copy's). variant 0: kflash; 1 (softmax and log_softmax):
/// the baseline as hand-written Kokkos code does it, a team per row reducing the row's sum into a
/// vector, then a second kernel writing dx.
template <class Exec, class T>
void row_backward_case(benchmark::State& state, const std::string& backend, RowKind kind, index_t rows,
                       index_t cols, int variant) {
  using mem = typename Exec::memory_space;
  using A = kflash::impl::arith_t<T>;  // the type of lse, dlse and the baseline's sums
  const Exec exec;
  Kokkos::View<T**, Kokkos::LayoutRight, mem> a("a", rows, cols), dy("dy", kind == RowKind::logsumexp ? 0 : rows, cols),
      dx("dx", rows, cols);
  Kokkos::View<A*, mem> lse("lse", rows), dlse("dlse", rows), sums("sums", rows);
  fill_normal(a, 1);
  if (kind == RowKind::logsumexp) {
    kflash::logsumexp(exec, a, lse);
    fill_normal(dlse, 2);
  } else {
    fill_normal(dy, 2);
    if (kind == RowKind::softmax) kflash::softmax(exec, a, a);
    else kflash::log_softmax(exec, a, a);
  }
  const std::string key = backend + "/" + row_kind_name(kind) + "_backward/" + type_name<T>() + "/" +
                          std::to_string(rows) + "x" + std::to_string(cols);
  const bool log_space = kind == RowKind::log_softmax;
  using Rows = decltype(a);
  Rotation<Rows, Rows, Rows> rotation(rotated_sets<Exec>(double(a.span() + dy.span() + dx.span()) * sizeof(T)), a, dy,
                                      dx);
  state.counters["sets"] = double(rotation.sets());
  const double s = run_timed(state, exec, [&] {
    const auto& [ac, dyc, dxc] = rotation.next();
    if (variant == 0) {
      if (kind == RowKind::softmax) kflash::softmax_backward(exec, ac, dyc, dxc);
      else if (kind == RowKind::log_softmax) kflash::log_softmax_backward(exec, ac, dyc, dxc);
      else kflash::logsumexp_backward(exec, ac, lse, dlse, dxc);
      return;
    }
    if constexpr (!kflash::impl::is_half_type<T>) baseline_row_backward(exec, log_space, ac, dyc, dxc, sums);
  });
  const double bytes = double(rows) * cols * sizeof(T) * (kind == RowKind::logsumexp ? 2 : 3);
  set_rate(state, bytes, "GB/s");
  if (variant != 0) {
    record_baseline(key, s, double(rows) * sizeof(T), "baseline_2pass");
    return;
  }
  set_relative(state, backend + (kind == RowKind::logsumexp ? "/copy_bw" : "/triad_bw"), bytes, key, s, 0);
  set_work(state, 3 * double(rows) * double(cols), bytes);
}

/// One case of cross_entropy_backward at rows x vocabulary (label smoothing 0.1, dloss 1/rows as a
/// mean's gradient). variant 0: kflash in place over the logits with the forward's lse (one read and
/// one write: copy's limit); 2: kflash in place without lse (the statistics read the logits once
/// more); 1: the baseline as frameworks compose it from the log-probabilities the forward kept, a
/// kernel writing the loss's gradient with respect to them (the smoothed one-hot times dloss), then
/// log_softmax_backward.
template <class Exec, class T>
void cross_entropy_backward_case(benchmark::State& state, const std::string& backend, index_t rows, index_t cols,
                                 int variant) {
  using mem = typename Exec::memory_space;
  using A = kflash::impl::arith_t<T>;  // the type of dloss and lse
  const Exec exec;
  Kokkos::View<T**, Kokkos::LayoutRight, mem> x("x", rows, cols), lp("log_p", variant == 1 ? rows : 0, cols),
      dlp("dlog_p", variant == 1 ? rows : 0, cols);
  Kokkos::View<std::int64_t*, mem> targets("targets", rows);
  Kokkos::View<A*, mem> dloss("dloss", rows), lse("lse", rows);
  fill_normal(x, 1);
  Kokkos::deep_copy(dloss, A(1) / A(rows));
  Kokkos::parallel_for("targets", Kokkos::RangePolicy<Exec>(exec, 0, rows),
                       KOKKOS_LAMBDA(index_t r) { targets(r) = (r * 7919) % cols; });
  kflash::logsumexp(exec, x, lse);
  constexpr bool half = kflash::impl::is_half_type<T>;  // 16-bit logits: kflash's calls only
  if constexpr (!half) {
    if (variant == 1) kflash::log_softmax(exec, x, lp);
  }
  const std::string key = backend + "/cross_entropy_backward/" + type_name<T>() + "/" + std::to_string(rows) + "x" +
                          std::to_string(cols);
  kflash::CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  const A eps = A(o.label_smoothing);
  using Logits = decltype(x);
  Rotation<Logits, Logits, Logits> rotation(
      rotated_sets<Exec>(double(x.span() + lp.span() + dlp.span()) * sizeof(T)), x, lp, dlp);
  state.counters["sets"] = double(rotation.sets());
  // In place: each call overwrites x with a gradient that the next call takes as logits, whose
  // values stay moderate (|dlogits| <= 1 / rows), so the timing is of the same work throughout.
  const double s = run_timed(state, exec, [&] {
    const auto& set = rotation.next();
    const Logits& xc = std::get<0>(set);
    const Logits lpc = std::get<1>(set), dlpc = std::get<2>(set);  // copies: the device lambda captures dlpc
    if (variant == 0) {
      kflash::cross_entropy_backward(exec, xc, targets, dloss, xc, o, lse);
    } else if (variant == 2) {
      kflash::cross_entropy_backward(exec, xc, targets, dloss, xc, o);
    } else if constexpr (!half) {
      Kokkos::parallel_for("baseline::dlog_p", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
                           KOKKOS_LAMBDA(index_t r, index_t c) {
                             dlpc(r, c) = -dloss(r) * (eps / T(cols) + (c == targets(r) ? T(1) - eps : T(0)));
                           });
      kflash::log_softmax_backward(exec, lpc, dlpc, dlpc);
    }
  });
  const double bytes = double(rows) * cols * sizeof(T) * 2;  // one read and one write of the logits
  set_rate(state, bytes, "GB/s");
  if (variant == 1) {
    record_baseline(key, s, 2.0 * rows * cols * sizeof(T), "baseline_log_softmax_backward");  // log_p, dlog_p
    return;
  }
  using Traits = kflash::impl::ScheduleTraits<Exec>;
  const auto plan = kflash::impl::plan_rows<A, Traits>(exec, rows, cols);
  set_relative(state, backend + "/copy_bw", bytes, key, s,
               variant == 2 ? double(plan.rows * plan.chunks) * sizeof(kflash::impl::LogitStats<A>) : 0);
  set_work(state, 4 * double(rows) * double(cols), bytes);
}

// --- attention ---------------------------------------------------------------------------------

/// An attention option a case turns on (beyond causal and the window).
enum class AttnOption { none, softcap, alibi, sinks, bias, mask, documents };

/// The documents case's user mask: documents of 512 tokens, a query sees its own document's keys.
struct DocumentMask {
  static constexpr std::int64_t length = 512;
  KOKKOS_INLINE_FUNCTION bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    return i / length == j / length;
  }
};

inline const char* option_name(AttnOption o) {
  switch (o) {
    case AttnOption::softcap: return "softcap";
    case AttnOption::alibi: return "alibi";
    case AttnOption::sinks: return "sinks";
    case AttnOption::bias: return "bias";
    case AttnOption::mask: return "mask";
    case AttnOption::documents: return "documents";
    default: return "";
  }
}

/// How a case's sequences sit: dense (B, H, N, D) Views; varlen, B packed sequences of lengths
/// spread evenly from 1 to Nq (= Nk); paged, K and V in a cache of 64-slot pages in shuffled order.
enum class AttnLayout { dense, varlen, paged };

struct AttnCase {
  index_t B, H, Hk, Nq, Nk, D;
  bool causal;
  bool decode;  // reported as bytes of K and V read, against the read bandwidth
  int window = -1;  // window_left (with window_right 0), -1: none
  AttnOption option = AttnOption::none;
  AttnLayout layout = AttnLayout::dense;
};

constexpr index_t bench_page_size = 64;

/// The varlen case's sequence lengths: 1 + (Nq - 1) b / (B - 1), b < B.
inline std::vector<index_t> varlen_lengths(const AttnCase& c) {
  std::vector<index_t> n(std::size_t(c.B), c.Nq);
  for (index_t b = 0; b < c.B && c.B > 1; ++b) n[std::size_t(b)] = 1 + (c.Nq - 1) * b / (c.B - 1);
  return n;
}

/// The single sequence with as many (query, key) pairs as B sequences of varlen_lengths.
inline index_t varlen_equivalent(const AttnCase& c) {
  double pairs = 0;
  for (index_t n : varlen_lengths(c)) pairs += double(n) * double(n);
  return index_t(std::lround(std::sqrt(pairs)));
}

inline std::string attn_shape(const AttnCase& c) {
  return std::to_string(c.B) + "x" + std::to_string(c.H) + (c.Hk != c.H ? "(kv" + std::to_string(c.Hk) + ")" : "") +
         "x" + std::to_string(c.Nq) + (c.Nk != c.Nq ? "x" + std::to_string(c.Nk) : "") + "x" +
         std::to_string(c.D) + (c.causal ? "/causal" : "") +
         (c.window >= 0 ? "/window" + std::to_string(c.window) : "") +
         (c.option != AttnOption::none ? std::string("/") + option_name(c.option) : "") +
         (c.layout == AttnLayout::varlen  ? "/varlen"
          : c.layout == AttnLayout::paged ? "/paged" + std::to_string(bench_page_size)
                                          : "");
}

/// The options of case c; the Views they need are made here (filled with moderate values).
template <class Exec, class T>
kflash::AttentionOptions attn_options(const AttnCase& c) {
  using mem = typename Exec::memory_space;
  kflash::AttentionOptions opt;
  opt.causal = c.causal;
  if (c.window >= 0) {
    opt.window_left = c.window;
    opt.window_right = 0;
  }
  switch (c.option) {
    case AttnOption::documents:  // the user mask's exact block mask, so that tiles across documents are skipped
      opt.block_mask = kflash::make_block_mask(Exec(), DocumentMask(), c.B, c.H, c.Nq, c.Nk);
      break;
    case AttnOption::softcap: opt.softcap = 30; break;
    case AttnOption::alibi: {
      Kokkos::View<T*, mem> slopes("slopes", c.H);
      Kokkos::deep_copy(slopes, T(0.0625));
      opt.alibi_slopes = slopes;
      break;
    }
    case AttnOption::sinks: {
      Kokkos::View<T*, mem> sinks("sinks", c.H);
      Kokkos::deep_copy(sinks, T(0.5));
      opt.sinks = sinks;
      break;
    }
    case AttnOption::bias: {  // one bias for every batch and head, as relative-position biases are
      Kokkos::View<T****, Kokkos::LayoutRight, mem> bias("bias", 1, 1, c.Nq, c.Nk);
      fill_normal(bias, 4);
      opt.bias = bias;
      break;
    }
    case AttnOption::mask: {
      Kokkos::View<bool****, Kokkos::LayoutRight, mem> mask("mask", 1, 1, c.Nq, c.Nk);
      Kokkos::deep_copy(mask, true);
      opt.mask = mask;
      break;
    }
    default: break;
  }
  return opt;
}

/// The keys each query row of case c sees (causal, or the window with window_right 0).
inline kflash::impl::KeyMask attn_mask(const AttnCase& c) {
  return kflash::impl::KeyMask{c.Nk, c.Nk - c.Nq, c.window, c.causal || c.window >= 0 ? 0 : -1};
}

/// The (query, key) pairs of case c that the causal mask and the window leave visible.
inline double visible_pairs(const AttnCase& c) {
  if (c.layout == AttnLayout::varlen) {  // non-causal, no window: the sequences' pairs, per batch
    double pairs = 0;
    for (index_t n : varlen_lengths(c)) pairs += double(n) * double(n);
    return pairs / double(c.B);
  }
  const kflash::impl::KeyMask mask = attn_mask(c);
  double pairs = 0;
  for (index_t i = 0; i < c.Nq; ++i) {
    const kflash::impl::KeyRange keys = mask.keys_of(i);
    if (c.option == AttnOption::documents) {
      for (index_t j = keys.begin; j < keys.end; ++j) pairs += DocumentMask()(0, 0, i, j) ? 1 : 0;
    } else {
      pairs += double(keys.end - keys.begin);
    }
  }
  return pairs;
}

/// variant 0: kflash::attention; 1: materialised (S = scale Q K^T by GEMM, row softmax, O = P V by
/// GEMM), head by head with one Nq x Nk score buffer, as a Kokkos Kernels user would write it;
/// onednn_variant (bf16 on hosts): the same through oneDNN's bf16 matmul and softmax (OneDnnAttention).
template <class Exec, class T>
void attention_case(benchmark::State& state, const std::string& backend, const AttnCase& c, int variant,
                    int blas_thread_count) {
  using mem = typename Exec::memory_space;
  const Exec exec;
  Kokkos::View<T****, Kokkos::LayoutRight, mem> q("q", c.B, c.H, c.Nq, c.D), k("k", c.B, c.Hk, c.Nk, c.D),
      v("v", c.B, c.Hk, c.Nk, c.D), o("o", c.B, c.H, c.Nq, c.D);
  fill_normal(q, 1);
  fill_normal(k, 2);
  fill_normal(v, 3);
  using A = kflash::impl::arith_t<T>;  // the options', lse's and workspace's type: float for 16-bit T
  kflash::AttentionOptions opt = attn_options<Exec, A>(c);
  const std::string key = backend + (c.decode ? "/decode/" : "/attention/") + type_name<T>() + "/" + attn_shape(c);
  double s = 0;
  double baseline_extra = double(c.Nq) * c.Nk * sizeof(T);  // the materialised baselines' buffers
  if (variant == 0 && c.layout == AttnLayout::varlen) {
    // The B sequences packed one after another: (total, H, D), in q's and k's memory.
    const std::vector<index_t> n = varlen_lengths(c);
    Kokkos::View<index_t*, mem> cu("cu_seqlens", n.size() + 1);
    auto hcu = Kokkos::create_mirror_view(cu);
    hcu(0) = 0;
    for (std::size_t b = 0; b < n.size(); ++b) hcu(b + 1) = hcu(b) + n[b];
    Kokkos::deep_copy(cu, hcu);
    const std::size_t total = std::size_t(hcu(n.size()));
    using V3 = Kokkos::View<T***, Kokkos::LayoutRight, mem>;
    const V3 pq(q.data(), total, c.H, c.D), pk(k.data(), total, c.Hk, c.D), pv(v.data(), total, c.Hk, c.D),
        po(o.data(), total, c.H, c.D);
    opt.cu_seqlens_q = cu;
    opt.cu_seqlens_k = cu;
    s = run_timed(state, exec, [&] { kflash::attention(exec, pq, pk, pv, po, opt); });
  } else if (variant == 0 && c.layout == AttnLayout::paged) {
    // Each batch's keys in pages of bench_page_size slots, the pages in shuffled order.
    const index_t per_seq = (c.Nk + bench_page_size - 1) / bench_page_size, pages = c.B * per_seq;
    Kokkos::View<T****, Kokkos::LayoutRight, mem> kc("k_cache", pages, bench_page_size, c.Hk, c.D),
        vc("v_cache", pages, bench_page_size, c.Hk, c.D);
    fill_normal(kc, 2);
    fill_normal(vc, 3);
    std::vector<index_t> order(static_cast<std::size_t>(pages));
    for (index_t i = 0; i < pages; ++i) order[std::size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(7));
    Kokkos::View<index_t**, Kokkos::LayoutRight, mem> table("block_table", c.B, per_seq);
    Kokkos::View<index_t*, mem> lengths("cache_seqlens", c.B);
    auto ht = Kokkos::create_mirror_view(table);
    for (index_t i = 0; i < pages; ++i) ht.data()[i] = order[std::size_t(i)];
    Kokkos::deep_copy(table, ht);
    Kokkos::deep_copy(lengths, c.Nk);
    opt.block_table = table;
    opt.cache_seqlens = lengths;
    s = run_timed(state, exec, [&] { kflash::attention(exec, q, kc, vc, o, opt); });
  } else if (variant == 0 && c.option == AttnOption::documents) {
    const Kokkos::View<A***, mem> lse("lse", c.B, c.H, c.Nq);
    s = run_timed(state, exec, [&] { kflash::attention(exec, q, k, v, o, opt, lse, kflash::NoScoreMod(), DocumentMask()); });
  } else if (variant == 0) {
    s = run_timed(state, exec, [&] { kflash::attention(exec, q, k, v, o, opt); });
  } else if (variant == onednn_variant) {
#if KFLASH_BENCH_HAS_ONEDNN
    if constexpr (std::is_same<T, kflash::bhalf_t>::value && kflash::impl::ScheduleTraits<Exec>::is_host) {
      OneDnnAttention onednn(c.Nq, c.Nk, c.D, float(1 / std::sqrt(double(c.D))), blas_thread_count);
      // Causal: the keys past each query's diagonal (bottom-right aligned, as kflash's) get -inf.
      const Kokkos::View<float**, Kokkos::LayoutRight, mem, Kokkos::MemoryUnmanaged> scores(onednn.scores(), c.Nq,
                                                                                            c.Nk);
      const index_t offset = c.Nk - c.Nq, Nk = c.Nk;
      const auto mask = [&] {
        if (c.causal)
          Kokkos::parallel_for(
              "baseline::causal", Kokkos::RangePolicy<Exec>(exec, 0, c.Nq), KOKKOS_LAMBDA(index_t i) {
                for (index_t j = i + offset + 1; j < Nk; ++j) scores(i, j) = -std::numeric_limits<float>::infinity();
              });
        exec.fence();
      };
      s = run_timed(state, exec, [&] {
        for (index_t b = 0; b < c.B; ++b)
          for (index_t h = 0; h < c.H; ++h) {
            const index_t hk = h / (c.H / c.Hk);
            onednn(&q(b, h, 0, 0), &k(b, hk, 0, 0), &v(b, hk, 0, 0), &o(b, h, 0, 0), mask);
          }
      });
      baseline_extra = double(onednn.buffer_bytes());
    }
#endif
  } else if constexpr (std::is_same<T, A>::value) {  // 16-bit attention: kflash's call only
#if KFLASH_BENCH_HAS_CBLAS
    Kokkos::View<T**, Kokkos::LayoutRight, mem> scores("scores", c.Nq, c.Nk);
    Kokkos::View<T*, mem> mx("max", c.Nq), sm("sum", c.Nq);
    const T scale = T(1 / std::sqrt(double(c.D)));
    blas_threads(blas_thread_count);
    s = run_timed(state, exec, [&] {
      for (index_t b = 0; b < c.B; ++b)
        for (index_t h = 0; h < c.H; ++h) {
          const index_t hk = h / (c.H / c.Hk);
          gemm(false, true, int(c.Nq), int(c.Nk), int(c.D), scale, &q(b, h, 0, 0), &k(b, hk, 0, 0), T(0), scores.data());
          baseline_rows(exec, RowKind::softmax, 3, scores, scores, mx, sm, c.causal ? c.Nk - c.Nq : -1);
          exec.fence();
          gemm(false, false, int(c.Nq), int(c.D), int(c.Nk), T(1), scores.data(), &v(b, hk, 0, 0), T(0), &o(b, h, 0, 0));
        }
    });
#endif
  }
  const double flops = 4.0 * c.B * c.H * visible_pairs(c) * c.D;  // visible pairs only
  const double bytes = 2.0 * c.B * c.Hk * double(c.Nk) * c.D * sizeof(T);  // K and V read once
  if (c.decode) set_rate(state, bytes, "GB/s");
  else set_rate(state, flops, "GFLOP/s");
  if (variant != 0) {
    record_baseline(key, s, baseline_extra, variant == onednn_variant ? "baseline_onednn" : "baseline_materialised");
    return;
  }
  kflash::impl::AttentionPlan p;
  p.B = c.B, p.Hq = c.H, p.Hk = c.Hk, p.Nq = c.Nq, p.Nk = c.Nk, p.D = c.D, p.Dv = c.D;
  p.window_left = attn_mask(c).left, p.window_right = attn_mask(c).right;
  p = kflash::impl::plan_attention<T, kflash::impl::ScheduleTraits<Exec>>(exec, p);
  const bool host = kflash::impl::ScheduleTraits<Exec>::is_host;
  constexpr bool bf16 = std::is_same<T, kflash::bhalf_t>::value;
  const double extra = double(kflash::impl::AttentionWorkspace<A, mem>(p, host && bf16).bytes);
  // Attention is held against the multiply-add peak (the host's measured per instruction set
  // where kflash-bench has its peak kernels), and on host backends also against the BLAS GEMM of
  // the same threads: "as fast as the BLAS" is a claim of its own. 16-bit attention computes in
  // float: its limits are float's, except bf16 on hosts whose kernels take the hardware's bf16
  // products (AMX tiles, AVX512-BF16 dot products): their peak measured in the same run.
  const std::string gemm = backend + (sizeof(A) == 4 ? "/sgemm" : "/dgemm");
  std::string peak = backend + (sizeof(A) == 4 ? "/fma_fp32" : "/fma_fp64");
#if KFLASH_BENCH_HAS_HOST_PEAK
  if (host && bf16 && has_amx())
    peak = backend + "/amx_bf16";
  else if (host && bf16 && has_bf16_dot())
    peak = backend + "/bf16_dot";
#endif
  const std::string limit = c.decode ? backend + "/read_bw" : !host || KFLASH_BENCH_HAS_HOST_PEAK ? peak : gemm;
  set_relative(state, limit, c.decode ? bytes : flops, key, s, extra);
  set_work(state, flops,
           (2.0 * c.B * c.H * double(c.Nq) * c.D + 2.0 * c.B * c.Hk * double(c.Nk) * c.D) * sizeof(T));  // Q, O, K, V once
  if (host && !c.decode && shared().limit.count(gemm) && shared().limit[gemm] > 0)
    state.counters["frac_of_blas_gemm"] = flops / median_call(state, s) / shared().limit[gemm];
}

/// attention_backward after one forward of case c (dense layout; its options as attention_case's):
/// FLOP counted as FlashAttention counts them, 2.5 times the forward's, against the multiply-add
/// peak; the extra memory is D, one value per query row, and on hosts the packed operands, the
/// partial dq and each thread's tiles. variant 1: materialised through the BLAS, head by head as a
/// BLAS user would write it: S = scale Q K^T, P = softmax(S) (the forward baseline's row passes),
/// dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)) by one Kokkos pass, dQ = scale dS K,
/// dK += scale dS^T Q; two Nq x Nk buffers.
template <class Exec, class T>
void attention_backward_case(benchmark::State& state, const std::string& backend, const AttnCase& c, int variant,
                             int blas_thread_count) {
  using mem = typename Exec::memory_space;
  using V4 = Kokkos::View<T****, Kokkos::LayoutRight, mem>;
  const Exec exec;
  const V4 q("q", c.B, c.H, c.Nq, c.D), k("k", c.B, c.Hk, c.Nk, c.D), v("v", c.B, c.Hk, c.Nk, c.D),
      o("o", c.B, c.H, c.Nq, c.D), dout("dout", c.B, c.H, c.Nq, c.D), dq("dq", c.B, c.H, c.Nq, c.D),
      dk("dk", c.B, c.Hk, c.Nk, c.D), dv("dv", c.B, c.Hk, c.Nk, c.D);
  const Kokkos::View<T***, mem> lse("lse", c.B, c.H, c.Nq);
  fill_normal(q, 1);
  fill_normal(k, 2);
  fill_normal(v, 3);
  fill_normal(dout, 4);
  const kflash::AttentionOptions opt = attn_options<Exec, T>(c);
  const std::string key = backend + "/attention_backward/" + type_name<T>() + "/" + attn_shape(c);
  const double flops = 2.5 * 4.0 * c.B * c.H * visible_pairs(c) * c.D;
  if (variant != 0) {
#if KFLASH_BENCH_HAS_CBLAS
    using M = Kokkos::View<T**, Kokkos::LayoutRight, mem>;
    const M p("p", c.Nq, c.Nk), dp("dp", c.Nq, c.Nk);
    Kokkos::View<T*, mem> mx("max", c.Nq), sm("sum", c.Nq);
    const T scale = T(1 / std::sqrt(double(c.D)));
    const int Nq = int(c.Nq), Nk = int(c.Nk), D = int(c.D), group = int(c.H / c.Hk);
    const index_t Nkv = c.Nk;
    blas_threads(blas_thread_count);
    const double s = run_timed(state, exec, [&] {
      for (index_t b = 0; b < c.B; ++b)
        for (index_t h = 0; h < c.H; ++h) {
          const index_t hk = h / group;
          const T first = h % group == 0 ? T(0) : T(1);  // dK, dV summed over the group's heads
          gemm(false, true, Nq, Nk, D, scale, &q(b, h, 0, 0), &k(b, hk, 0, 0), T(0), p.data());
          baseline_rows(exec, RowKind::softmax, 3, p, p, mx, sm, c.causal ? c.Nk - c.Nq : -1);
          exec.fence();
          gemm(true, false, Nk, D, Nq, T(1), p.data(), &dout(b, h, 0, 0), first, &dv(b, hk, 0, 0));
          gemm(false, true, Nq, Nk, D, T(1), &dout(b, h, 0, 0), &v(b, hk, 0, 0), T(0), dp.data());
          Kokkos::parallel_for("baseline::softmax_backward", Kokkos::RangePolicy<Exec>(exec, 0, c.Nq),
                               KOKKOS_LAMBDA(index_t i) {
                                 T dot = 0;
                                 for (index_t j = 0; j < Nkv; ++j) dot += p(i, j) * dp(i, j);
                                 for (index_t j = 0; j < Nkv; ++j) dp(i, j) = p(i, j) * (dp(i, j) - dot);
                               });
          exec.fence();
          gemm(false, false, Nq, D, Nk, scale, dp.data(), &k(b, hk, 0, 0), T(0), &dq(b, h, 0, 0));
          gemm(true, false, Nk, D, Nq, scale, dp.data(), &q(b, h, 0, 0), first, &dk(b, hk, 0, 0));
        }
    });
    set_rate(state, flops, "GFLOP/s");
    record_baseline(key, s, 2.0 * double(c.Nq) * c.Nk * sizeof(T), "baseline_materialised");
#endif
    return;
  }
  kflash::attention(exec, q, k, v, o, opt, lse);
  const double s = run_timed(state, exec, [&] { kflash::attention_backward(exec, q, k, v, o, lse, dout, dq, dk, dv, opt); });
  set_rate(state, flops, "GFLOP/s");
  const bool host = kflash::impl::ScheduleTraits<Exec>::is_host;
  const std::string peak = backend + (sizeof(T) == 4 ? "/fma_fp32" : "/fma_fp64");
  const std::string limit = !host || KFLASH_BENCH_HAS_HOST_PEAK ? peak : backend + (sizeof(T) == 4 ? "/sgemm" : "/dgemm");
  // On hosts: the host schedule's workspace (packed operands, partial dq) and each thread's tiles.
  using HT = kflash::impl::HostTraits;
  kflash::impl::AttentionPlan plan;
  plan.B = c.B, plan.Hq = c.H, plan.Hk = c.Hk, plan.Nq = c.Nq, plan.Nk = c.Nk, plan.D = plan.Dv = c.D;
  const auto packs = kflash::impl::host::BackwardPacks::of<T, mem>(plan);
  const double bl = double(HT::backward_block), tile_values = 2 * bl * double(packs.dp) + 2 * bl * bl;
  const double host_extra = host ? double(packs.bytes) + double(exec.concurrency()) * tile_values * sizeof(T) : 0;
  set_relative(state, limit, flops, key, s, double(c.B) * c.H * double(c.Nq) * sizeof(T) + host_extra);
  set_work(state, flops, (5.0 * c.B * c.H * double(c.Nq) + 4.0 * c.B * c.Hk * double(c.Nk)) * c.D * sizeof(T));
}

}  // namespace kflash_bench
