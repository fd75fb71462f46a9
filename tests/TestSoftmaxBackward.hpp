// kflash::softmax_backward, log_softmax_backward and logsumexp_backward on TEST_EXECSPACE against
// a long-double reference computed from the same inputs.
#pragma once

#include <TestCommon.hpp>

namespace kflash_test {

using Exec = TEST_EXECSPACE;
using Mem = Exec::memory_space;

/// One row's gradient in long double from the row's inputs as the calls get them, with each
/// element's condition: the magnitude its rounding errors scale with (the terms a difference cancels).
struct RefGrad {
  std::vector<ld> dx, magnitude;
};
struct RefGrads {
  /// dx = y (dy - s), s = sum dy y; magnitude |y| (|dy| + sum |dy y|).
  static RefGrad softmax(const std::vector<ld>& y, const std::vector<ld>& dy) {
    ld s = 0, abs_s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += dy[i] * y[i], abs_s += std::fabs(dy[i] * y[i]);
    RefGrad g;
    for (std::size_t i = 0; i < y.size(); ++i) {
      g.dx.push_back(y[i] * (dy[i] - s));
      g.magnitude.push_back(std::fabs(y[i]) * (std::fabs(dy[i]) + abs_s));
    }
    return g;
  }
  /// dx = dy - exp(y) s, s = sum dy; magnitude |dy| + exp(y) (sum |dy|) (1 + |y|).
  static RefGrad log_softmax(const std::vector<ld>& y, const std::vector<ld>& dy) {
    ld s = 0, abs_s = 0;
    for (ld g : dy) s += g, abs_s += std::fabs(g);
    RefGrad g;
    for (std::size_t i = 0; i < y.size(); ++i) {
      g.dx.push_back(dy[i] - std::exp(y[i]) * s);
      const ld e = std::exp(y[i]);  // 0 for y = -inf, whose term is then exactly 0
      g.magnitude.push_back(std::fabs(dy[i]) + (e == 0 ? ld(0) : e * abs_s * (1 + std::fabs(y[i]))));
    }
    return g;
  }
  /// dx = dlse exp(x - lse) (0 where x = lse = -inf, dlse where x = lse = +inf); magnitude
  /// |dx| (1 + |x| + |lse|), exp's argument being a difference of the two.
  static RefGrad logsumexp(const std::vector<ld>& x, ld lse, ld dlse) {
    RefGrad g;
    for (ld v : x) {
      const ld d = std::isinf(lse) && v == lse ? (lse > 0 ? dlse : ld(0)) : dlse * std::exp(v - lse);
      g.dx.push_back(d);
      g.magnitude.push_back(std::fabs(d) * (1 + (std::isfinite(v) ? std::fabs(v) + std::fabs(lse) : 0)));
    }
    return g;
  }
};

/// Checks got against ref row by row: NaN where ref is NaN, the same infinity where ref is
/// infinite, else |error| <= 64 eps times the element's magnitude (plus the smallest normal).
template <class T>
void expect_grad_rows(const std::vector<RefGrad>& ref, const std::vector<T>& got, std::size_t cols,
                      const std::string& where) {
  const ld tol = 64 * eps<T>;
  for (std::size_t r = 0; r < ref.size(); ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      const ld want = ref[r].dx[c], have = got[r * cols + c];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(have)) << where << " row " << r << " col " << c << ": got " << have << ", want NaN";
      } else if (std::isinf(want)) {
        ASSERT_EQ(have, want) << where << " row " << r << " col " << c;
      } else {
        ASSERT_LE(std::fabs(have - want), tol * ref[r].magnitude[c] + std::numeric_limits<T>::min())
            << where << " row " << r << " col " << c << ": got " << have << ", want " << want;
      }
    }
  }
}

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

template <class T>
std::vector<RefGrad> ref_rows(const std::vector<T>& a, const std::vector<T>& b, std::size_t cols, bool log_space) {
  std::vector<RefGrad> out;
  for (std::size_t r = 0; r * cols < a.size(); ++r) {
    const std::vector<ld> ya(a.begin() + r * cols, a.begin() + (r + 1) * cols);
    const std::vector<ld> gb(b.begin() + r * cols, b.begin() + (r + 1) * cols);
    out.push_back(log_space ? RefGrads::log_softmax(ya, gb) : RefGrads::softmax(ya, gb));
  }
  return out;
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

}  // namespace kflash_test
