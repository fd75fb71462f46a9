// kflash::softmax, log_softmax and logsumexp on TEST_EXECSPACE against the long-double reference.
#pragma once

#include <TestCommon.hpp>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <cstring>

#include <sys/mman.h>

namespace kflash_test {

using Exec = TEST_EXECSPACE;
using Mem = Exec::memory_space;

/// Runs the three kernels on a rows x cols matrix of layout L and checks every output.
/// In place: softmax and log_softmax overwrite their input View.
template <class T, class L>
void check_matrix(std::size_t rows, std::size_t cols, const std::vector<T>& host, bool in_place,
                  const std::string& what) {
  const std::string where = what + " " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
                            typeid(L).name() + (in_place ? " in place" : "");
  auto x = make_matrix<T, L, Exec>(rows, cols, host);
  std::vector<RefRow> refs(rows);  // once for the three kernels (the long double exps dominate a large case)
  for (std::size_t r = 0; r < rows; ++r) refs[r] = reference_row(host.data() + r * cols, cols);
  for (bool log_space : {false, true}) {
    auto y = in_place ? make_matrix<T, L, Exec>(rows, cols, host)
                      : make_matrix<T, L, Exec>(rows, cols, std::vector<T>(rows * cols, T(7)));
    const auto& in = in_place ? y : x;
    if (log_space) kflash::log_softmax(Exec(), in, y);
    else kflash::softmax(Exec(), in, y);
    const auto out = to_host_row_major(y);
    for (std::size_t r = 0; r < rows; ++r) {
      expect_row_matches(refs[r], host.data() + r * cols, out.data() + r * cols, cols, log_space,
                         where + (log_space ? " log_softmax" : " softmax") + " row " + std::to_string(r));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  Kokkos::View<T*, Mem> lse("lse", rows);
  kflash::logsumexp(Exec(), x, lse);
  const auto got = to_host(lse);
  for (std::size_t r = 0; r < rows; ++r) {
    expect_lse_matches(refs[r], got[r], 8 * eps<T>, where + " logsumexp row " + std::to_string(r));
  }
}

/// The same for a rank-1 View (one row over all elements). Returns the logsumexp.
template <class T>
T check_vector(const std::vector<T>& host, ld lse_rel, bool check_softmax, const std::string& what) {
  const std::string where = what + " n=" + std::to_string(host.size());
  auto x = make_vector<T, Exec>(host);
  const RefRow ref = reference_row(host.data(), host.size());
  if (check_softmax) {
    Kokkos::View<T*, Mem> y("y", host.size());
    for (bool log_space : {false, true}) {
      if (log_space) kflash::log_softmax(Exec(), x, y);
      else kflash::softmax(Exec(), x, y);
      const auto out = to_host(y);
      expect_row_matches(ref, host.data(), out.data(), host.size(), log_space,
                         where + (log_space ? " log_softmax" : " softmax"));
    }
  }
  Kokkos::View<T, Mem> lse("lse");
  kflash::logsumexp(Exec(), x, lse);
  T got;
  Kokkos::deep_copy(got, lse);
  expect_lse_matches(ref, got, lse_rel, where + " logsumexp");
  return got;
}

template <class T>
struct SoftmaxTest : ::testing::Test {};
TYPED_TEST_SUITE(SoftmaxTest, Scalars);

template <class T, class L>
void check_shapes(bool in_place) {
  // Odd sizes, not multiples of any chunk; the wide ones are split across teams. 13x300: the host
  // kernels take such rows a few at a time (softmax's group holding at most
  // HostTraits::short_softmax_elements), the last group short.
  const std::size_t shapes[][2] = {{1, 1}, {3, 1}, {1, 7}, {5, 33}, {13, 300}, {64, 1000}, {2, 100003}, {1, 70001}};
  unsigned seed = 100;
  for (const auto& s : shapes) {
    check_matrix<T, L>(s[0], s[1], normal_values<T>(s[0] * s[1], seed++, 4.0), in_place, "normal");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TYPED_TEST(SoftmaxTest, LayoutRight) { check_shapes<TypeParam, Kokkos::LayoutRight>(false); }
TYPED_TEST(SoftmaxTest, LayoutLeft) { check_shapes<TypeParam, Kokkos::LayoutLeft>(false); }
TYPED_TEST(SoftmaxTest, LayoutStride) { check_shapes<TypeParam, Kokkos::LayoutStride>(false); }
TYPED_TEST(SoftmaxTest, InPlace) {
  check_shapes<TypeParam, Kokkos::LayoutRight>(true);
  check_shapes<TypeParam, Kokkos::LayoutStride>(true);
}

TYPED_TEST(SoftmaxTest, PartialOverlapIsRefused) {
  // In place means the same View; y one row behind x, or x's transpose, would read written values.
  using T = TypeParam;
  Kokkos::View<T**, Kokkos::LayoutRight, Exec::memory_space> a("a", 5, 8);
  const auto x = Kokkos::subview(a, std::make_pair(0, 4), Kokkos::ALL);
  const auto shifted = Kokkos::subview(a, std::make_pair(1, 5), Kokkos::ALL);
  expect_invalid([&] { kflash::softmax(Exec(), x, shifted); },
                 {"kflash::softmax", "'y (4, 8)' overlaps 'x (4, 8)'", "same View"});
  expect_invalid([&] { kflash::log_softmax(Exec(), x, shifted); }, {"kflash::log_softmax", "overlaps"});
  Kokkos::View<T**, Kokkos::LayoutRight, Exec::memory_space> sq("sq", 4, 4);
  Kokkos::View<T**, Kokkos::LayoutLeft, Exec::memory_space> sq_t(sq.data(), 4, 4);
  expect_invalid([&] { kflash::softmax(Exec(), sq, sq_t); }, {"overlaps"});
  const auto column = Kokkos::subview(a, std::make_pair(0, 4), 7);
  expect_invalid([&] { kflash::logsumexp(Exec(), x, column); }, {"kflash::logsumexp", "'out (4)' overlaps 'x (4, 8)'"});
  EXPECT_NO_THROW(kflash::softmax(Exec(), x, x));
  const auto last = Kokkos::subview(a, 4, Kokkos::ALL);
  Kokkos::View<T, Exec::memory_space> lse0("lse0");
  EXPECT_NO_THROW(kflash::logsumexp(Exec(), last, lse0));
  EXPECT_NO_THROW(kflash::logsumexp(Exec(), x, Kokkos::subview(a, 4, std::make_pair(0, 4))));
}

template <class T>
std::vector<std::vector<T>> adversarial_rows(std::size_t cols) {
  const T big = std::numeric_limits<T>::max();
  auto base = [&](unsigned seed) { return normal_values<T>(cols, seed, 2.0); };
  std::vector<std::vector<T>> rows;
  rows.push_back(std::vector<T>(cols, -inf<T>));  // fully masked
  { auto r = std::vector<T>(cols, -inf<T>); r[cols / 2] = T(-5); rows.push_back(r); }  // one visible
  { auto r = base(1); for (std::size_t i = 0; i < cols; ++i) r[i] = i % 2 ? big : -big; rows.push_back(r); }
  { auto r = base(2); for (auto& v : r) v *= T(1e30); rows.push_back(r); }          // huge magnitudes
  rows.push_back(std::vector<T>(cols, -big));                                      // all -max
  { auto r = base(3); r[0] = nan<T>; rows.push_back(r); }                         // NaN first
  { auto r = base(4); r[cols - 1] = nan<T>; rows.push_back(r); }                  // NaN last
  { auto r = std::vector<T>(cols, -inf<T>); r[cols / 3] = nan<T>; rows.push_back(r); }  // NaN among -inf
  { auto r = base(5); r[cols / 2] = inf<T>; rows.push_back(r); }                  // +inf
  { auto r = base(6); r[1 % cols] = inf<T>; r[0] = nan<T>; rows.push_back(r); }   // +inf and NaN
  { auto r = base(7); for (std::size_t i = 0; i < cols; i += 3) r[i] = -inf<T>; rows.push_back(r); }
  // Increasing values: the running maximum changes at every element.
  { std::vector<T> r(cols); for (std::size_t i = 0; i < cols; ++i) r[i] = T(i) * T(0.01); rows.push_back(r); }
  // The host's tiles each 10 above the last: each is kept against the running maximum with weights
  // above 1, and the early ones' factor exp(tile reference - row maximum) falls below fp32's
  // smallest normal number while their probabilities do not.
  constexpr std::size_t tile = kflash::impl::HostTraits::tile;
  { auto r = base(8); for (std::size_t i = 0; i < cols; ++i) r[i] = T(10 * (i / tile)) + r[i] / 8; rows.push_back(r); }
  // A second tile 12 above the first, kept against its maximum, then a maximum 95 above the first:
  // the second tile's factor is e^-95 (flushed in fp32), its probabilities near e^-83.
  {
    auto r = base(9);
    for (std::size_t i = 0; i < cols; ++i) r[i] = (i / tile == 1 ? T(12) : T(0)) + r[i] / 8;
    r[cols - 1] = T(95);
    rows.push_back(r);
  }
  // The host's first tile is tried against the largest of 4 of its values (its first, its last,
  // and those a quarter and half way): the tile's other values 14 above them (kept, weights near
  // e^14), or 70 above (past the slack: computed against the tile's own maximum).
  for (T lift : {T(14), T(70)}) {
    auto r = base(10);
    for (std::size_t i = 0; i < cols && i < tile; ++i)
      if (i != 0 && i != tile / 4 && i != tile / 2 && i != tile - 1) r[i] += lift;
    rows.push_back(r);
  }
  return rows;
}

TYPED_TEST(SoftmaxTest, AdversarialRows) {
  using T = TypeParam;
  // Short rows, one row per team, and rows long enough to be split across teams; on the host,
  // rows of more than 512 KiB also take the two passes, the write pass of one row beside the
  // state pass of the next (where a thread gets several rows: Serial, one OpenMP thread).
  for (std::size_t cols : {std::size_t(1), std::size_t(2), std::size_t(5), std::size_t(257),
                           std::size_t(70001), std::size_t(140001)}) {
    const auto rows = adversarial_rows<T>(cols);
    std::vector<T> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    check_matrix<T, Kokkos::LayoutRight>(rows.size(), cols, flat, false, "adversarial");
    if (::testing::Test::HasFatalFailure()) return;
    check_matrix<T, Kokkos::LayoutRight>(rows.size(), cols, flat, true, "adversarial in place");
    if (::testing::Test::HasFatalFailure()) return;
    // Each adversarial row also alone as a rank-1 View (split across teams when long).
    for (auto& r : rows) check_vector<T>(r, 8 * eps<T>, true, "adversarial vector");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TYPED_TEST(SoftmaxTest, EveryTailLength) {
  // Rows of every length modulo the host kernels' blocks of 16 values, alone and after whole
  // blocks: the host takes a row's last values as one more block, the one that ends where the row
  // ends, its lanes before them masked. A value counted twice there or left out shows here. Of
  // each length, rows whose maximum is among the last values, whose maximum is in the last whole
  // block where that block's lanes are read again, and rows that end in -inf and in NaN.
  using T = TypeParam;
  std::vector<std::size_t> lengths;
  for (std::size_t n = 1; n <= 48; ++n) lengths.push_back(n);
  for (std::size_t n : {63, 65, 79, 300, 511, 513, 1000, 1001}) lengths.push_back(n);
  unsigned seed = 900;
  for (std::size_t cols : lengths) {
    std::vector<T> flat;
    for (int k = 0; k < 5; ++k) {
      auto r = normal_values<T>(cols, seed++, 3.0);
      if (k == 1) r[cols - 1] += T(20);
      if (k == 2 && cols > 16) r[cols - 16] += T(20);
      if (k == 3) r[cols - 1] = -inf<T>;
      if (k == 4) r[cols - 1] = nan<T>;
      flat.insert(flat.end(), r.begin(), r.end());
    }
    check_matrix<T, Kokkos::LayoutRight>(5, cols, flat, false, "tail lengths");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TYPED_TEST(SoftmaxTest, HostKernelStoredWeights) {
  // softmax rows longer than 512 KiB keep their weights in RowBlock::weights (two rows' room: a
  // tile of one row is scaled into y beside the same tile of the next row's state pass, whose
  // weights go to the other half), with plain and with non-temporal stores, in place too: the
  // adversarial rows through the host kernels directly, rows not aligned to a vector (140001) and
  // aligned ones.
  using T = TypeParam;
  namespace host = kflash::impl::host;
  using kflash::impl::index_t;
  for (index_t cols : {index_t(140001), index_t(1) << 18}) {
    const auto rows = adversarial_rows<T>(std::size_t(cols));
    std::vector<T> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    const index_t n_rows = index_t(rows.size());
    std::vector<T> weights(std::size_t(host::weights_elements(cols)));
    // Each row's half holds its weights and tile maxima, and the second half starts on a 64-byte
    // line when the first does (16 floats or doubles are a whole number of lines).
    EXPECT_GE(host::row_weights_elements(cols), cols + cols / kflash::impl::HostTraits::tile + 1) << cols;
    EXPECT_EQ(host::row_weights_elements(cols) % 16, 0) << cols;
    for (bool stream : {false, true})
      for (bool in_place : {false, true}) {
        std::vector<T> y = in_place ? flat : std::vector<T>(flat.size(), T(7));
        const T* x = in_place ? y.data() : flat.data();
        host::RowBlock<T> block{kflash::impl::RowOp::softmax, x, cols, y.data(), cols, nullptr, 0, n_rows, cols,
                                stream, host::WeightsAt::scratch, weights.data()};
        host::run_rows(block);
        for (index_t r = 0; r < n_rows; ++r) {
          const T* row = flat.data() + r * cols;
          expect_row_matches(reference_row(row, std::size_t(cols)), row, y.data() + r * cols, std::size_t(cols), false,
                             "stored weights " + std::to_string(cols) + (stream ? " stream" : "") +
                                 (in_place ? " in place" : "") + " row " + std::to_string(r));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
  }
}

TYPED_TEST(SoftmaxTest, HostKernelRowsInLanes) {
  // The host kernels take rows of at most 16 values 16 at a time, one row in each lane of a vector
  // (AVX-512, fp32; other rows go through short_rows): rows of every length up to 17, 37 of them (two
  // such groups, 5 rows after), rows wider apart than they are long (whose gaps hold NaN, which a
  // load past a row's end would bring in; the outputs' gaps must keep their 7s), in place too; and
  // groups with a special row, which take the other way whole.
  using T = TypeParam;
  namespace host = kflash::impl::host;
  using kflash::impl::index_t;
  using kflash::impl::RowOp;
  const index_t rows = 37;
  unsigned seed = 5200;
  for (index_t cols = 1; cols <= 17; ++cols)
    for (bool special : {false, true})
      for (index_t gap : {index_t(0), index_t(3)}) {
        const auto v = lane_rows_values<T>(std::size_t(rows), std::size_t(cols), special, seed++);
        const index_t stride = cols + gap;
        std::vector<T> x(std::size_t(rows * stride), nan<T>);
        for (index_t r = 0; r < rows; ++r)
          std::copy(v.begin() + r * cols, v.begin() + (r + 1) * cols, x.begin() + r * stride);
        const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " stride " +
                                  std::to_string(stride) + (special ? " with special rows" : "");
        for (RowOp op : {RowOp::softmax, RowOp::log_softmax, RowOp::logsumexp})
          for (bool in_place : {false, true}) {
            if (op == RowOp::logsumexp && in_place) continue;
            std::vector<T> y = in_place ? x : std::vector<T>(x.size(), T(7)), lse(std::size_t(rows), T(7));
            const host::RowBlock<T> block{op, in_place ? y.data() : x.data(), stride, y.data(), stride, lse.data(), 1,
                                          rows, cols};
            host::run_rows(block);
            for (index_t r = 0; r < rows; ++r) {
              const T* row = v.data() + r * cols;
              const std::string at = where + (op == RowOp::softmax       ? " softmax"
                                              : op == RowOp::log_softmax ? " log_softmax"
                                                                         : " logsumexp") +
                                     (in_place ? " in place" : "") + " row " + std::to_string(r);
              const RefRow ref = reference_row(row, std::size_t(cols));
              if (op == RowOp::logsumexp) {
                expect_lse_matches(ref, lse[std::size_t(r)], 8 * eps<T>, at);
                continue;
              }
              expect_row_matches(ref, row, y.data() + r * stride, std::size_t(cols), op == RowOp::log_softmax, at);
              for (index_t c = cols; c < stride && !in_place; ++c)
                EXPECT_EQ(y[std::size_t(r * stride + c)], T(7)) << at << ": written past the row's end";
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
      }
}

/// Traits of the device row schedules for a test: rows up to 8 elements over the lanes of a thread
/// (TeamSize rows a team), longer ones over a team of at most TeamSize threads.
template <int TeamSize>
struct SmallTeamRowTraits {
  static constexpr kflash::impl::index_t lane_cols = 8;
  static constexpr int lane_team_size = TeamSize;
  static constexpr int vector_length = 1;
  static constexpr int min_team_size = 1;
  static constexpr int team_multiple = 1;
  template <class T>
  static constexpr int max_team_size = 1024;
};

/// Runs logsumexp of x's rows through the device row schedules with Traits and Regs registers per
/// thread on plan, and checks each row against the reference of host (row-major, plan.cols a row).
template <class Traits, int Regs, class XRows, class T>
void check_team_lse(const XRows& x, const kflash::impl::RowPlan& plan, const std::vector<T>& host,
                    const std::string& where) {
  const std::size_t rows = std::size_t(plan.rows), cols = std::size_t(plan.cols);
  Kokkos::View<T*, Mem> lse("lse", rows);
  using Lse = kflash::impl::LseOut<Kokkos::View<T*, Mem>>;
  ASSERT_TRUE((kflash::impl::run_team_rows<kflash::impl::RowOp::logsumexp, Traits, Regs>(Exec(), x, Lse{lse}, plan,
                                                                                        "t")))
      << where;
  const auto got = to_host(lse);
  for (std::size_t r = 0; r < rows; ++r)
    expect_lse_matches(reference_row(host.data() + r * cols, cols), got[r], 8 * eps<T>,
                       where + " logsumexp row " + std::to_string(r));
}

/// Runs the three row operations through the device row schedules with Traits and Regs registers
/// per thread, and checks them like check_matrix.
template <class T, class Traits, int Regs>
void check_team_rows(std::size_t rows, std::size_t cols, const std::vector<T>& host, const std::string& what,
                     std::size_t chunk_len = 0) {
  using kflash::impl::RowOp;
  using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, Mem>;
  using XRows = kflash::impl::Rows<Matrix>;
  const std::string where = what + " " + std::to_string(rows) + "x" + std::to_string(cols);
  const Matrix x = make_matrix<T, Kokkos::LayoutRight, Exec>(rows, cols, host);
  kflash::impl::RowPlan plan;
  plan.rows = rows;
  plan.cols = cols;
  plan.chunk_len = chunk_len > 0 ? chunk_len : cols;
  plan.chunks = (cols + plan.chunk_len - 1) / plan.chunk_len;
  for (bool log_space : {false, true}) {
    const Matrix y = make_matrix<T, Kokkos::LayoutRight, Exec>(rows, cols, std::vector<T>(rows * cols, T(7)));
    const bool ran =
        log_space ? kflash::impl::run_team_rows<RowOp::log_softmax, Traits, Regs>(Exec(), XRows{x}, XRows{y}, plan, "t")
                  : kflash::impl::run_team_rows<RowOp::softmax, Traits, Regs>(Exec(), XRows{x}, XRows{y}, plan, "t");
    ASSERT_TRUE(ran) << where;
    const auto out = to_host_row_major(y);
    for (std::size_t r = 0; r < rows; ++r) {
      expect_row_matches(reference_row(host.data() + r * cols, cols), host.data() + r * cols, out.data() + r * cols,
                         cols, log_space, where + (log_space ? " log_softmax" : " softmax") + " row " + std::to_string(r));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  check_team_lse<Traits, Regs>(XRows{x}, plan, host, where);
}

TYPED_TEST(SoftmaxTest, DeviceRowSchedulesOnAnyTeams) {
  // The device row schedules (lanes per short row, a team per longer row with the row in
  // registers) on this space's teams, with small tiers: on host spaces, teams of 2 threads (1 where
  // the space has one), so the team reductions, the staging scratch and rows that fill neither a
  // team nor a lane group run without a GPU. Normal and adversarial rows.
  using T = TypeParam;
  constexpr int regs = 16;
  auto run = [&](auto traits) {
    using Traits = decltype(traits);
    const std::size_t capacity = std::size_t(regs) * std::size_t(Exec().concurrency() >= 2 ? 2 : 1);
    unsigned seed = 300;
    for (std::size_t cols : {std::size_t(1), std::size_t(3), std::size_t(8), std::size_t(9), std::size_t(16),
                             std::size_t(17), capacity - 1, capacity}) {
      if (cols > capacity) continue;  // a one-thread team holds 16 elements
      check_team_rows<T, Traits, regs>(7, cols, normal_values<T>(7 * cols, seed++, 4.0), "team rows normal");
      if (::testing::Test::HasFatalFailure()) return;
      const auto rows = adversarial_rows<T>(cols);
      std::vector<T> flat;
      for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
      check_team_rows<T, Traits, regs>(rows.size(), cols, flat, "team rows adversarial");
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Rows split into chunks of one team each (the last one short), merged through the workspace.
    for (std::size_t cols : {capacity + 1, 3 * capacity - 5}) {
      const auto rows = adversarial_rows<T>(cols);
      std::vector<T> flat;
      for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
      check_team_rows<T, Traits, regs>(rows.size(), cols, flat, "team rows split", capacity);
      if (::testing::Test::HasFatalFailure()) return;
    }
  };
  if (Exec().concurrency() >= 2) run(SmallTeamRowTraits<2>());
  else run(SmallTeamRowTraits<1>());
}

TYPED_TEST(SoftmaxTest, DeviceRowSchedulesByChunks) {
  // The team tier's 16-byte path: rows of a wider matrix that start on 16-byte boundaries, whole
  // and split into chunks of whole 16-byte chunks, with lengths ending inside a 16-byte chunk.
  // x holds NaN past each row's end (a value read from there would reach every result); y past
  // each row's end must keep its 7s.
  using T = TypeParam;
  using kflash::impl::RowOp;
  using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, Mem>;
  using Traits = SmallTeamRowTraits<2>;
  constexpr int regs = 16;
  constexpr std::size_t W = kflash::impl::Chunk<T>::n;
  const std::size_t capacity = std::size_t(regs) * std::size_t(Exec().concurrency() >= 2 ? 2 : 1);
  const std::size_t rows = 5;
  struct Case {
    std::size_t cols, ld, chunk_len;
  };
  for (const Case c : {Case{capacity, capacity, capacity}, Case{capacity - 3, capacity, capacity - 3},
                       Case{3 * capacity - 3, 3 * capacity, capacity}, Case{2 * capacity + 1, 3 * capacity, capacity}}) {
    const std::string where = "rows of " + std::to_string(c.cols) + " in rows of " + std::to_string(c.ld) +
                              ", chunks of " + std::to_string(c.chunk_len);
    const std::vector<T> values = normal_values<T>(rows * c.cols, unsigned(c.cols), 4.0);
    const Matrix X("x", rows, c.ld), Y("y", rows, c.ld);
    auto hx = Kokkos::create_mirror_view(X);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < c.ld; ++j)
        hx(r, j) = j < c.cols ? values[r * c.cols + j] : std::numeric_limits<T>::quiet_NaN();
    Kokkos::deep_copy(X, hx);
    const auto cols = std::make_pair(std::size_t(0), c.cols);
    const auto x = Kokkos::subview(X, Kokkos::ALL, cols);
    const auto y = Kokkos::subview(Y, Kokkos::ALL, cols);
    using XRows = kflash::impl::Rows<std::remove_const_t<decltype(x)>>;
    kflash::impl::RowPlan plan;
    plan.rows = rows;
    plan.cols = c.cols;
    plan.chunk_len = c.chunk_len;
    plan.chunks = (c.cols + c.chunk_len - 1) / c.chunk_len;
    ASSERT_TRUE(kflash::impl::rows_in_chunks(x, kflash::impl::index_t(W)) && (plan.chunks == 1 || c.chunk_len % W == 0))
        << where << ": not the 16-byte path";
    for (bool log_space : {false, true}) {
      Kokkos::deep_copy(Y, T(7));
      const bool ran = log_space ? kflash::impl::run_team_rows<RowOp::log_softmax, Traits, regs>(Exec(), XRows{x}, XRows{y}, plan, "t")
                                 : kflash::impl::run_team_rows<RowOp::softmax, Traits, regs>(Exec(), XRows{x}, XRows{y}, plan, "t");
      ASSERT_TRUE(ran) << where;
      const auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Y);
      for (std::size_t r = 0; r < rows; ++r) {
        const std::string row = where + (log_space ? " log_softmax" : " softmax") + " row " + std::to_string(r);
        expect_row_matches(reference_row(values.data() + r * c.cols, c.cols), values.data() + r * c.cols, &hy(r, 0),
                           c.cols, log_space, row);
        for (std::size_t j = c.cols; j < c.ld; ++j) EXPECT_EQ(hy(r, j), T(7)) << row << " column " << j;
        if (::testing::Test::HasFailure()) return;
      }
    }
    check_team_lse<Traits, regs>(XRows{x}, plan, values, where);
    if (::testing::Test::HasFailure()) return;
  }
}

TYPED_TEST(SoftmaxTest, VectorLengths) {
  using T = TypeParam;
  for (std::size_t n : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(1000),
                        std::size_t(65537), (std::size_t(1) << 20) + 1}) {
    check_vector<T>(normal_values<T>(n, unsigned(n)), 8 * eps<T>, true, "normal vector");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

#ifdef KFLASH_TEST_DEVICE_SCHEDULES_ON_HOST
constexpr bool device_schedules_on_host = true;
#else
constexpr bool device_schedules_on_host = false;
#endif

TYPED_TEST(SoftmaxTest, LongRowAccuracy2Pow24) {
  // Accuracy of long rows: logsumexp of 2^24 normal values, l within 1e-6 (fp32) / 1e-13 (fp64).
  // (2^22 on the device schedules' host lane: rows split over several teams either way.)
  using T = TypeParam;
  const ld rel = std::is_same<T, float>::value ? 1e-6L : 1e-13L;
  const int log2n = device_schedules_on_host ? 22 : 24;
  check_vector<T>(normal_values<T>(std::size_t(1) << log2n, 24), rel, true, "2^" + std::to_string(log2n));
}

TYPED_TEST(SoftmaxTest, LongRowAccuracy2Pow26) {
  // The numerics contract's longest rows: 2^26 elements. fp32 only (fp64 needs 512 MiB per copy).
  using T = TypeParam;
  if (!std::is_same<T, float>::value) GTEST_SKIP() << "fp32 only";
  if (device_schedules_on_host) GTEST_SKIP() << "rows of 2^26 run on the Serial, OpenMP and Cuda lanes";
  check_vector<T>(normal_values<T>(std::size_t(1) << 26, 26), 1e-6L, false, "2^26");
}

TYPED_TEST(SoftmaxTest, LargeOutputStreamed) {
  // An output of host::stream_bytes or more: on the host, rows longer than one tile are written
  // with non-temporal stores, whether longer than stored_weights_bytes (16 rows) or not (1003
  // columns). Rows of odd lengths start at every alignment; in place too. (On devices these are
  // two more large cases.)
  using T = TypeParam;
  if (device_schedules_on_host) GTEST_SKIP() << "the host kernels' streaming stores; the device schedules have none";
  const std::size_t stream = std::size_t(kflash::impl::HostTraits::stream_bytes) / sizeof(T);
  for (std::size_t cols : {stream / 16 + 3, std::size_t(1003)}) {
    const std::size_t rows = stream / cols + 1;
    const auto host = normal_values<T>(rows * cols, unsigned(cols), 3.0);
    check_matrix<T, Kokkos::LayoutRight>(rows, cols, host, false, "streamed");
    if (::testing::Test::HasFatalFailure()) return;
    check_matrix<T, Kokkos::LayoutRight>(rows, cols, host, true, "streamed");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TYPED_TEST(SoftmaxTest, WorkspaceIsReused) {
  // A row split across teams keeps its chunk states in a workspace kept from call to call: the
  // same calls again allocate nothing. While another thread holds that workspace, a call takes
  // scratch of its own (it neither waits nor shares), and its results are still right.
  using T = TypeParam;
  using Cache = kflash::impl::CachedWorkspace<TEST_EXECSPACE::memory_space>;
  const auto row = normal_values<T>(200003, 31, 3.0);  // one row of more than 2 min_chunk: split
  check_vector<T>(row, 8 * eps<T>, true, "workspace, first calls");
  const std::size_t allocations = Cache::allocations();
  EXPECT_GE(allocations, std::size_t(1));
  check_vector<T>(row, 8 * eps<T>, true, "workspace, again");
  EXPECT_EQ(Cache::allocations(), allocations) << "the calls again allocated the shared workspace anew";

  std::mutex m;
  std::condition_variable cv;
  bool held = false, done = false, shared = false;
  std::thread holder([&] {
    const Cache w(TEST_EXECSPACE(), 1, "kflash test: held elsewhere");  // never grows the buffer
    std::unique_lock<std::mutex> lock(m);
    held = true;
    shared = w.shared_buffer();
    cv.notify_all();
    cv.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return held; });
  }
  EXPECT_TRUE(shared);
  check_vector<T>(row, 8 * eps<T>, true, "workspace held by another thread");
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_all();
  holder.join();
  EXPECT_EQ(Cache::allocations(), allocations);
}

TYPED_TEST(SoftmaxTest, Deterministic) {
  // The same inputs give bit-identical outputs run to run (deterministic merge order).
  using T = TypeParam;
  const std::size_t n = (std::size_t(1) << 20) + 3;
  auto x = make_vector<T, Exec>(normal_values<T>(n, 5));
  Kokkos::View<T*, Mem> y1("y1", n), y2("y2", n);
  Kokkos::View<T, Mem> l1("l1"), l2("l2");
  kflash::softmax(Exec(), x, y1);
  kflash::softmax(Exec(), x, y2);
  kflash::logsumexp(Exec(), x, l1);
  kflash::logsumexp(Exec(), x, l2);
  const auto a = to_host(y1), b = to_host(y2);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(T)), 0);
  T la, lb;
  Kokkos::deep_copy(la, l1);
  Kokkos::deep_copy(lb, l2);
  EXPECT_EQ(std::memcmp(&la, &lb, sizeof(T)), 0);
}

TYPED_TEST(SoftmaxTest, DefaultExecutionSpaceOverloads) {
  using T = TypeParam;
  const auto host = normal_values<T>(6 * 50, 9);
  auto x = make_matrix<T, Kokkos::LayoutRight, Exec>(6, 50, host);
  auto y = make_matrix<T, Kokkos::LayoutRight, Exec>(6, 50, host);
  Kokkos::View<T*, Mem> lse("lse", 6);
  kflash::softmax(x, y);
  Kokkos::fence();
  auto out = to_host_row_major(y);
  for (std::size_t r = 0; r < 6; ++r) {
    expect_row_matches(reference_row(host.data() + r * 50, 50), host.data() + r * 50, out.data() + r * 50,
                       50, false, "softmax(x, y)");
  }
  kflash::log_softmax(x, y);
  Kokkos::fence();
  out = to_host_row_major(y);
  for (std::size_t r = 0; r < 6; ++r) {
    expect_row_matches(reference_row(host.data() + r * 50, 50), host.data() + r * 50, out.data() + r * 50,
                       50, true, "log_softmax(x, y)");
  }
  kflash::logsumexp(x, lse);
  Kokkos::fence();
  const auto l = to_host(lse);
  for (std::size_t r = 0; r < 6; ++r)
    expect_lse_matches(reference_row(host.data() + r * 50, 50), l[r], 8 * eps<T>, "logsumexp(x, out)");
}

TYPED_TEST(SoftmaxTest, BadInputThrows) {
  using T = TypeParam;
  Kokkos::View<T*, Mem> v4("v4", 4), v5("v5", 5);
  Kokkos::View<T**, Mem> m23("m23", 2, 3), m24("m24", 2, 4), m33("m33", 3, 3);
  Kokkos::View<T***, Mem> c3("c3", 2, 3, 4);
  Kokkos::View<T, Mem> s0("s0");
  Kokkos::View<T*, Mem> out2("out2", 2), out3("out3", 3);
  const Exec exec;
  expect_invalid([&] { kflash::softmax(exec, v4, v5); }, {"kflash::softmax", "'y (5)'", "'x (4)'"});
  expect_invalid([&] { kflash::softmax(exec, m23, m24); }, {"kflash::softmax", "y (2, 4)", "x (2, 3)"});
  expect_invalid([&] { kflash::log_softmax(exec, m23, v4); }, {"kflash::log_softmax", "y (4)", "x (2, 3)"});
  expect_invalid([&] { kflash::softmax(exec, c3, c3); }, {"kflash::softmax", "x (2, 3, 4)", "rank 3"});
  expect_invalid([&] { kflash::logsumexp(exec, m23, out3); }, {"kflash::logsumexp", "out (3)", "x (2, 3)"});
  expect_invalid([&] { kflash::logsumexp(exec, m23, s0); }, {"kflash::logsumexp", "out ()", "x (2, 3)"});
  expect_invalid([&] { kflash::logsumexp(exec, v4, out2); }, {"kflash::logsumexp", "out (2)", "x (4)"});
  expect_invalid([&] { kflash::logsumexp(exec, c3, out2); }, {"kflash::logsumexp", "x (2, 3, 4)"});
  // Correct shapes do not throw, and empty Views are valid no-ops.
  EXPECT_NO_THROW(kflash::logsumexp(exec, m33, out3));
  Kokkos::View<T**, Mem> empty("empty", 0, 5);
  Kokkos::View<T*, Mem> empty_out("empty_out", 0);
  EXPECT_NO_THROW(kflash::softmax(exec, empty, empty));
  EXPECT_NO_THROW(kflash::logsumexp(exec, empty, empty_out));
}

/// Address space reserved with MAP_NORESERVE: only the pages touched take memory.
struct SparseRegion {
  void* base = MAP_FAILED;
  std::size_t bytes = 0;
  explicit SparseRegion(std::size_t n) : bytes(n) {
    base = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  ~SparseRegion() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
};

TYPED_TEST(SoftmaxTest, ElementOffsetsBeyond32Bits) {
  // Two rows 2^31 + 48 elements apart: the second row's flat offset overflows a 32-bit index, so any
  // index arithmetic in int reads and writes the wrong memory.
  using T = TypeParam;
  if constexpr (!std::is_same<Mem, Kokkos::HostSpace>::value) {
    GTEST_SKIP() << "host memory only (the rows live in an mmap'ed region)";
  } else {
    const std::size_t cols = 1000, stride = (std::size_t(1) << 31) + 48;
    SparseRegion xr((stride + cols) * sizeof(T)), yr((stride + cols) * sizeof(T));
    ASSERT_NE(xr.base, MAP_FAILED) << "mmap of " << xr.bytes << " bytes (MAP_NORESERVE) failed";
    ASSERT_NE(yr.base, MAP_FAILED) << "mmap of " << yr.bytes << " bytes (MAP_NORESERVE) failed";
    using Strided = Kokkos::View<T**, Kokkos::LayoutStride, Mem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    const Kokkos::LayoutStride layout(2, stride, cols, 1);
    const Strided x(static_cast<T*>(xr.base), layout), y(static_cast<T*>(yr.base), layout);
    const auto host = normal_values<T>(2 * cols, 31, 3.0);
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t c = 0; c < cols; ++c) x(r, c) = host[r * cols + c];
    ASSERT_GT(std::uint64_t(&x(1, 0) - &x(0, 0)), std::uint64_t(1) << 31);
    Kokkos::View<T*, Mem> lse("lse", 2), loss("loss", 2);
    const auto targets = make_vector<std::int64_t, Exec>({3, 999});
    for (bool log_space : {false, true}) {
      if (log_space) kflash::log_softmax(Exec(), x, y);
      else kflash::softmax(Exec(), x, y);
      Exec().fence();
      for (std::size_t r = 0; r < 2; ++r) {
        std::vector<T> row(cols);
        for (std::size_t c = 0; c < cols; ++c) row[c] = y(r, c);
        expect_row_matches(reference_row(host.data() + r * cols, cols), host.data() + r * cols, row.data(), cols,
                           log_space, log_space ? "log_softmax, row " + std::to_string(r)
                                                : "softmax, row " + std::to_string(r));
      }
    }
    kflash::logsumexp(Exec(), x, lse);
    kflash::cross_entropy(Exec(), x, targets, loss);
    Exec().fence();
    for (std::size_t r = 0; r < 2; ++r) {
      const RefRow ref = reference_row(host.data() + r * cols, cols);
      expect_lse_matches(ref, lse(r), 8 * eps<T>, "logsumexp, row " + std::to_string(r));
      const ld nll = ref.lse() - ld(host[r * cols + (r == 0 ? 3 : 999)]);
      EXPECT_LE(std::fabs(ld(loss(r)) - nll), 16 * eps<T> * (1 + std::fabs(ref.lse()))) << "cross_entropy, row " << r;
    }
  }
}

TYPED_TEST(SoftmaxTest, RowsBesideUnreadablePages) {
  // Contiguous rows of every length up to 48 whose last value ends where an unreadable page begins,
  // and rows whose first value is the first after one: a load past a row's end or before its start
  // (the host kernels' last, partial blocks) faults here instead of reading a neighbour's memory.
  using T = TypeParam;
  if constexpr (!std::is_same<Mem, Kokkos::HostSpace>::value) {
    GTEST_SKIP() << "host memory only (the rows live in mmap'ed pages)";
  } else {
    const std::size_t rows = 3;
    unsigned seed = 4100;
    for_rows_beside_guards<T>(rows, 48, [&](const auto& x, const auto& y, std::size_t cols, const std::string& where) {
      const auto host = normal_values<T>(rows * cols, seed++, 3.0);
      std::copy(host.begin(), host.end(), x.data());
      for (bool log_space : {false, true}) {
        softmax_or_log_softmax<Exec>(log_space, x, y);
        for (std::size_t r = 0; r < rows; ++r) {
          const std::string row = where + (log_space ? " log_softmax row " : " softmax row ") + std::to_string(r);
          expect_row_matches(reference_row(host.data() + r * cols, cols), host.data() + r * cols, &y(r, 0), cols,
                             log_space, row);
        }
      }
      Kokkos::View<T*, Mem> lse("lse", rows), loss("loss", rows);
      const std::vector<std::int64_t> target{0, std::int64_t(cols / 2), std::int64_t(cols - 1)};
      kflash::logsumexp(Exec(), x, lse);
      kflash::cross_entropy(Exec(), x, make_vector<std::int64_t, Exec>(target), loss);
      Exec().fence();
      for (std::size_t r = 0; r < rows; ++r) {
        const RefRow ref = reference_row(host.data() + r * cols, cols);
        expect_lse_matches(ref, lse(r), 8 * eps<T>, where + " logsumexp row " + std::to_string(r));
        const ld nll = ref.lse() - ld(host[r * cols + std::size_t(target[r])]);
        EXPECT_LE(std::fabs(ld(loss(r)) - nll), 16 * eps<T> * (1 + std::fabs(ref.lse())))
            << where << " cross_entropy row " << r;
      }
    });
  }
}

TYPED_TEST(SoftmaxTest, EmptyRowsHaveLogsumexpMinusInf) {
  using T = TypeParam;
  Kokkos::View<T*, Mem> v0("v0", 0);
  Kokkos::View<T, Mem> l0("l0");
  Kokkos::View<T**, Mem> m30("m30", 3, 0);
  Kokkos::View<T*, Mem> l3("l3", 3);
  kflash::logsumexp(Exec(), v0, l0);
  kflash::logsumexp(Exec(), m30, l3);
  T h0;
  Kokkos::deep_copy(h0, l0);
  EXPECT_EQ(h0, -inf<T>);
  for (T v : to_host(l3)) EXPECT_EQ(v, -inf<T>);
}

}  // namespace kflash_test
