// kflash-demo: softmax and logsumexp on every enabled backend, checked against a long-double host
// reference, and causal attention checked on sampled rows, with a short table of errors, times and
// rates. (The benchmark suite replaces it later.)
#include <kflash/kflash.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace {

using ld = long double;

struct Row {
  std::string backend, kernel, shape;
  double max_rel_err, ms;
  bool ok;
  std::string rate;  // GB/s (minimum traffic) or GFLOP/s
};

std::string rate(double units, double ms, const char* unit) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", units / (ms * 1e-3) / 1e9, unit);
  return buf;
}

struct Data {
  std::size_t rows, cols;
  std::vector<float> x;
  std::vector<ld> lse;  // reference per row
};

Data make_data(std::size_t rows, std::size_t cols, unsigned seed) {
  Data d{rows, cols, std::vector<float>(rows * cols), std::vector<ld>(rows)};
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (auto& v : d.x) v = dist(gen);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = d.x.data() + r * cols;
    ld m = row[0], l = 0;
    for (std::size_t c = 0; c < cols; ++c) m = std::max<ld>(m, row[c]);
    for (std::size_t c = 0; c < cols; ++c) l += std::exp(ld(row[c]) - m);
    d.lse[r] = m + std::log(l);
  }
  return d;
}

template <class Exec>
void run_backend(const Data& d, std::vector<Row>& table) {
  using mem = typename Exec::memory_space;
  const Exec exec;
  Kokkos::View<float**, Kokkos::LayoutRight, mem> x("x", d.rows, d.cols), y("y", d.rows, d.cols);
  Kokkos::View<float*, mem> lse("lse", d.rows);
  auto hx = Kokkos::create_mirror_view(x);
  for (std::size_t i = 0; i < d.x.size(); ++i) hx.data()[i] = d.x[i];
  Kokkos::deep_copy(x, hx);
  const std::string shape = std::to_string(d.rows) + " x " + std::to_string(d.cols);

  auto time_ms = [&](auto&& f) {
    f();  // warm-up: first touch of the output and workspaces
    exec.fence();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    exec.fence();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };

  const double t_softmax = time_ms([&] { kflash::softmax(exec, x, y); });
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  double err = 0;
  for (std::size_t r = 0; r < d.rows; ++r)
    for (std::size_t c = 0; c < d.cols; ++c) {
      const ld p = std::exp(ld(d.x[r * d.cols + c]) - d.lse[r]);
      err = std::max<double>(err, std::fabs((hy(r, c) - p) / p));
    }
  const double bytes = double(d.rows * d.cols * sizeof(float));
  table.push_back({Exec::name(), "softmax", shape, err, t_softmax, err < 1e-5, rate(2 * bytes, t_softmax, "GB/s")});

  const double t_lse = time_ms([&] { kflash::logsumexp(exec, x, lse); });
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  err = 0;
  for (std::size_t r = 0; r < d.rows; ++r)
    err = std::max<double>(err, std::fabs((hl(r) - d.lse[r]) / d.lse[r]));
  table.push_back({Exec::name(), "logsumexp", shape, err, t_lse, err < 1e-6, rate(bytes, t_lse, "GB/s")});
}

/// Causal attention (B = 1, H = 8, N = 2048, D = 64), fp32; 64 sampled rows checked against a
/// long-double reference: max |O - ref| / max |ref| over them.
template <class Exec>
void run_attention(std::vector<Row>& table) {
  using mem = typename Exec::memory_space;
  const int B = 1, H = 8, N = 2048, D = 64;
  const Exec exec;
  Kokkos::View<float****, mem> q("q", B, H, N, D), k("k", B, H, N, D), v("v", B, H, N, D), o("o", B, H, N, D);
  auto hq = Kokkos::create_mirror_view(q), hk = Kokkos::create_mirror_view(k), hv = Kokkos::create_mirror_view(v);
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (std::size_t i = 0; i < hq.size(); ++i) {
    hq.data()[i] = dist(gen);
    hk.data()[i] = dist(gen);
    hv.data()[i] = dist(gen);
  }
  Kokkos::deep_copy(q, hq);
  Kokkos::deep_copy(k, hk);
  Kokkos::deep_copy(v, hv);
  kflash::AttentionOptions opt;
  opt.causal = true;
  exec.fence();
  const auto t0 = std::chrono::steady_clock::now();
  kflash::attention(exec, q, k, v, o, opt);
  exec.fence();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  double err = 0, ref_max = 0;
  const ld scale = 1 / std::sqrt(ld(D));
  for (int sample = 0; sample < 64; ++sample) {
    const int h = sample % H, i = (sample * 997) % N;
    std::vector<ld> s(i + 1), acc(D, 0);
    ld m = -INFINITY, l = 0;
    for (int j = 0; j <= i; ++j) {
      ld dot = 0;
      for (int d = 0; d < D; ++d) dot += ld(hq(0, h, i, d)) * hk(0, h, j, d);
      s[j] = scale * dot;
      m = std::max(m, s[j]);
    }
    for (int j = 0; j <= i; ++j) {
      const ld w = std::exp(s[j] - m);
      l += w;
      for (int d = 0; d < D; ++d) acc[d] += w * hv(0, h, j, d);
    }
    for (int d = 0; d < D; ++d) {
      err = std::max<double>(err, std::fabs(ho(0, h, i, d) - acc[d] / l));
      ref_max = std::max<double>(ref_max, std::fabs(acc[d] / l));
    }
  }
  err /= ref_max;
  const double flops = 4.0 * B * H * double(N) * N * D / 2;  // causal: half the score matrix
  table.push_back({Exec::name(), "attention", "1x8x2048x64 causal", err, ms, err < 2e-5,
                   rate(flops, ms, "GFLOP/s")});
}

}  // namespace

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard guard(argc, argv);
  kflash::print_configuration(std::cout);
  const std::vector<Data> inputs = {make_data(4096, 1024, 1), make_data(1, std::size_t(1) << 22, 2)};
  std::vector<Row> table;
  for (const Data& d : inputs) {
#if KFLASH_HAS_SERIAL
    run_backend<Kokkos::Serial>(d, table);
#endif
#if KFLASH_HAS_OPENMP
    run_backend<Kokkos::OpenMP>(d, table);
#endif
#if KFLASH_HAS_CUDA
    run_backend<Kokkos::Cuda>(d, table);
#endif
  }
#if KFLASH_HAS_SERIAL
  run_attention<Kokkos::Serial>(table);
#endif
#if KFLASH_HAS_OPENMP
  run_attention<Kokkos::OpenMP>(table);
#endif
#if KFLASH_HAS_CUDA
  run_attention<Kokkos::Cuda>(table);
#endif
  std::printf("\n%-8s %-10s %-20s %12s %10s %16s  %s\n", "backend", "kernel", "shape (fp32)", "max rel err",
              "time [ms]", "rate", "check");
  bool all_ok = true;
  for (const Row& r : table) {
    std::printf("%-8s %-10s %-20s %12.3e %10.3f %16s  %s\n", r.backend.c_str(), r.kernel.c_str(),
                r.shape.c_str(), r.max_rel_err, r.ms, r.rate.c_str(), r.ok ? "ok" : "FAILED");
    all_ok = all_ok && r.ok;
  }
  std::printf("\nReference: long double on the host. Bounds: softmax 1e-5 relative per element, "
              "logsumexp 1e-6 relative, attention 2e-5 of max |O| (64 sampled rows).\n"
              "Rates: softmax 1 read + 1 write, logsumexp 1 read; attention 4 B H N^2 D / 2 FLOP.\n");
  return all_ok ? 0 : 1;
}
