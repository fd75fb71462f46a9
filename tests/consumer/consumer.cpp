// A user's program: the reducer in its own parallel_reduce, and kflash::softmax on a View.
#include <kflash/kflash.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard guard(argc, argv);
  kflash::print_configuration(std::cout);
  const int n = 1000;
  Kokkos::View<double*> x("x", n), y("y", n);
  Kokkos::parallel_for(n, KOKKOS_LAMBDA(int i) { x(i) = 0.01 * i; });

  kflash::SoftmaxState<double> s;
  Kokkos::parallel_reduce(
      n, KOKKOS_LAMBDA(int i, kflash::SoftmaxState<double>& acc) { acc.push(x(i)); },
      kflash::OnlineSoftmax<double>(s));
  kflash::softmax(x, y);
  Kokkos::fence();

  double expected = 0, sum = 0;  // logsumexp of 0.01 i, i < n, by the geometric series
  expected = std::log((std::exp(0.01 * n) - 1) / (std::exp(0.01) - 1));
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (int i = 0; i < n; ++i) sum += h(i);
  const bool ok = std::fabs(s.logsumexp() - expected) < 1e-12 * expected && std::fabs(sum - 1) < 1e-12 &&
                  KFLASH_VERSION_MAJOR >= 0;
  std::printf("logsumexp %.15g (expected %.15g), sum of softmax %.15g: %s\n", s.logsumexp(), expected, sum,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
