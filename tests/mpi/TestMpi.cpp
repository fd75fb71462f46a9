// kflash::mpi under mpirun (any number of ranks, 1 to 4 in ctest): every rank builds the whole
// problem from the same seed, runs the single-process kflash call on all of it as the reference,
// and runs the MPI call on its shard; the two agree within the contract's rounding bounds. Shape and
// argument errors raise an exception on every rank, without a hang.
#include <kflash/kflash.hpp>
#include <kflash/mpi.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Host memory: Debian's OpenMPI is not CUDA-aware (device Views would need one).
using Exec = Kokkos::DefaultHostExecutionSpace;
using Mem = Exec::memory_space;
using Scalars = ::testing::Types<float, double>;

int comm_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int comm_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

template <class T>
std::vector<T> normal_values(std::size_t n, unsigned seed, double sigma = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, sigma);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(gen));
  return v;
}

/// Uneven column counts that sum to cols: rank r gets a share growing with r, and rank 1 none when
/// there are 3 or more ranks (a rank may hold no columns).
std::vector<std::int64_t> column_counts(std::int64_t cols, int size) {
  std::vector<std::int64_t> w(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) w[std::size_t(r)] = size >= 3 && r == 1 ? 0 : r + 1;
  std::int64_t total_w = 0;
  for (auto x : w) total_w += x;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(size));
  std::int64_t given = 0;
  for (int r = 0; r < size; ++r) {
    counts[std::size_t(r)] = r + 1 == size ? cols - given : cols * w[std::size_t(r)] / total_w;
    given += counts[std::size_t(r)];
  }
  return counts;
}

template <class T>
Kokkos::View<T**, Kokkos::LayoutRight, Mem> matrix(std::size_t rows, std::size_t cols, const std::vector<T>& host,
                                                   std::size_t col0, std::size_t stride) {
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> m("m", rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) h(r, c) = host[r * stride + col0 + c];
  Kokkos::deep_copy(m, h);
  return m;
}

template <class T>
struct MpiTest : ::testing::Test {};
TYPED_TEST_SUITE(MpiTest, Scalars);

// state_op: every rank's states reduce to the merge of all of them, with the same bits on every rank.
TYPED_TEST(MpiTest, StateOp) {
  using T = TypeParam;
  using S = kflash::SoftmaxState<T>;
  const int n = 37;
  const auto values = normal_values<T>(std::size_t(n) * 50 * std::size_t(comm_size()), 3, 20.0);
  std::vector<S> mine(n, S::identity()), all(n, S::identity());
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < comm_size(); ++r)
      for (int j = 0; j < 50; ++j) {
        const T x = values[(std::size_t(i) * std::size_t(comm_size()) + std::size_t(r)) * 50 + std::size_t(j)];
        all[std::size_t(i)].push(x);
        if (r == comm_rank()) mine[std::size_t(i)].push(x);
      }
  ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, mine.data(), n, kflash::mpi::state_type<T>(), kflash::mpi::state_op<T>(),
                          MPI_COMM_WORLD),
            MPI_SUCCESS);
  const T rel = std::is_same<T, float>::value ? T(2e-6) : T(2e-13);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(mine[std::size_t(i)].max, all[std::size_t(i)].max) << "state " << i;
    EXPECT_LE(std::fabs(mine[std::size_t(i)].total() - all[std::size_t(i)].total()), rel * all[std::size_t(i)].total())
        << "state " << i;
  }
  std::vector<S> gathered(std::size_t(n) * std::size_t(comm_size()));
  MPI_Allgather(mine.data(), n, kflash::mpi::state_type<T>(), gathered.data(), n, kflash::mpi::state_type<T>(),
                MPI_COMM_WORLD);
  for (int r = 1; r < comm_size(); ++r)
    EXPECT_EQ(std::memcmp(gathered.data(), gathered.data() + std::size_t(r) * std::size_t(n), sizeof(S) * std::size_t(n)), 0)
        << "rank " << r << "'s result differs in its bits from rank 0's";
}

