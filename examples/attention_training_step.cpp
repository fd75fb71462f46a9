// One training step of a causal self-attention layer in fp64: q, k, v = X Wq, X Wk, X Wv split into
// heads, o = kflash::attention(q, k, v) (causal), the loss 0.5 |o - Y|^2 / tokens, its gradient
// through kflash::attention_backward (dq, dk, dv from the forward's o and lse), dW = X^T dq (dk, dv),
// a check of each dW against central differences of the loss, then a gradient-descent step that
// must lower the loss.
#include <kflash/kflash.hpp>

#include <cmath>
#include <cstdio>

namespace {

using Exec = Kokkos::DefaultExecutionSpace;
using Mem = Exec::memory_space;
using Matrix = Kokkos::View<double**, Kokkos::LayoutRight, Mem>;
using Heads = Kokkos::View<double****, Kokkos::LayoutRight, Mem>;  // (batch, head, token, column)

constexpr int tokens = 24, features = 16, heads = 2, dim = features / heads;

/// The layer's weights, each features x features: column h * dim + d of Wq gives column d of head h's q.
struct Weights {
  Matrix q, k, v;
};

/// out(0, h, i, d) = sum_f x(i, f) w(f, h dim + d).
void project(const Exec& exec, const Matrix& x, const Matrix& w, const Heads& out) {
  Kokkos::parallel_for(
      "project", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {tokens, features}),
      KOKKOS_LAMBDA(int i, int c) {
        double s = 0;
        for (int f = 0; f < features; ++f) s += x(i, f) * w(f, c);
        out(0, c / dim, i, c % dim) = s;
      });
}

/// dw(f, h dim + d) = sum_i x(i, f) g(0, h, i, d): the weights' gradient from their projection's.
void project_back(const Exec& exec, const Matrix& x, const Heads& g, const Matrix& dw) {
  Kokkos::parallel_for(
      "project_back", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {features, features}),
      KOKKOS_LAMBDA(int f, int c) {
        double s = 0;
        for (int i = 0; i < tokens; ++i) s += x(i, f) * g(0, c / dim, i, c % dim);
        dw(f, c) = s;
      });
}

/// The layer's forward: o and lse from x and w.
struct Forward {
  Heads q{"q", 1, heads, tokens, dim}, k{"k", 1, heads, tokens, dim}, v{"v", 1, heads, tokens, dim};
  Heads o{"o", 1, heads, tokens, dim};
  Kokkos::View<double***, Mem> lse{"lse", 1, heads, tokens};

  void run(const Exec& exec, const Matrix& x, const Weights& w, const kflash::AttentionOptions& options) {
    project(exec, x, w.q, q), project(exec, x, w.k, k), project(exec, x, w.v, v);
    kflash::attention(exec, q, k, v, o, options, lse);
  }
};

/// 0.5 |o - y|^2 / tokens.
double loss_of(const Exec& exec, const Heads& o, const Heads& y) {
  double sum = 0;
  Kokkos::parallel_reduce(
      "loss", Kokkos::RangePolicy<Exec>(exec, 0, int(o.size())),
      KOKKOS_LAMBDA(int n, double& acc) {
        const double e = o.data()[n] - y.data()[n];
        acc += 0.5 * e * e / tokens;
      },
      sum);
  return sum;
}

