// kflash-mpi-bench: ring attention across the ranks it is started on, or, started as one process,
// kflash::attention on the whole sequence with the process's threads (the single-process figure the
// ring is compared with). kflash-mpi-compare runs both, alternated, and prints the ratio.
//
//   mpirun -np 2 -x OMP_NUM_THREADS=1 kflash-mpi-bench [--n 8192] [--heads 8] [--d 64] [--causal] [--reps 3]
//   OMP_NUM_THREADS=2 kflash-mpi-bench [same options]
//
// Prints one line: the case, the ranks and threads, the best time of --reps runs after a warm-up
// (for the ring: the slowest rank's), and GFLOP/s of 4 H D times the visible pairs.
#include <kflash/kflash.hpp>
#include <kflash/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace {

// Host memory: Debian's OpenMPI is not CUDA-aware (device Views would need one).
using Exec = Kokkos::DefaultHostExecutionSpace;
using Mem = Exec::memory_space;
using V4 = Kokkos::View<float****, Kokkos::LayoutRight, Mem>;

struct Args {
  long n = 8192, heads = 8, d = 64, reps = 3;
  bool causal = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kflash-mpi-bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return std::atol(argv[++i]);
    };
    if (s == "--n") a.n = value();
    else if (s == "--heads") a.heads = value();
    else if (s == "--d") a.d = value();
    else if (s == "--reps") a.reps = value();
    else if (s == "--causal") a.causal = true;
    else if (s.rfind("--kokkos", 0) != 0) {
      std::fprintf(stderr, "usage: kflash-mpi-bench [--n N] [--heads H] [--d D] [--causal] [--reps R]\n");
      std::exit(2);
    }
  }
  return a;
}

V4 random_view(const char* label, long h, long n, long d, unsigned seed) {
  V4 v(std::string(label), std::size_t(1), std::size_t(h), std::size_t(n), std::size_t(d));
  auto host = Kokkos::create_mirror_view(v);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (std::size_t i = 0; i < host.size(); ++i) host.data()[i] = dist(gen);
  Kokkos::deep_copy(v, host);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const Args a = parse(argc, argv);
    const long local = a.n / size;
    if (local * size != a.n || (a.causal && local % 2 != 0)) {
      if (rank == 0) std::fprintf(stderr, "kflash-mpi-bench: --n %ld must split into %d equal (even, causal) parts\n", a.n, size);
      status = 2;
    } else {
      // Each rank's positions: a contiguous block, or the zigzag pieces for causal.
      const V4 q = random_view("q", a.heads, local, a.d, 1 + unsigned(rank)), k = random_view("k", a.heads, local, a.d, 101 + unsigned(rank)),
               v = random_view("v", a.heads, local, a.d, 201 + unsigned(rank));
      V4 o("o", std::size_t(1), std::size_t(a.heads), std::size_t(local), std::size_t(a.d));
      kflash::AttentionOptions opt;
      opt.causal = a.causal;
      auto run = [&] {
        if (size == 1) kflash::attention(Exec(), q, k, v, o, opt);
        else kflash::mpi::ring_attention(Exec(), MPI_COMM_WORLD, q, k, v, o, opt);
        Exec().fence();
      };
      run();  // warm-up
      double best = 1e300;
      for (long r = 0; r < a.reps; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        run();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank
        best = std::min(best, s);
      }
      const double pairs = a.causal ? 0.5 * double(a.n) * double(a.n + 1) : double(a.n) * double(a.n);
      const double gflops = 4.0 * double(a.heads) * double(a.d) * pairs / best * 1e-9;
      if (rank == 0)
        std::printf("%s fp32 N=%ld H=%ld D=%ld causal=%d ranks=%d threads=%d time_ms=%.2f GFLOP/s=%.1f\n",
                    size == 1 ? "attention" : "ring_attention", a.n, a.heads, a.d, int(a.causal), size,
                    Exec().concurrency(), best * 1e3, gflops);
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return status;
}