// softmax, log_softmax and logsumexp of rows sharded by columns (uneven shards, one rank may hold
// none) against the single-process calls on the whole rows.
template <class T>
void check_sharded_rows(std::size_t rows, std::int64_t cols) {
  const auto host = normal_values<T>(rows * std::size_t(cols), 5, 4.0);
  const auto counts = column_counts(cols, comm_size());
  std::int64_t col0 = 0;
  for (int r = 0; r < comm_rank(); ++r) col0 += counts[std::size_t(r)];
  const std::int64_t mine = counts[std::size_t(comm_rank())];
  const auto whole = matrix<T>(rows, std::size_t(cols), host, 0, std::size_t(cols));
  const auto x = matrix<T>(rows, std::size_t(mine), host, std::size_t(col0), std::size_t(cols));
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> p_ref("p_ref", rows, std::size_t(cols)), q_ref("q_ref", rows, std::size_t(cols));
  Kokkos::View<T*, Mem> lse_ref("lse_ref", rows), lse("lse", rows);
  kflash::softmax(Exec(), whole, p_ref);
  kflash::log_softmax(Exec(), whole, q_ref);
  kflash::logsumexp(Exec(), whole, lse_ref);
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> p("p", rows, std::size_t(mine)), q("q", rows, std::size_t(mine));
  kflash::mpi::softmax(Exec(), MPI_COMM_WORLD, x, p);
  kflash::mpi::log_softmax(Exec(), MPI_COMM_WORLD, x, q);
  kflash::mpi::logsumexp(Exec(), MPI_COMM_WORLD, x, lse);
  const auto ph = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p);
  const auto qh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  const auto lh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  const auto ph_ref = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p_ref);
  const auto qh_ref = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q_ref);
  const auto lh_ref = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse_ref);
  // Both sides are within the contract of the exact values: l within 2e-6 (fp32) / 2e-13 (fp64), so
  // they differ by at most twice that, plus the rounding of each output.
  const double rel = std::is_same<T, float>::value ? 4e-6 : 4e-13;
  const double ulp = std::numeric_limits<T>::epsilon();
  const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " on " + std::to_string(comm_size()) +
                            " ranks, rank " + std::to_string(comm_rank());
  for (std::size_t r = 0; r < rows; ++r) {
    ASSERT_LE(std::fabs(double(lh(r)) - double(lh_ref(r))), rel + 4 * ulp * std::fabs(double(lh_ref(r))))
        << where << " logsumexp row " << r;
    for (std::int64_t c = 0; c < mine; ++c) {
      const double pr = ph_ref(r, std::size_t(col0 + c)), qr = qh_ref(r, std::size_t(col0 + c));
      ASSERT_LE(std::fabs(double(ph(r, std::size_t(c))) - pr), (rel + 64 * ulp) * pr + std::numeric_limits<T>::min())
          << where << " softmax (" << r << ", " << col0 + c << ")";
      ASSERT_LE(std::fabs(double(qh(r, std::size_t(c))) - qr), rel + 8 * ulp * (1 + std::fabs(qr)))
          << where << " log_softmax (" << r << ", " << col0 + c << ")";
    }
  }
}

TYPED_TEST(MpiTest, ShardedRows) {
  check_sharded_rows<TypeParam>(5, 1000);
  check_sharded_rows<TypeParam>(3, 200000);  // each shard split across threads
  check_sharded_rows<TypeParam>(4, 2);       // fewer columns than ranks
}

