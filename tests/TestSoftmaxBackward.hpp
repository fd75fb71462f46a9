// The row operations' gradients on TEST_EXECSPACE (softmax_backward, log_softmax_backward,
// logsumexp_backward, cross_entropy_backward) against a long-double reference computed from the
// same inputs.
#pragma once

#include <GradsCommon.hpp>

#include <cstring>

namespace kflash_test {

using Exec = TEST_EXECSPACE;
using Mem = Exec::memory_space;

/// Softmax-like rows: y = softmax (or log_softmax) of normal logits rounded to T, dy normal.
template <class T>
std::vector<T> forward_rows(std::size_t rows, std::size_t cols, bool log_space, unsigned seed) {
  std::vector<T> y = normal_values<T>(rows * cols, seed, 3.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const RefRow ref = reference_row(y.data() + r * cols, cols);
    for (std::size_t c = 0; c < cols; ++c) {
      const ld d = ld(y[r * cols + c]) - ref.lse();
      y[r * cols + c] = T(log_space ? d : std::exp(d));
    }
  }
  return y;
}

/// softmax_backward and log_softmax_backward of rows x cols in layout L (dx apart and in place over
/// dy), and logsumexp_backward of the logits the rows came from (dx apart and in place over x).
template <class T, class L>
void check_row_grads(std::size_t rows, std::size_t cols, unsigned seed) {
  const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " " + typeid(L).name();
  const std::vector<T> dy_host = normal_values<T>(rows * cols, seed + 1);
  for (bool log_space : {false, true}) {
    const std::vector<T> y_host = forward_rows<T>(rows, cols, log_space, seed);
    const auto ref = ref_rows(y_host, dy_host, cols, log_space);
    const auto y = make_matrix<T, L, Exec>(rows, cols, y_host);
    for (bool in_place : {false, true}) {
      const auto dy = make_matrix<T, L, Exec>(rows, cols, dy_host);
      const auto dx = in_place ? dy : make_matrix<T, L, Exec>(rows, cols, std::vector<T>(rows * cols, T(7)));
      if (log_space) kflash::log_softmax_backward(Exec(), y, dy, dx);
      else kflash::softmax_backward(Exec(), y, dy, dx);
      expect_grad_rows<T>(ref, to_host_row_major(dx), cols,
                          where + (log_space ? " log_softmax_backward" : " softmax_backward") +
                              (in_place ? " in place" : ""));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const std::vector<T> x_host = normal_values<T>(rows * cols, seed + 2, 3.0);
  const std::vector<T> dlse_host = normal_values<T>(rows, seed + 3);
  std::vector<T> lse_host(rows);
  std::vector<RefGrad> ref;
  for (std::size_t r = 0; r < rows; ++r) {
    lse_host[r] = T(reference_row(x_host.data() + r * cols, cols).lse());
    ref.push_back(RefGrads::logsumexp(std::vector<ld>(x_host.begin() + r * cols, x_host.begin() + (r + 1) * cols),
                                      lse_host[r], dlse_host[r]));
  }
  const auto lse = make_vector<T, Exec>(lse_host);
  const auto dlse = make_vector<T, Exec>(dlse_host);
  for (bool in_place : {false, true}) {
    const auto x = make_matrix<T, L, Exec>(rows, cols, x_host);
    const auto dx = in_place ? x : make_matrix<T, L, Exec>(rows, cols, std::vector<T>(rows * cols, T(7)));
    kflash::logsumexp_backward(Exec(), x, lse, dlse, dx);
    expect_grad_rows<T>(ref, to_host_row_major(dx), cols,
                        where + " logsumexp_backward" + (in_place ? " in place" : ""));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

template <class T>
struct SoftmaxBackwardTest : ::testing::Test {};
TYPED_TEST_SUITE(SoftmaxBackwardTest, Scalars);

TYPED_TEST(SoftmaxBackwardTest, Layouts) {
  using T = TypeParam;
  unsigned seed = 700;
  for (std::size_t cols : {std::size_t(1), std::size_t(7), std::size_t(64), std::size_t(1000), std::size_t(70001)}) {
    const std::size_t rows = cols > 1000 ? 2 : 9;
    check_row_grads<T, Kokkos::LayoutRight>(rows, cols, seed += 10);
    if (::testing::Test::HasFatalFailure()) return;
    check_row_grads<T, Kokkos::LayoutLeft>(rows, cols, seed += 10);
    if (::testing::Test::HasFatalFailure()) return;
    check_row_grads<T, Kokkos::LayoutStride>(rows, cols, seed += 10);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TYPED_TEST(SoftmaxBackwardTest, RankOne) {
  using T = TypeParam;
  const std::size_t n = 4099;
  const std::vector<T> dy_host = normal_values<T>(n, 811);
  for (bool log_space : {false, true}) {
    const std::vector<T> y_host = forward_rows<T>(1, n, log_space, 812);
    const auto y = make_vector<T, Exec>(y_host);
    const auto dy = make_vector<T, Exec>(dy_host);
    Kokkos::View<T*, Mem> dx("dx", n);
    if (log_space) kflash::log_softmax_backward(y, dy, dx);  // the default space's overloads
    else kflash::softmax_backward(y, dy, dx);
    expect_grad_rows<T>(ref_rows(y_host, dy_host, n, log_space), to_host(dx), n, "rank 1");
    if (::testing::Test::HasFatalFailure()) return;
  }
  const std::vector<T> x_host = normal_values<T>(n, 813, 3.0);
  const T lse_value = T(reference_row(x_host.data(), n).lse());
  Kokkos::View<T, Mem> lse("lse"), dlse("dlse");
  Kokkos::deep_copy(lse, lse_value);
  Kokkos::deep_copy(dlse, T(-1.5));
  const auto x = make_vector<T, Exec>(x_host);
  Kokkos::View<T*, Mem> dx("dx", n);
  kflash::logsumexp_backward(x, lse, dlse, dx);
  const std::vector<ld> xl(x_host.begin(), x_host.end());
  expect_grad_rows<T>({RefGrads::logsumexp(xl, lse_value, T(-1.5))}, to_host(dx), n, "rank 1 logsumexp_backward");
}

TYPED_TEST(SoftmaxBackwardTest, SpecialValues) {
  // Rows the forward gives for fully masked, partly masked and NaN logits, and upstream gradients
  // with NaN and infinities: the reference's own arithmetic says what each element must be.
  using T = TypeParam;
  const std::size_t cols = 5;
  const T ninf = -inf<T>;
  const std::vector<T> y_soft = {0, 0, 0, 0, 0,  0, T(0.25), T(0.75), 0, 0,  1, 0, 0, 0, 0,
                                 T(0.5), T(0.5), 0, 0, 0,  nan<T>, nan<T>, nan<T>, nan<T>, nan<T>};
  const std::vector<T> y_log = {ninf, ninf, ninf, ninf, ninf,  ninf, T(-1.386), T(-0.288), ninf, ninf,
                                0, ninf, ninf, ninf, ninf,  T(-0.693), T(-0.693), ninf, ninf, ninf,
                                nan<T>, nan<T>, nan<T>, nan<T>, nan<T>};
  const std::vector<T> dy = {1, 2, 3, 4, 5,  1, 2, 3, 4, 5,  1, nan<T>, 1, 1, 1,  inf<T>, 1, 1, 1, 1,  1, 1, 1, 1, 1};
  for (bool log_space : {false, true}) {
    const auto& yh = log_space ? y_log : y_soft;
    const auto y = make_matrix<T, Kokkos::LayoutRight, Exec>(5, cols, yh);
    const auto d = make_matrix<T, Kokkos::LayoutRight, Exec>(5, cols, dy);
    Kokkos::View<T**, Kokkos::LayoutRight, Mem> dx("dx", 5, cols);
    if (log_space) kflash::log_softmax_backward(Exec(), y, d, dx);
    else kflash::softmax_backward(Exec(), y, d, dx);
    const auto got = to_host_row_major(dx);
    expect_grad_rows<T>(ref_rows(yh, dy, cols, log_space), got, cols,
                        log_space ? "special log_softmax_backward" : "special softmax_backward");
    if (::testing::Test::HasFatalFailure()) return;
    // A fully masked row (y = 0, or -inf) passes nothing back (softmax) or dy itself (log_softmax).
    for (std::size_t c = 0; c < cols; ++c) EXPECT_EQ(got[c], log_space ? dy[c] : T(0)) << "masked row, col " << c;
  }
  // logsumexp_backward: a row of -inf whose lse is -inf gets 0; +inf entries of a row whose lse is
  // +inf get dlse, the others 0; NaN stays NaN.
  const std::vector<T> x = {ninf, ninf, ninf, ninf, ninf,  1, inf<T>, 2, ninf, 3,  1, 2, nan<T>, 3, 4};
  const std::vector<T> lse_host = {ninf, inf<T>, nan<T>}, dlse_host = {2, 3, 4};
  const auto xv = make_matrix<T, Kokkos::LayoutRight, Exec>(3, cols, x);
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> dx("dx", 3, cols);
  kflash::logsumexp_backward(Exec(), xv, make_vector<T, Exec>(lse_host), make_vector<T, Exec>(dlse_host), dx);
  const auto got = to_host_row_major(dx);
  const std::vector<T> want = {0, 0, 0, 0, 0,  0, 3, 0, 0, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "logsumexp_backward element " << i;
  for (std::size_t i = 10; i < 15; ++i) EXPECT_TRUE(std::isnan(got[i])) << "logsumexp_backward NaN row, element " << i;
}

TYPED_TEST(SoftmaxBackwardTest, LogsumexpBelowTheRowMaximum) {
  // An lse below some of its row's x (not logsumexp's own): dx = dlse · exp(x − lse) grows past
  // dlse up to exp's overflow (fp32: exp(88) is finite, exp(99.75) is not), and underflows to 0
  // (fp32: exp(-200.25)), against long double. x and lse are multiples of 1/8: x − lse is exact.
  using T = TypeParam;
  const std::size_t cols = 37, rows = 2;
  std::vector<T> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = T(int(i % 41) - 20) / T(8);
  x[3] = T(88.25), x[5] = T(100), x[7] = T(-200), x[cols + 1] = T(600.25), x[cols + 30] = T(-1.5);
  const std::vector<T> lse_host = {T(0.25), T(-1.5)}, dlse_host = {T(-2), T(0.5)};
  const auto xv = make_matrix<T, Kokkos::LayoutRight, Exec>(rows, cols, x);
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> dx("dx", rows, cols);
  kflash::logsumexp_backward(Exec(), xv, make_vector<T, Exec>(lse_host), make_vector<T, Exec>(dlse_host), dx);
  const auto got = to_host_row_major(dx);
  const ld tol = 16 * ld(std::numeric_limits<T>::epsilon());  // exp within a few ulp, squared above dlse
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t r = i / cols;
    const T want = T(ld(dlse_host[r]) * std::exp(ld(x[i]) - ld(lse_host[r])));
    if (std::isinf(want)) {
      EXPECT_EQ(got[i], want) << "element " << i << ": x = " << x[i];
    } else {
      EXPECT_LE(std::fabs(ld(got[i]) - ld(want)), tol * std::fabs(ld(want))) << "element " << i << ": x = " << x[i];
    }
  }
}

TYPED_TEST(SoftmaxBackwardTest, HostStreamedWritesMatchPlainOnes) {
  // The host kernels write the gradients of outputs of HostTraits::stream_bytes and more through
  // non-temporal stores, from an aligned buffer: the same bits as the plain writes, from any
  // alignment of dx and for any length (too large to allocate here, so called directly).
  using T = TypeParam;
  if (!kflash::impl::ScheduleTraits<Exec>::host_kernels) GTEST_SKIP() << "no host kernels on this execution space";
  const std::size_t n = 1037;
  const std::vector<T> b = normal_values<T>(n, 790);
  std::vector<T> p = normal_values<T>(n, 791, 10.0);
  for (T& x : p) x = -std::fabs(x);  // log-probabilities
  for (kflash::impl::RowOp op : {kflash::impl::RowOp::softmax, kflash::impl::RowOp::log_softmax}) {
    for (std::size_t offset : {std::size_t(0), std::size_t(1), std::size_t(3)}) {
      std::vector<T> plain(n + 8, T(7)), streamed(n + 8, T(7));
      kflash::impl::host::write_grad(op, p.data(), b.data(), plain.data() + offset, kflash::impl::index_t(n), T(0.375),
                                     false);
      kflash::impl::host::write_grad(op, p.data(), b.data(), streamed.data() + offset, kflash::impl::index_t(n),
                                     T(0.375), true);
      EXPECT_EQ(plain, streamed) << "op " << int(op) << ", dx offset " << offset;
      EXPECT_EQ(plain[offset + n], T(7)) << "written past the end";
    }
  }
}

TYPED_TEST(SoftmaxBackwardTest, LongRowsGiveTheSameBitsAloneOrInABatch) {
  // Batch invariance: a row longer than HostTraits::min_chunk is summed by chunks of that length
  // merged in order, however the rows are shared among the threads (one row split over all of
  // them, or rows enough for each thread): the same bits alone or beside other rows, and within
  // the reference's tolerance.
  using T = TypeParam;
  if (!kflash::impl::ScheduleTraits<Exec>::host_kernels) GTEST_SKIP() << "no host kernels on this execution space";
  const std::size_t cols = 2 * std::size_t(kflash::impl::HostTraits::min_chunk) + 4465;  // 3 chunks
  const std::size_t many = 4 * std::size_t(Exec().concurrency()) + 1;  // rows for every thread
  const std::vector<T> dy_row = normal_values<T>(cols, 771);
  for (bool log_space : {false, true}) {
    const std::vector<T> y_row = forward_rows<T>(1, cols, log_space, 772);
    std::vector<T> y_host, dy_host;
    for (std::size_t r = 0; r < many; ++r) {
      y_host.insert(y_host.end(), y_row.begin(), y_row.end());
      dy_host.insert(dy_host.end(), dy_row.begin(), dy_row.end());
    }
    const auto run = [&](std::size_t rows) {
      const auto y = make_matrix<T, Kokkos::LayoutRight, Exec>(rows, cols, y_host);
      const auto dy = make_matrix<T, Kokkos::LayoutRight, Exec>(rows, cols, dy_host);
      Kokkos::View<T**, Kokkos::LayoutRight, Mem> dx("dx", rows, cols);
      if (log_space) kflash::log_softmax_backward(Exec(), y, dy, dx);
      else kflash::softmax_backward(Exec(), y, dy, dx);
      return to_host_row_major(dx);
    };
    const std::vector<T> alone = run(1), together = run(many);
    const std::string what = log_space ? "log_softmax_backward" : "softmax_backward";
    expect_grad_rows<T>(ref_rows(y_row, dy_row, cols, log_space), alone, cols, what + " of one long row");
    for (std::size_t r = 0; r < many; ++r)
      ASSERT_EQ(std::memcmp(alone.data(), together.data() + r * cols, cols * sizeof(T)), 0)
          << what << ": row " << r << " of " << many << " differs from the same row alone";
  }
}

TYPED_TEST(SoftmaxBackwardTest, BadInputThrows) {
  using T = TypeParam;
  Kokkos::View<T**, Mem> y("y", 4, 6), dy("dy", 4, 6), dx("dx", 4, 6), wide("wide", 4, 7);
  Kokkos::View<T***, Mem> cube("cube", 2, 2, 2);
  expect_invalid([&] { kflash::softmax_backward(Exec(), y, wide, dx); },
                 {"kflash::softmax_backward", "'dy (4, 7)'", "shape of 'y (4, 6)'"});
  expect_invalid([&] { kflash::log_softmax_backward(Exec(), y, dy, wide); },
                 {"kflash::log_softmax_backward", "'dx (4, 7)'", "'y (4, 6)'"});
  expect_invalid([&] { kflash::softmax_backward(Exec(), cube, cube, cube); }, {"'y (2, 2, 2)'", "rank 3"});
  expect_invalid([&] { kflash::softmax_backward(Exec(), y, dy, y); }, {"'dx (4, 6)' overlaps 'y (4, 6)'"});
  const auto shifted = Kokkos::subview(wide, Kokkos::ALL, std::make_pair(1, 7));
  const auto first = Kokkos::subview(wide, Kokkos::ALL, std::make_pair(0, 6));
  expect_invalid([&] { kflash::softmax_backward(Exec(), y, first, shifted); }, {"overlaps", "same View"});
  EXPECT_NO_THROW(kflash::softmax_backward(Exec(), y, dy, dy));  // in place
  Kokkos::View<T*, Mem> lse("lse", 4), dlse("dlse", 4), short_lse("short", 3);
  expect_invalid([&] { kflash::logsumexp_backward(Exec(), y, short_lse, short_lse, dx); },
                 {"kflash::logsumexp_backward", "'lse (3)' does not fit 'x (4, 6)'"});
  expect_invalid([&] { kflash::logsumexp_backward(Exec(), y, lse, short_lse, dx); },
                 {"'dlse (3)' must have the shape of 'lse (4)'"});
  expect_invalid([&] { kflash::logsumexp_backward(Exec(), y, lse, dlse, wide); }, {"'dx (4, 7)'", "'x (4, 6)'"});
  EXPECT_NO_THROW(kflash::logsumexp_backward(Exec(), y, lse, dlse, y));  // in place over x
}

/// cross_entropy_backward on rows x cols of layout L: dlogits apart and in place over the logits,
/// each with and without the forward's lse, checked element by element against the reference.
template <class T, class L>
void check_ce_grads(std::size_t rows, std::size_t cols, const std::vector<T>& x_host,
                    const std::vector<std::int64_t>& targets, const std::vector<T>& dloss_host,
                    const kflash::CrossEntropyOptions& o, const std::string& where) {
  std::vector<RefGrad> ref;
  std::vector<T> lse_host(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    ref.push_back(reference_ce_grad(x_host.data() + r * cols, cols, targets[r], dloss_host[r], o));
    lse_host[r] = T(reference_row(x_host.data() + r * cols, cols).lse());
  }
  const auto t = make_vector<std::int64_t, Exec>(targets);
  const auto dloss = make_vector<T, Exec>(dloss_host);
  const auto lse = make_vector<T, Exec>(lse_host);
  for (bool in_place : {false, true}) {
    for (bool with_lse : {false, true}) {
      const auto x = make_matrix<T, L, Exec>(rows, cols, x_host);
      const auto dx = in_place ? x : make_matrix<T, L, Exec>(rows, cols, std::vector<T>(rows * cols, T(7)));
      if (with_lse) kflash::cross_entropy_backward(Exec(), x, t, dloss, dx, o, lse);
      else kflash::cross_entropy_backward(Exec(), x, t, dloss, dx, o);
      expect_grad_rows<T>(ref, to_host_row_major(dx), cols,
                          where + (in_place ? " in place" : "") + (with_lse ? " with lse" : ""));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

template <class T>
struct CrossEntropyBackwardTest : ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyBackwardTest, Scalars);

TYPED_TEST(CrossEntropyBackwardTest, OptionsAndLayouts) {
  using T = TypeParam;
  kflash::CrossEntropyOptions smooth, zl, both;
  smooth.label_smoothing = 1;
  zl.z_loss = 1e-3;
  both.label_smoothing = 0.25;
  both.z_loss = 0.5;
  both.ignore_index = 3;
  unsigned seed = 900;
  for (std::size_t cols : {std::size_t(1), std::size_t(9), std::size_t(1000), std::size_t(70001)}) {
    const std::size_t rows = cols > 1000 ? 3 : 11;
    for (const kflash::CrossEntropyOptions& o : {both, kflash::CrossEntropyOptions{}, smooth, zl}) {
      const std::vector<T> x = normal_values<T>(rows * cols, ++seed, 4.0);
      std::vector<std::int64_t> t = random_targets(rows, cols, ++seed, 4, o.ignore_index);
      const std::vector<T> g = normal_values<T>(rows, ++seed);
      const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " eps " +
                                std::to_string(o.label_smoothing) + " z " + std::to_string(o.z_loss);
      check_ce_grads<T, Kokkos::LayoutRight>(rows, cols, x, t, g, o, where + " right");
      if (::testing::Test::HasFatalFailure() || cols > 1000) return;  // a long row: one layout (time)
      check_ce_grads<T, Kokkos::LayoutLeft>(rows, cols, x, t, g, o, where + " left");
      if (::testing::Test::HasFatalFailure()) return;
      check_ce_grads<T, Kokkos::LayoutStride>(rows, cols, x, t, g, o, where + " strided");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TYPED_TEST(CrossEntropyBackwardTest, ReferenceMatchesFiniteDifferences) {
  // The reference gradient against central differences of the reference loss (long double) on a
  // row of doubles, for each option: the reference the other tests trust is itself checked.
  (void)sizeof(TypeParam);
  const std::size_t cols = 13;
  const std::vector<double> x = normal_values<double>(cols, 931, 2.0);
  kflash::CrossEntropyOptions o;
  for (double eps_s : {0.0, 0.3}) {
    for (double z : {0.0, 0.2}) {
      o.label_smoothing = eps_s;
      o.z_loss = z;
      const RefGrad grad = reference_ce_grad(x.data(), cols, 5, ld(1.5), o);
      for (std::size_t c = 0; c < cols; ++c) {
        const double h = 1e-4;
        std::vector<double> up = x, down = x;
        up[c] += h;
        down[c] -= h;
        const ld fd = 1.5L * (reference_loss(up.data(), cols, 5, o) - reference_loss(down.data(), cols, 5, o)) /
                      (ld(up[c]) - ld(down[c]));
        EXPECT_NEAR(double(grad.dx[c]), double(fd), 1e-7) << "eps " << eps_s << " z " << z << " col " << c;
      }
    }
  }
}

TYPED_TEST(CrossEntropyBackwardTest, SpecialValues) {
  // Rows: a masked (-inf) class, a -inf target logit, NaN, +inf, only -inf, an ignored row of NaN,
  // a NaN dloss. Masked classes get exactly -eps/C g; rows whose loss is NaN or +inf get NaN.
  using T = TypeParam;
  const std::size_t cols = 4;
  const T ninf = -inf<T>;
  const std::vector<T> x = {1, ninf, 2, 3,  1, 2, ninf, 3,  1, nan<T>, 2, 3,  1, inf<T>, 2, 3,
                            ninf, ninf, ninf, ninf,  nan<T>, nan<T>, 1, 2,  1, 2, 3, 4};
  const std::vector<std::int64_t> t = {0, 2, 0, 0, 1, -100, 3};
  const std::vector<T> g = {1, 2, 1, 1, 1, 1, nan<T>};
  kflash::CrossEntropyOptions o;
  o.label_smoothing = 0.2;
  check_ce_grads<T, Kokkos::LayoutRight>(7, cols, x, t, g, o, "special");
  if (::testing::Test::HasFatalFailure()) return;
  const auto xv = make_matrix<T, Kokkos::LayoutRight, Exec>(7, cols, x);
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> dx("dx", 7, cols);
  kflash::cross_entropy_backward(Exec(), xv, make_vector<std::int64_t, Exec>(t), make_vector<T, Exec>(g), dx, o);
  const auto got = to_host_row_major(dx);
  EXPECT_EQ(got[1], -T(0.2) / T(4)) << "a masked class";
  EXPECT_EQ(got[4 + 2], T(2) * (-T(0.2) / T(4)) - T(2) * T(0.8)) << "a -inf target logit";
  for (std::size_t i = 8; i < 20; ++i) EXPECT_TRUE(std::isnan(got[i])) << "row " << i / cols << " col " << i % cols;
  for (std::size_t i = 20; i < 24; ++i) EXPECT_EQ(got[i], T(0)) << "ignored row, col " << i % cols;
  for (std::size_t i = 24; i < 28; ++i) EXPECT_TRUE(std::isnan(got[i])) << "NaN dloss, col " << i % cols;
}

TYPED_TEST(CrossEntropyBackwardTest, BadInputThrowsAndWritesNothing) {
  using T = TypeParam;
  Kokkos::View<T**, Mem> x("x", 4, 6), dx("dx", 4, 6), wide("wide", 4, 7);
  Kokkos::View<T*, Mem> dloss("dloss", 4), lse("lse", 4), short_v("short", 3);
  const auto t = make_vector<std::int64_t, Exec>({0, 1, 6, 2});
  Kokkos::deep_copy(dx, T(7));
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), x, t, dloss, dx); },
                 {"kflash::cross_entropy_backward", "targets(2) = 6 is outside [0, 6)", "nothing was written"});
  const auto dx_host = to_host_row_major(dx);
  for (std::size_t i = 0; i < dx_host.size(); ++i) ASSERT_EQ(dx_host[i], T(7)) << "element " << i << " was written";
  const auto ok = make_vector<std::int64_t, Exec>({0, 1, -100, 2});
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), x, ok, dloss, wide); },
                 {"'dlogits (4, 7)'", "'logits (4, 6)'"});
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), x, ok, short_v, dx); },
                 {"'dloss (3)' must have one element per row of 'logits (4, 6)'"});
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), x, ok, dloss, dx, {}, short_v); },
                 {"'lse (3)' must have one element per row"});
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), x, ok, dloss, dx, {}, Kokkos::subview(dx, 0, Kokkos::ALL)); },
                 {"'lse (6)'"});
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), x, make_vector<std::int64_t, Exec>({0, 1, 2}), dloss, dx); },
                 {"'targets (3)' must have one target per row"});
  const auto shifted = Kokkos::subview(wide, Kokkos::ALL, std::make_pair(1, 7));
  const auto first = Kokkos::subview(wide, Kokkos::ALL, std::make_pair(0, 6));
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), first, ok, dloss, shifted); }, {"overlaps", "same View"});
  kflash::CrossEntropyOptions bad;
  bad.label_smoothing = 1.5;
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), x, ok, dloss, dx, bad); }, {"label_smoothing"});
  EXPECT_NO_THROW(kflash::cross_entropy_backward(x, ok, dloss, x));  // in place, the default space
}

}  // namespace kflash_test