double loss_at(const Exec& exec, const Matrix& x, const Weights& w, const Heads& y,
               const kflash::AttentionOptions& options) {
  Forward f;
  f.run(exec, x, w, options);
  return loss_of(exec, f.o, y);
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    const Exec exec;
    Matrix x("x", tokens, features);
    Weights w{Matrix("wq", features, features), Matrix("wk", features, features), Matrix("wv", features, features)};
    Heads y("y", 1, heads, tokens, dim);
    Kokkos::parallel_for(
        "data", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {tokens, features}),
        KOKKOS_LAMBDA(int i, int f) { x(i, f) = double((i * 7919 + f * 104729) % 2003) / 1001.5 - 1.0; });
    const Matrix ws[] = {w.q, w.k, w.v};
    for (int m = 0; m < 3; ++m) {
      const Matrix wm = ws[m];
      Kokkos::parallel_for(
          "weights", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {features, features}),
          KOKKOS_LAMBDA(int f, int c) { wm(f, c) = double((f * 31 + c * 17 + m * 5) % 13) / 26.0 - 0.25; });
    }
    Kokkos::parallel_for(
        "targets", Kokkos::RangePolicy<Exec>(exec, 0, int(y.size())),
        KOKKOS_LAMBDA(int n) { y.data()[n] = double((n * 37) % 11) / 11.0 - 0.5; });
    kflash::AttentionOptions options;
    options.causal = true;

    // Forward, loss, and the loss's gradient with respect to o: (o - y) / tokens.
    Forward f;
    f.run(exec, x, w, options);
    const double loss0 = loss_of(exec, f.o, y);
    Heads dout("dout", 1, heads, tokens, dim);
    const Heads o = f.o;
    Kokkos::parallel_for(
        "dout", Kokkos::RangePolicy<Exec>(exec, 0, int(o.size())),
        KOKKOS_LAMBDA(int n) { dout.data()[n] = (o.data()[n] - y.data()[n]) / tokens; });

    // The backward: dq, dk and dv from the forward's o and lse, then each projection's.
    Heads dq("dq", 1, heads, tokens, dim), dk("dk", 1, heads, tokens, dim), dv("dv", 1, heads, tokens, dim);
    kflash::attention_backward(exec, f.q, f.k, f.v, f.o, f.lse, dout, dq, dk, dv, options);
    Weights dw{Matrix("dwq", features, features), Matrix("dwk", features, features),
               Matrix("dwv", features, features)};
    project_back(exec, x, dq, dw.q), project_back(exec, x, dk, dw.k), project_back(exec, x, dv, dw.v);

    // Each dW against central differences of the loss, entry by entry (step 1e-5: the O(h^2) term
    // and fp64's rounding over 2h stay near 1e-10 absolute; 1e-6 relative is asked).
    double worst = 0;
    const Matrix dws[] = {dw.q, dw.k, dw.v};
    for (int m = 0; m < 3; ++m) {
      const auto w_h = Kokkos::create_mirror(ws[m]);  // a copy even where ws[m] is host memory
      Kokkos::deep_copy(w_h, ws[m]);
      const auto dw_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dws[m]);
      for (int e = 0; e < features * features; e += 23) {
        const int r = e / features, c = e % features;
        const double h = 1e-5;
        double side_loss[2];
        for (int side = 0; side < 2; ++side) {
          const auto probe = Kokkos::create_mirror(ws[m]);
          Kokkos::deep_copy(probe, w_h);
          probe(r, c) += side == 0 ? h : -h;
          Weights wp{w.q, w.k, w.v};
          Matrix moved("w_probe", features, features);
          Kokkos::deep_copy(moved, probe);
          (m == 0 ? wp.q : m == 1 ? wp.k : wp.v) = moved;
          side_loss[side] = loss_at(exec, x, wp, y, options);
        }
        const double fd = (side_loss[0] - side_loss[1]) / (2 * h);
        worst = std::fmax(worst, std::fabs(fd - dw_h(r, c)) / std::fmax(1e-3, std::fabs(fd)));
      }
    }

    // A gradient-descent step.
    const double rate = 0.5;
    for (int m = 0; m < 3; ++m) {
      const Matrix wm = ws[m], g = dws[m];
      Kokkos::parallel_for(
          "step", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {features, features}),
          KOKKOS_LAMBDA(int r, int c) { wm(r, c) -= rate * g(r, c); });
    }
    const double loss1 = loss_at(exec, x, w, y, options);
    std::printf("loss %.6f -> %.6f after one step; dWq, dWk, dWv against central differences: worst relative "
                "error %.2e\n",
                loss0, loss1, worst);
    if (!(worst <= 1e-6)) {
      std::printf("FAILED: the gradients disagree with the finite differences\n");
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