// Vocabulary-parallel cross-entropy against kflash::cross_entropy on the whole vocabulary.
TYPED_TEST(MpiTest, ShardedCrossEntropy) {
  using T = TypeParam;
  const std::size_t rows = 9;
  const std::int64_t vocab = 50000;
  const auto host = normal_values<T>(rows * std::size_t(vocab), 7, 3.0);
  const auto counts = column_counts(vocab, comm_size());
  std::int64_t col0 = 0;
  for (int r = 0; r < comm_rank(); ++r) col0 += counts[std::size_t(r)];
  const std::int64_t mine = counts[std::size_t(comm_rank())];
  const auto whole = matrix<T>(rows, std::size_t(vocab), host, 0, std::size_t(vocab));
  const auto x = matrix<T>(rows, std::size_t(mine), host, std::size_t(col0), std::size_t(vocab));
  Kokkos::View<std::int64_t*, Mem> targets("targets", rows);
  auto th = Kokkos::create_mirror_view(targets);
  for (std::size_t r = 0; r < rows; ++r) th(r) = r == 4 ? -100 : std::int64_t((r * 7919 + 13) % std::size_t(vocab));
  th(0) = 0, th(1) = vocab - 1;  // the first and the last class (first and last rank)
  Kokkos::deep_copy(targets, th);
  kflash::CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  o.z_loss = 1e-4;
  Kokkos::View<T*, Mem> loss("loss", rows), loss_ref("loss_ref", rows);
  Kokkos::View<T, Mem> mean("mean"), mean_ref("mean_ref");
  kflash::cross_entropy(Exec(), whole, targets, loss_ref, mean_ref, o);
  kflash::mpi::cross_entropy(Exec(), MPI_COMM_WORLD, x, targets, loss, mean, o);
  const auto lh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss);
  const auto lr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss_ref);
  const double rel = std::is_same<T, float>::value ? 4e-6 : 4e-13;
  for (std::size_t r = 0; r < rows; ++r)
    EXPECT_LE(std::fabs(double(lh(r)) - double(lr(r))), rel * (1 + std::fabs(double(lr(r))))) << "row " << r;
  T m, mr;
  Kokkos::deep_copy(m, mean);
  Kokkos::deep_copy(mr, mean_ref);
  EXPECT_LE(std::fabs(double(m) - double(mr)), rel * (1 + std::fabs(double(mr))));
  // A target outside the whole vocabulary: the same exception on every rank.
  th(2) = vocab;
  Kokkos::deep_copy(targets, th);
  try {
    kflash::mpi::cross_entropy(Exec(), MPI_COMM_WORLD, x, targets, loss, o);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("targets(2) = " + std::to_string(vocab) + " is outside [0, " +
                                         std::to_string(vocab) + ") (the vocabulary: the ranks' logits columns together)"),
              std::string::npos)
        << e.what();
  }
}

/// Runs f on every rank and expects std::invalid_argument on every rank, each message containing
/// the part given for that rank.
template <class F>
void expect_invalid_everywhere(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "rank " << comm_rank() << ": no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "rank " << comm_rank() << ": " << e.what();
  }
}

