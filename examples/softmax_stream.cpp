// Streaming softmax: the logits of a 50k-token vocabulary arrive in blocks (as from a vocabulary-
// sharded projection), each absorbed as it comes; log_softmax of the whole rows at the end. The
// result is checked against a one-shot kflash::log_softmax of the same rows.
#include <kflash/kflash.hpp>

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    using Exec = Kokkos::DefaultExecutionSpace;
    using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, Exec::memory_space>;
    const int rows = 4, vocab = 50257, block = 4096;
    const Exec exec;

    // The logits, produced one block of columns at a time.
    auto logit = KOKKOS_LAMBDA(int r, int c) { return float((c * 7919 + r * 104729) % 2003) / 125.0f - 8.0f; };

    Matrix y("y", rows, vocab);
    kflash::SoftmaxStream<float, Exec> stream(exec, y);
    for (int c0 = 0; c0 < vocab; c0 += block) {
      const int width = c0 + block < vocab ? block : vocab - c0;
      Matrix tile("tile", rows, width);
      Kokkos::parallel_for(
          "produce", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {rows, width}),
          KOKKOS_LAMBDA(int r, int c) { tile(r, c) = logit(r, c0 + c); });
      stream.update(exec, tile, c0);
    }
    Kokkos::View<float*, Exec::memory_space> lse("lse", rows);
    stream.logsumexp(exec, lse);
    stream.finalize(exec, y, kflash::Normalize::log_prob);  // in place: y now holds log_softmax

    // The same rows at once.
    Matrix x("x", rows, vocab), ref("ref", rows, vocab);
    Kokkos::parallel_for(
        "produce all", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {rows, vocab}),
        KOKKOS_LAMBDA(int r, int c) { x(r, c) = logit(r, c); });
    kflash::log_softmax(exec, x, ref);
    float err = 0;
    Kokkos::parallel_reduce(
        "compare", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {rows, vocab}),
        KOKKOS_LAMBDA(int r, int c, float& e) {
          const float d = y(r, c) > ref(r, c) ? y(r, c) - ref(r, c) : ref(r, c) - y(r, c);
          if (d > e) e = d;
        },
        Kokkos::Max<float>(err));
    const auto lse_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
    for (int r = 0; r < rows; ++r) std::printf("row %d: logsumexp %.6f\n", r, double(lse_h(r)));
    std::printf("streamed log_softmax vs one-shot: max |difference| = %.3g\n", double(err));
    status = err <= 1e-5f ? 0 : 1;
  }
  Kokkos::finalize();
  return status;
}
