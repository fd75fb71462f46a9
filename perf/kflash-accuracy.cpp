// kflash-accuracy: relative error of l = sum exp(x - max) against a long-double reference, for a
// plain running (m, l) in the working precision, for kflash's reducer fed one element at a time
// through a RangePolicy, and for kflash::logsumexp. Normal(0, 1) rows of 2^20 and 2^24 elements.
#include <kflash/kflash.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

namespace {

using ld = long double;

template <class T>
void report(std::size_t n) {
  std::vector<T> host(n);
  std::mt19937_64 gen(n);
  std::normal_distribution<double> dist(0.0, 1.0);
  for (auto& v : host) v = static_cast<T>(dist(gen));

  ld m = -INFINITY, ref = 0;
  for (T v : host) m = std::max<ld>(m, v);
  for (std::size_t b = 0; b < n; b += 1024) {
    ld block = 0;
    for (std::size_t i = b; i < n && i < b + 1024; ++i) block += std::exp(ld(host[i]) - m);
    ref += block;
  }

  // A plain running (m, l), the textbook online softmax in the working precision.
  T pm = -INFINITY, pl = 0;
  for (T v : host) {
    if (v > pm) {
      pl = pl * std::exp(pm - v);
      pm = v;
    }
    pl += std::exp(v - pm);
  }
  const ld plain = std::fabs(ld(pl) * std::exp(ld(pm) - m) - ref) / ref;

  Kokkos::View<T*> x("x", n);
  auto hx = Kokkos::create_mirror_view(x);
  for (std::size_t i = 0; i < n; ++i) hx(i) = host[i];
  Kokkos::deep_copy(x, hx);

  kflash::SoftmaxState<T> s;
  Kokkos::parallel_reduce(
      n, KOKKOS_LAMBDA(std::size_t i, kflash::SoftmaxState<T>& acc) { acc.push(x(i)); },
      kflash::OnlineSoftmax<T>(s));
  const ld reducer = std::fabs(ld(s.total()) * std::exp(ld(s.max) - m) - ref) / ref;

  Kokkos::View<T> lse("lse");
  kflash::logsumexp(x, lse);
  T l;
  Kokkos::deep_copy(l, lse);
  // lse = m + log(l): an error e in lse is a relative error e in l.
  const ld kernel = std::fabs(ld(l) - (m + std::log(ref)));

  std::printf("%-7s 2^%-3d %18.2e %18.2e %22.2e\n", sizeof(T) == 4 ? "float" : "double",
              int(std::lround(std::log2(double(n)))), double(plain), double(reducer), double(kernel));
}

}  // namespace

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard guard(argc, argv);
  kflash::print_configuration(std::cout);
  std::printf("relative error of l = sum exp(x - max) against a long-double reference, normal(0, 1) data\n"
              "(for kflash::logsumexp: |lse - ref|, which includes the rounding of lse itself)\n\n"
              "%-7s %-5s %18s %18s %22s\n", "type", "n", "plain running sum", "kflash reducer",
              "kflash::logsumexp");
  for (std::size_t n : {std::size_t(1) << 20, std::size_t(1) << 24}) {
    report<float>(n);
    report<double>(n);
  }
  return 0;
}