TEST(MpiErrors, ShapesThatDisagreeRaiseOnEveryRank) {
  if (comm_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const bool first = comm_rank() == 0;
  // Rows that differ between ranks.
  Kokkos::View<float**, Mem> x("x", first ? 4 : 5, 10), y("y", first ? 4 : 5, 10);
  Kokkos::View<float*, Mem> lse("lse", first ? 4 : 5);
  expect_invalid_everywhere([&] { kflash::mpi::softmax(Exec(), MPI_COMM_WORLD, x, y); }, "must agree on every rank");
  expect_invalid_everywhere([&] { kflash::mpi::logsumexp(Exec(), MPI_COMM_WORLD, x, lse); }, "must agree on every rank");
  // One rank's own arguments are wrong: it names them, the others name it.
  Kokkos::View<float**, Mem> a("a", 4, 10), b("b", 4, first ? 9 : 10);
  expect_invalid_everywhere([&] { kflash::mpi::log_softmax(Exec(), MPI_COMM_WORLD, a, b); },
                            first ? "must have the shape of" : "rank 0 refused its arguments");
  // Targets that differ between ranks in one row (each rank holds every row's target).
  Kokkos::View<float**, Mem> logits("logits", 4, 10);
  Kokkos::View<int*, Mem> targets("targets", 4);
  Kokkos::View<float*, Mem> loss("loss", 4);
  if (comm_rank() == comm_size() - 1) Kokkos::deep_copy(Kokkos::subview(targets, 3), 7);
  expect_invalid_everywhere([&] { kflash::mpi::cross_entropy(Exec(), MPI_COMM_WORLD, logits, targets, loss); },
                            "targets (their fingerprint, the last value) must agree on every rank");
  // Ring attention with a head dimension that differs between ranks.
  const std::size_t d = first ? 16 : 8;
  Kokkos::View<float****, Mem> q("q", 1, 2, 8, d), k("k", 1, 2, 8, d), v("v", 1, 2, 8, 8), o("o", 1, 2, 8, 8);
  expect_invalid_everywhere([&] { kflash::mpi::ring_attention(Exec(), MPI_COMM_WORLD, q, k, v, o); },
                            "the local shapes and the options must agree on every rank");
}

TEST(MpiErrors, CausalRingNeedsTheZigzagLayout) {
  Kokkos::View<float****, Mem> q("q", 1, 2, 7, 8), k("k", 1, 2, 7, 8), v("v", 1, 2, 7, 8), o("o", 1, 2, 7, 8);
  kflash::AttentionOptions opt;
  opt.causal = true;
  expect_invalid_everywhere([&] { kflash::mpi::ring_attention(Exec(), MPI_COMM_WORLD, q, k, v, o, opt); },
                            "zigzag layout");
}

// Ring attention against attention() over the whole sequence, for several option sets: each rank's
// rows of the whole result (its sequence pieces) within the contract's 1e-5 (fp32) / 1e-12 (fp64) of
// max |reference|.
struct RingCase {
  const char* name;
  bool causal;
  int window_left, window_right;
  double softcap;
  bool sinks, alibi;
};

template <class T>
void check_ring(const RingCase& c) {
  const int size = comm_size(), rank = comm_rank();
  const std::size_t B = 2, Hq = 4, Hk = 2, D = 16, Dv = 8, n_local = 24, N = n_local * std::size_t(size);
  using V4 = Kokkos::View<T****, Kokkos::LayoutRight, Mem>;
  auto fill = [&](std::size_t h, std::size_t n, std::size_t d, unsigned seed) {
    V4 a("a", B, h, n, d);
    auto ah = Kokkos::create_mirror_view(a);
    const auto vals = normal_values<T>(a.size(), seed);
    std::copy(vals.begin(), vals.end(), ah.data());
    Kokkos::deep_copy(a, ah);
    return a;
  };
  const V4 q = fill(Hq, N, D, 11), k = fill(Hk, N, D, 12), v = fill(Hk, N, Dv, 13);
  kflash::AttentionOptions opt;
  opt.causal = c.causal;
  opt.window_left = c.window_left;
  opt.window_right = c.window_right;
  opt.softcap = c.softcap;
  Kokkos::View<T*, Mem> sinks("sinks", Hq), slopes("slopes", Hq);
  Kokkos::deep_copy(sinks, T(0.5));
  Kokkos::deep_copy(slopes, T(0.25));
  if (c.sinks) opt.sinks = sinks;
  if (c.alibi) opt.alibi_slopes = slopes;
  V4 o_ref("o_ref", B, Hq, N, Dv);
  Kokkos::View<T***, Kokkos::LayoutRight, Mem> lse_ref("lse_ref", B, Hq, N);
  kflash::attention(Exec(), q, k, v, o_ref, opt, lse_ref);
  // This rank's pieces of the sequence, gathered into its local Views.
  const auto pieces = kflash::mpi::sequence_pieces(rank, size, std::int64_t(n_local), c.causal);
  V4 ql("ql", B, Hq, n_local, D), kl("kl", B, Hk, n_local, D), vl("vl", B, Hk, n_local, Dv), ol("ol", B, Hq, n_local, Dv);
  Kokkos::View<T***, Kokkos::LayoutRight, Mem> lsel("lsel", B, Hq, n_local);
  for (const auto& p : pieces) {
    const auto local = Kokkos::make_pair(p.local, p.local + p.length);
    const auto whole = Kokkos::make_pair(p.offset, p.offset + p.length);
    Kokkos::deep_copy(Kokkos::subview(ql, Kokkos::ALL, Kokkos::ALL, local, Kokkos::ALL),
                      Kokkos::subview(q, Kokkos::ALL, Kokkos::ALL, whole, Kokkos::ALL));
    Kokkos::deep_copy(Kokkos::subview(kl, Kokkos::ALL, Kokkos::ALL, local, Kokkos::ALL),
                      Kokkos::subview(k, Kokkos::ALL, Kokkos::ALL, whole, Kokkos::ALL));
    Kokkos::deep_copy(Kokkos::subview(vl, Kokkos::ALL, Kokkos::ALL, local, Kokkos::ALL),
                      Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, whole, Kokkos::ALL));
  }
  kflash::mpi::ring_attention(Exec(), MPI_COMM_WORLD, ql, kl, vl, ol, opt, lsel);
  const auto oh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ol);
  const auto lh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lsel);
  const auto orh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o_ref);
  const auto lrh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse_ref);
  double max_ref = 0;
  for (std::size_t i = 0; i < orh.size(); ++i) max_ref = std::max(max_ref, std::fabs(double(orh.data()[i])));
  const double tol = (std::is_same<T, float>::value ? 1e-5 : 1e-12) * std::max(1.0, max_ref);
  const std::string where = std::string(c.name) + " on " + std::to_string(size) + " ranks, rank " + std::to_string(rank);
  for (const auto& p : pieces)
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < Hq; ++h)
        for (std::int64_t i = 0; i < p.length; ++i) {
          const std::size_t li = std::size_t(p.local + i), gi = std::size_t(p.offset + i);
          const double lr = lrh(b, h, gi), lg = lh(b, h, li);
          if (std::isinf(lr)) ASSERT_EQ(lg, lr) << where << " lse (" << b << ", " << h << ", " << gi << ")";
          else ASSERT_LE(std::fabs(lg - lr), tol * (1 + std::fabs(lr))) << where << " lse (" << b << ", " << h << ", " << gi << ")";
          for (std::size_t d = 0; d < Dv; ++d)
            ASSERT_LE(std::fabs(double(oh(b, h, li, d)) - double(orh(b, h, gi, d))), tol)
                << where << " o (" << b << ", " << h << ", " << gi << ", " << d << ")";
        }
}

