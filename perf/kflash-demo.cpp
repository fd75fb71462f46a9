// kflash-demo: softmax and logsumexp on every enabled backend, checked against a long-double host
// reference, with a short table of errors and times. (The benchmark suite replaces it later.)
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
};

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
  table.push_back({Exec::name(), "softmax", shape, err, t_softmax, err < 1e-5});

  const double t_lse = time_ms([&] { kflash::logsumexp(exec, x, lse); });
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  err = 0;
  for (std::size_t r = 0; r < d.rows; ++r)
    err = std::max<double>(err, std::fabs((hl(r) - d.lse[r]) / d.lse[r]));
  table.push_back({Exec::name(), "logsumexp", shape, err, t_lse, err < 1e-6});
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
  std::printf("\n%-8s %-10s %-16s %14s %10s  %s\n", "backend", "kernel", "shape (fp32)", "max rel err",
              "time [ms]", "check");
  bool all_ok = true;
  for (const Row& r : table) {
    std::printf("%-8s %-10s %-16s %14.3e %10.3f  %s\n", r.backend.c_str(), r.kernel.c_str(),
                r.shape.c_str(), r.max_rel_err, r.ms, r.ok ? "ok" : "FAILED");
    all_ok = all_ok && r.ok;
  }
  std::printf("\nReference: long double on the host. Bounds: softmax 1e-5 relative per element, "
              "logsumexp 1e-6 relative.\n");
  return all_ok ? 0 : 1;
}
