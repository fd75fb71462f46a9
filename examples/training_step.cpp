// One training step of a linear classifier (softmax regression) in fp64: logits = X W^T, the mean
// cross-entropy with label smoothing over the samples (one of them padding), its gradient through
// kflash::cross_entropy_backward in place over the logits, dW = dlogits^T X, a check of dW against
// central differences of the loss, then a gradient-descent step that must lower the loss.
#include <kflash/kflash.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
using Matrix = Kokkos::View<double**, Kokkos::LayoutRight, Mem>;

constexpr int samples = 64, features = 32, classes = 10;

/// logits = X W^T.
void forward(const Exec& exec, const Matrix& x, const Matrix& w, const Matrix& logits) {
  Kokkos::parallel_for(
      "logits", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {samples, classes}),
      KOKKOS_LAMBDA(int n, int c) {
        double s = 0;
        for (int f = 0; f < features; ++f) s += x(n, f) * w(c, f);
        logits(n, c) = s;
      });
}

/// The mean loss of the samples not ignored.
double mean_loss(const Exec& exec, const Matrix& x, const Matrix& w, const Kokkos::View<int*, Mem>& targets,
                 const kflash::CrossEntropyOptions& options) {
  Matrix logits("logits", samples, classes);
  Kokkos::View<double*, Mem> loss("loss", samples);
  Kokkos::View<double, Mem> mean("mean");
  forward(exec, x, w, logits);
  kflash::cross_entropy(exec, logits, targets, loss, mean, options);
  double m;
  Kokkos::deep_copy(m, mean);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    const Exec exec;
    Matrix x("x", samples, features), w("w", classes, features), logits("logits", samples, classes),
        dw("dw", classes, features);
    Kokkos::View<int*, Mem> targets("targets", samples);
    Kokkos::parallel_for(
        "data", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {samples, features}),
        KOKKOS_LAMBDA(int n, int f) { x(n, f) = double((n * 7919 + f * 104729) % 2003) / 1001.5 - 1.0; });
    Kokkos::parallel_for(
        "weights", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {classes, features}),
        KOKKOS_LAMBDA(int c, int f) { w(c, f) = double((c * 31 + f * 17) % 13) / 26.0 - 0.25; });
    Kokkos::parallel_for(
        "targets", Kokkos::RangePolicy<Exec>(exec, 0, samples),
        KOKKOS_LAMBDA(int n) { targets(n) = n == 7 ? -100 : (n * 3) % classes; });  // sample 7: padding
    kflash::CrossEntropyOptions options;
    options.label_smoothing = 0.05;
    const int counted = samples - 1;

    // Forward, loss, and the loss's gradient with respect to the logits, in place: the mean's
    // gradient is 1 / counted for each sample (the ignored one gets 0 whatever dloss says).
    const double loss0 = mean_loss(exec, x, w, targets, options);
    forward(exec, x, w, logits);
    Kokkos::View<double*, Mem> dloss("dloss", samples);
    Kokkos::deep_copy(dloss, 1.0 / counted);
    kflash::cross_entropy_backward(exec, logits, targets, dloss, logits, options);
    Kokkos::parallel_for(
        "dw", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {classes, features}),
        KOKKOS_LAMBDA(int c, int f) {
          double s = 0;
          for (int n = 0; n < samples; ++n) s += logits(n, c) * x(n, f);
          dw(c, f) = s;
        });

    // dW against central differences of the loss, entry by entry (step 1e-5: the O(h^2) term and
    // fp64's rounding over 2h stay near 1e-10 absolute; 1e-6 relative is asked).
    // (create_mirror: copies even where w is host memory, so that probing leaves w alone)
    const auto w_h = Kokkos::create_mirror(w);
    Kokkos::deep_copy(w_h, w);
    const auto dw_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dw);
    const auto probe = Kokkos::create_mirror(w);
    double worst = 0;
    for (int c = 0; c < classes; c += 3) {
      for (int f = 0; f < features; f += 7) {
        const double h = 1e-5;
        double diff[2];
        for (int side = 0; side < 2; ++side) {
          Kokkos::deep_copy(probe, w_h);
          probe(c, f) += side == 0 ? h : -h;
          Matrix w_probe("w_probe", classes, features);
          Kokkos::deep_copy(w_probe, probe);
          diff[side] = mean_loss(exec, x, w_probe, targets, options);
        }
        const double fd = (diff[0] - diff[1]) / (2 * h);
        worst = std::fmax(worst, std::fabs(fd - dw_h(c, f)) / std::fmax(1e-3, std::fabs(fd)));
      }
    }

    // A gradient-descent step.
    const double rate = 0.5;
    Kokkos::parallel_for(
        "step", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {classes, features}),
        KOKKOS_LAMBDA(int c, int f) { w(c, f) -= rate * dw(c, f); });
    const double loss1 = mean_loss(exec, x, w, targets, options);
    std::printf("loss %.6f -> %.6f after one step; dW against central differences: worst relative error %.2e\n",
                loss0, loss1, worst);
    if (!(worst <= 1e-6)) {
      std::printf("FAILED: the gradient disagrees with the finite differences\n");
      status = 1;
    }
    if (!(loss1 < loss0)) {
      std::printf("FAILED: the step did not lower the loss\n");
      status = 1;
    }
  }
  Kokkos::finalize();
  return status;
}