TYPED_TEST(MpiTest, RingAttention) {
  const RingCase cases[] = {{"full", false, -1, -1, 0, false, false},
                            {"causal (zigzag)", true, -1, -1, 0, false, false},
                            {"causal, window 10, softcap, sinks", true, 10, -1, 30, true, false},
                            {"window (7, 5), ALiBi", false, 7, 5, 0, false, true}};
  for (const RingCase& c : cases) {
    check_ring<TypeParam>(c);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// 16-bit storage (bhalf_t, half_t): the sharded rows, the sharded cross-entropy and ring attention
// against the single-process kflash calls on the same 16-bit values. Each side is within one unit
// in the last place of its 16-bit outputs (plus float's error) of the exact values, so they differ
// by at most two such units; attention by twice GUIDE §9's bound of max |reference|.
template <class H>
std::vector<H> halves(std::size_t n, unsigned seed, double sigma) {
  std::vector<H> out;
  for (double x : normal_values<double>(n, seed, sigma)) out.push_back(kflash::impl::narrow<H>(float(x)));
  return out;
}

template <class H>
double wide(H h) {
  return double(kflash::impl::to_float(h));
}

template <class H>
void check_half_sharding() {
  constexpr int mant = std::is_same<H, kflash::half_t>::value ? 10 : 7;
  const auto unit = [&](double v) { return std::ldexp(std::fabs(v), 1 - mant) + 1e-7 * (1 + std::fabs(v)); };
  const std::size_t rows = 5;
  const std::int64_t cols = 3000;
  const auto host = halves<H>(rows * std::size_t(cols), 21, 3.0);
  const auto counts = column_counts(cols, comm_size());
  std::int64_t col0 = 0;
  for (int r = 0; r < comm_rank(); ++r) col0 += counts[std::size_t(r)];
  const std::int64_t mine = counts[std::size_t(comm_rank())];
  const auto whole = matrix<H>(rows, std::size_t(cols), host, 0, std::size_t(cols));
  const auto x = matrix<H>(rows, std::size_t(mine), host, std::size_t(col0), std::size_t(cols));
  Kokkos::View<H**, Kokkos::LayoutRight, Mem> p_ref("p_ref", rows, std::size_t(cols)), p("p", rows, std::size_t(mine));
  Kokkos::View<float*, Mem> lse_ref("lse_ref", rows), lse("lse", rows);
  kflash::softmax(Exec(), whole, p_ref);
  kflash::logsumexp(Exec(), whole, lse_ref);
  kflash::mpi::softmax(Exec(), MPI_COMM_WORLD, x, p);
  kflash::mpi::logsumexp(Exec(), MPI_COMM_WORLD, x, lse);
  const auto ph = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p);
  const auto ph_ref = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p_ref);
  const auto lh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  const auto lh_ref = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse_ref);
  const std::string where = std::string(std::is_same<H, kflash::half_t>::value ? "half_t" : "bhalf_t") + " on " +
                            std::to_string(comm_size()) + " ranks, rank " + std::to_string(comm_rank());
  for (std::size_t r = 0; r < rows; ++r) {
    ASSERT_LE(std::fabs(double(lh(r)) - double(lh_ref(r))), 4e-6 * (1 + std::fabs(double(lh_ref(r)))))
        << where << " logsumexp row " << r;
    for (std::int64_t c = 0; c < mine; ++c) {
      const double want = wide(ph_ref(r, std::size_t(col0 + c))), got = wide(ph(r, std::size_t(c)));
      ASSERT_LE(std::fabs(got - want), unit(want)) << where << " softmax (" << r << ", " << col0 + c << ")";
    }
  }
  // Cross-entropy of 16-bit logits, float loss.
  Kokkos::View<std::int64_t*, Mem> targets("targets", rows);
  auto th = Kokkos::create_mirror_view(targets);
  for (std::size_t r = 0; r < rows; ++r) th(r) = std::int64_t((r * 977 + 5) % std::size_t(cols));
  Kokkos::deep_copy(targets, th);
  kflash::CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  Kokkos::View<float*, Mem> loss("loss", rows), loss_ref("loss_ref", rows);
  kflash::cross_entropy(Exec(), whole, targets, loss_ref, o);
  kflash::mpi::cross_entropy(Exec(), MPI_COMM_WORLD, x, targets, loss, o);
  const auto l = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss);
  const auto lr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss_ref);
  for (std::size_t r = 0; r < rows; ++r)
    EXPECT_LE(std::fabs(double(l(r)) - double(lr(r))), 4e-6 * (1 + std::fabs(double(lr(r))))) << where << " loss " << r;
}

