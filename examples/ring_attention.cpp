// kflash::mpi on any number of ranks (ctest runs it on 2): causal attention over a sequence sharded
// across the ranks in the zigzag layout (ring_attention), and the cross-entropy of logits whose
// vocabulary is sharded across the ranks. Each rank checks its part against the single-process
// calls on the whole problem, which every rank also builds.
#include <kflash/kflash.hpp>
#include <kflash/mpi.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    using Exec = Kokkos::DefaultHostExecutionSpace;  // host memory: MPI need not be CUDA-aware
    using V4 = Kokkos::View<float****, Kokkos::LayoutRight, Exec::memory_space>;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const Exec exec;

    // --- Ring attention: heads 4, head dimension 32, 64 positions per rank.
    const int H = 4, D = 32, local = 64, N = local * size;
    auto value = [](int which, int h, int i, int d) { return float(((which * 131 + h) * 7919 + i * 31 + d * 17) % 101) / 50.0f - 1.0f; };
    V4 q("q", 1, H, N, D), k("k", 1, H, N, D), v("v", 1, H, N, D), o("o", 1, H, N, D);
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < N; ++i)
        for (int d = 0; d < D; ++d) q(0, h, i, d) = value(0, h, i, d), k(0, h, i, d) = value(1, h, i, d), v(0, h, i, d) = value(2, h, i, d);
    kflash::AttentionOptions causal;
    causal.causal = true;
    kflash::attention(exec, q, k, v, o, causal);  // the whole sequence in one process: the reference

    // This rank's positions: chunks rank and 2 size - 1 - rank of 2 size (the zigzag layout).
    V4 ql("ql", 1, H, local, D), kl("kl", 1, H, local, D), vl("vl", 1, H, local, D), ol("ol", 1, H, local, D);
    const auto pieces = kflash::mpi::sequence_pieces(rank, size, local, /*zigzag=*/true);
    for (const auto& p : pieces)
      for (int h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < p.length; ++i)
          for (int d = 0; d < D; ++d) {
            ql(0, h, p.local + i, d) = q(0, h, p.offset + i, d);
            kl(0, h, p.local + i, d) = k(0, h, p.offset + i, d);
            vl(0, h, p.local + i, d) = v(0, h, p.offset + i, d);
          }
    kflash::mpi::ring_attention(exec, MPI_COMM_WORLD, ql, kl, vl, ol, causal);
    exec.fence();
    float attention_err = 0;
    for (const auto& p : pieces)
      for (int h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < p.length; ++i)
          for (int d = 0; d < D; ++d)
            attention_err = std::fmax(attention_err, std::fabs(ol(0, h, p.local + i, d) - o(0, h, p.offset + i, d)));

    // --- Vocabulary-parallel cross-entropy: 6 rows of 10000 classes, rank r holding a slice.
    const int rows = 6, vocab = 10000;
    const int col0 = vocab * rank / size, cols = vocab * (rank + 1) / size - col0;
    Kokkos::View<float**, Kokkos::LayoutRight, Exec::memory_space> logits("logits", rows, vocab),
        mine("mine", rows, cols);
    Kokkos::View<std::int64_t*, Exec::memory_space> targets("targets", rows);
    for (int r = 0; r < rows; ++r) {
      targets(r) = (r * 3571) % vocab;
      for (int c = 0; c < vocab; ++c) logits(r, c) = float((r * 7919 + c * 104729) % 1009) / 100.0f;
      for (int c = 0; c < cols; ++c) mine(r, c) = logits(r, col0 + c);
    }
    Kokkos::View<float*, Exec::memory_space> loss("loss", rows), loss_ref("loss_ref", rows);
    kflash::cross_entropy(exec, logits, targets, loss_ref);
    kflash::mpi::cross_entropy(exec, MPI_COMM_WORLD, mine, targets, loss);  // one MPI_Allreduce
    exec.fence();
    float loss_err = 0;
    for (int r = 0; r < rows; ++r) loss_err = std::fmax(loss_err, std::fabs(loss(r) - loss_ref(r)) / loss_ref(r));

    std::printf("rank %d of %d: ring attention vs attention max |difference| %.3g; sharded cross-entropy vs one "
                "process max relative difference %.3g\n",
                rank, size, double(attention_err), double(loss_err));
    int bad = attention_err > 1e-5f || loss_err > 1e-5f;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    status = bad;
  }
  Kokkos::finalize();
  MPI_Finalize();
  return status;
}
