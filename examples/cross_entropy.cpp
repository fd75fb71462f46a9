// Cross-entropy of next-token logits: 8 positions over a 32000-token vocabulary, one of them
// padding (ignore_index), with label smoothing and PaLM's z-loss. Each position's loss and the mean
// are checked against the loss computed from kflash::log_softmax of the same logits.
#include <kflash/kflash.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    using Exec = Kokkos::DefaultExecutionSpace;
    using Mem = Exec::memory_space;
    const int positions = 8, vocab = 32000;
    const Exec exec;

    Kokkos::View<float**, Kokkos::LayoutRight, Mem> logits("logits", positions, vocab);
    Kokkos::View<std::int32_t*, Mem> targets("targets", positions);
    Kokkos::parallel_for(
        "produce", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {positions, vocab}),
        KOKKOS_LAMBDA(int r, int c) { logits(r, c) = float((c * 7919 + r * 104729) % 2003) / 125.0f - 8.0f; });
    Kokkos::parallel_for(
        "targets", Kokkos::RangePolicy<Exec>(exec, 0, positions),
        KOKKOS_LAMBDA(int r) { targets(r) = r == 5 ? -100 : (r * 4099) % vocab; });  // position 5: padding

    kflash::CrossEntropyOptions options;
    options.label_smoothing = 0.1;  // PyTorch's definition
    options.z_loss = 1e-4;          // + 1e-4 * logsumexp^2 per position
    Kokkos::View<float*, Mem> loss("loss", positions);
    Kokkos::View<float, Mem> mean("mean");
    kflash::cross_entropy(exec, logits, targets, loss, mean, options);  // one read of the logits

    // The same from log_softmax: -(1 - eps) log p_t - eps * mean_c log p_c + z * lse^2.
    Kokkos::View<float**, Kokkos::LayoutRight, Mem> log_p("log_p", positions, vocab);
    Kokkos::View<float*, Mem> lse("lse", positions);
    kflash::log_softmax(exec, logits, log_p);
    kflash::logsumexp(exec, logits, lse);
    const auto log_p_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), log_p);
    const auto lse_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
    const auto targets_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), targets);
    const auto loss_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss);
    float mean_h;
    Kokkos::deep_copy(mean_h, mean);
    double worst = 0, sum = 0;
    int counted = 0;
    for (int r = 0; r < positions; ++r) {
      double ref = 0;
      if (targets_h(r) != options.ignore_index) {
        double all = 0;
        for (int c = 0; c < vocab; ++c) all += log_p_h(r, c);
        ref = -(1 - options.label_smoothing) * log_p_h(r, targets_h(r)) - options.label_smoothing * all / vocab +
              options.z_loss * double(lse_h(r)) * lse_h(r);
        sum += ref;
        ++counted;
      }
      worst = std::fmax(worst, std::fabs(loss_h(r) - ref) / std::fmax(1.0, std::fabs(ref)));
      std::printf("position %d: target %6d  loss %.6f\n", r, int(targets_h(r)), double(loss_h(r)));
    }
    worst = std::fmax(worst, std::fabs(mean_h - sum / counted) / std::fabs(sum / counted));
    std::printf("mean over %d positions: %.6f; worst relative difference from log_softmax: %.3g\n", counted,
                double(mean_h), worst);
    status = worst <= 1e-5 ? 0 : 1;
  }
  Kokkos::finalize();
  return status;
}