template <class H>
void check_half_ring() {
  const int size = comm_size(), rank = comm_rank();
  const std::size_t B = 1, Hq = 4, Hk = 2, D = 16, Dv = 8, n_local = 24, N = n_local * std::size_t(size);
  using V4 = Kokkos::View<H****, Kokkos::LayoutRight, Mem>;
  auto fill = [&](std::size_t h, std::size_t n, std::size_t d, unsigned seed) {
    V4 a("a", B, h, n, d);
    auto ah = Kokkos::create_mirror_view(a);
    const auto vals = halves<H>(a.size(), seed, 1.0);
    std::copy(vals.begin(), vals.end(), ah.data());
    Kokkos::deep_copy(a, ah);
    return a;
  };
  const V4 q = fill(Hq, N, D, 31), k = fill(Hk, N, D, 32), v = fill(Hk, N, Dv, 33);
  kflash::AttentionOptions opt;
  opt.causal = true;
  V4 o_ref("o_ref", B, Hq, N, Dv), ol("ol", B, Hq, n_local, Dv);
  Kokkos::View<float***, Kokkos::LayoutRight, Mem> lse_ref("lse_ref", B, Hq, N), lsel("lsel", B, Hq, n_local);
  kflash::attention(Exec(), q, k, v, o_ref, opt, lse_ref);
  const auto pieces = kflash::mpi::sequence_pieces(rank, size, std::int64_t(n_local), true);
  V4 ql("ql", B, Hq, n_local, D), kl("kl", B, Hk, n_local, D), vl("vl", B, Hk, n_local, Dv);
  for (const auto& p : pieces) {
    const auto local = Kokkos::make_pair(p.local, p.local + p.length);
    const auto at = Kokkos::make_pair(p.offset, p.offset + p.length);
    Kokkos::deep_copy(Kokkos::subview(ql, Kokkos::ALL, Kokkos::ALL, local, Kokkos::ALL),
                      Kokkos::subview(q, Kokkos::ALL, Kokkos::ALL, at, Kokkos::ALL));
    Kokkos::deep_copy(Kokkos::subview(kl, Kokkos::ALL, Kokkos::ALL, local, Kokkos::ALL),
                      Kokkos::subview(k, Kokkos::ALL, Kokkos::ALL, at, Kokkos::ALL));
    Kokkos::deep_copy(Kokkos::subview(vl, Kokkos::ALL, Kokkos::ALL, local, Kokkos::ALL),
                      Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, at, Kokkos::ALL));
  }
  kflash::mpi::ring_attention(Exec(), MPI_COMM_WORLD, ql, kl, vl, ol, opt, lsel);
  const auto oh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ol);
  const auto orh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o_ref);
  const auto lh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lsel);
  const auto lrh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse_ref);
  double max_ref = 0;
  for (std::size_t i = 0; i < orh.size(); ++i) max_ref = std::max(max_ref, std::fabs(wide(orh.data()[i])));
  const double tol = 2 * std::ldexp(1.0, std::is_same<H, kflash::half_t>::value ? -11 : -8) * max_ref + 1e-5;
  for (const auto& p : pieces)
    for (std::size_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < p.length; ++i) {
        const std::size_t li = std::size_t(p.local + i), gi = std::size_t(p.offset + i);
        ASSERT_LE(std::fabs(double(lh(0, h, li)) - double(lrh(0, h, gi))), 1e-5 * (1 + std::fabs(double(lrh(0, h, gi)))))
            << "rank " << rank << " lse (" << h << ", " << gi << ")";
        for (std::size_t d = 0; d < Dv; ++d)
          ASSERT_LE(std::fabs(wide(oh(0, h, li, d)) - wide(orh(0, h, gi, d))), tol)
              << "rank " << rank << " o (" << h << ", " << gi << ", " << d << ")";
      }
}

TEST(MpiHalf, ShardedRowsCrossEntropyAndRing) {
  check_half_sharding<kflash::bhalf_t>();
  check_half_sharding<kflash::half_t>();
  check_half_ring<kflash::bhalf_t>();
  check_half_ring<kflash::half_t>();
}

/// Prints each failed assertion, with its rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::cout << "rank " << comm_rank() << ": " << (r.file_name() ? r.file_name() : "") << ":" << r.line_number()
                << ": failure\n"
                << r.summary() << std::endl;
  }
};

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int result = 0;
  {
    ::testing::InitGoogleTest(&argc, argv);
    if (comm_rank() != 0) {  // rank 0 reports progress; the others print their failures only
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailurePrinter);
    }
    if (comm_rank() == 0)
      std::cout << "kflash::mpi tests on " << comm_size() << " ranks of " << Exec().concurrency() << " threads\n";
    result = RUN_ALL_TESTS();
    // Every rank's verdict: the run fails if any rank failed.
    int any = result != 0;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    result = any;
  }
  Kokkos::finalize();
  MPI_Finalize();
  return result;
}
