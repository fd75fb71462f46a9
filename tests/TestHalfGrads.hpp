// softmax_backward, log_softmax_backward, logsumexp_backward and cross_entropy_backward on 16-bit
// Views (kflash::bhalf_t, kflash::half_t; lse, dlse and dloss float or 16-bit) on TEST_EXECSPACE,
// against the long-double reference on the same 16-bit inputs (GUIDE §9: computed in float, each
// output rounded once): within one unit in the last place of the output plus the fp32 bound.
#pragma once

#include <GradsCommon.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kflash_test {

/// Rows as softmax (or log_softmax) writes them: of normal logits, in long double, rounded to H.
template <class H>
std::vector<H> forward_rows16(std::size_t rows, std::size_t cols, bool log_space, unsigned seed) {
  const std::vector<float> x = normal_values<float>(rows * cols, seed, 3.0);
  std::vector<H> y(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    const ld lse = reference_row(x.data() + r * cols, cols).lse();
    for (std::size_t c = 0; c < cols; ++c) {
      const ld d = ld(x[r * cols + c]) - lse;
      y[r * cols + c] = kflash::impl::narrow<H>(float(log_space ? d : std::exp(d)));
    }
  }
  return y;
}

/// softmax_backward and log_softmax_backward of rows x cols in layout L (dx apart and in place over
/// dy), and logsumexp_backward (lse and dlse float, and 16-bit; dx apart and in place over x).
template <class H, class L>
void check_half_row_grads(std::size_t rows, std::size_t cols, unsigned seed) {
  using Exec = TEST_EXECSPACE;
  const std::string where = std::string(Half16<H>::name()) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                            " " + typeid(L).name();
  const std::vector<H> sevens(rows * cols, kflash::impl::narrow<H>(7.0f));
  const std::vector<H> dy_host = halves<H>(normal_values<float>(rows * cols, seed + 1));
  for (bool log_space : {false, true}) {
    const std::vector<H> y_host = forward_rows16<H>(rows, cols, log_space, seed);
    const auto ref = ref_rows(y_host, dy_host, cols, log_space);
    const auto y = make_matrix<H, L, Exec>(rows, cols, y_host);
    for (bool in_place : {false, true}) {
      const auto dy = make_matrix<H, L, Exec>(rows, cols, dy_host);
      const auto dx = in_place ? dy : make_matrix<H, L, Exec>(rows, cols, sevens);
      if (log_space) kflash::log_softmax_backward(Exec(), y, dy, dx);
      else kflash::softmax_backward(Exec(), y, dy, dx);
      expect_grad_rows<float>(ref, to_host_row_major(dx), cols,
                              where + (log_space ? " log_softmax_backward" : " softmax_backward") +
                                  (in_place ? " in place" : ""));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const std::vector<H> x_host = halves<H>(normal_values<float>(rows * cols, seed + 2, 3.0));
  const std::vector<ld> xw = wide_all(x_host);
  const std::vector<float> dlse32 = normal_values<float>(rows, seed + 3);
  std::vector<float> lse32(rows);
  for (std::size_t r = 0; r < rows; ++r) lse32[r] = float(reference_row(xw.data() + r * cols, cols).lse());
  for (bool stored16 : {false, true}) {
    // The reference takes lse and dlse as the call reads them (rounded to H where stored so).
    const std::vector<H> lse16 = halves<H>(lse32), dlse16 = halves<H>(dlse32);
    std::vector<RefGrad> ref;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::vector<ld> row(xw.begin() + r * cols, xw.begin() + (r + 1) * cols);
      ref.push_back(stored16 ? RefGrads::logsumexp(row, wide(lse16[r]), wide(dlse16[r]))
                             : RefGrads::logsumexp(row, lse32[r], dlse32[r]));
    }
    for (bool in_place : {false, true}) {
      const auto x = make_matrix<H, L, Exec>(rows, cols, x_host);
      const auto dx = in_place ? x : make_matrix<H, L, Exec>(rows, cols, sevens);
      if (stored16) kflash::logsumexp_backward(Exec(), x, make_vector<H, Exec>(lse16), make_vector<H, Exec>(dlse16), dx);
      else kflash::logsumexp_backward(Exec(), x, make_vector<float, Exec>(lse32), make_vector<float, Exec>(dlse32), dx);
      expect_grad_rows<float>(ref, to_host_row_major(dx), cols,
                              where + " logsumexp_backward" + (stored16 ? " (16-bit lse)" : "") +
                                  (in_place ? " in place" : ""));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

template <class H>
void check_half_row_grad_shapes() {
  // Host kernels: rows grouped per work item, through the compiled 16-bit sum and write passes,
  // and rows split into chunks (70001 columns on few rows); the portable schedule for LayoutLeft
  // (no unit stride) and LayoutStride.
  check_half_row_grads<H, Kokkos::LayoutRight>(1, 1, 41);
  check_half_row_grads<H, Kokkos::LayoutRight>(9, 7, 42);
  check_half_row_grads<H, Kokkos::LayoutRight>(40, 700, 43);
  check_half_row_grads<H, Kokkos::LayoutLeft>(9, 300, 44);
  check_half_row_grads<H, Kokkos::LayoutStride>(5, 130, 45);
  check_half_row_grads<H, Kokkos::LayoutRight>(2, 70001, 46);
}

TEST(TEST_CATEGORY, HalfRowGrads) {
  check_half_row_grad_shapes<kflash::bhalf_t>();
  if (::testing::Test::HasFatalFailure()) return;
  check_half_row_grad_shapes<kflash::half_t>();
  // A rank-1 View is one row (the default space's overloads).
  using Exec = TEST_EXECSPACE;
  const std::size_t n = 4099;
  const std::vector<kflash::bhalf_t> y_host = forward_rows16<kflash::bhalf_t>(1, n, false, 47);
  const std::vector<kflash::bhalf_t> dy_host = halves<kflash::bhalf_t>(normal_values<float>(n, 48));
  Kokkos::View<kflash::bhalf_t*, Exec::memory_space> dx("dx", n);
  kflash::softmax_backward(make_vector<kflash::bhalf_t, Exec>(y_host), make_vector<kflash::bhalf_t, Exec>(dy_host), dx);
  expect_grad_rows<float>(ref_rows(y_host, dy_host, n, false), to_host(dx), n, "rank 1 bhalf_t softmax_backward");
}

template <class H>
void check_half_special_grads() {
  // Rows the forward gives for fully masked, partly masked and NaN logits, upstream gradients with
  // NaN and infinities: the reference's arithmetic on the same values says what each element must
  // be; a fully masked row passes nothing back (softmax) or dy itself (log_softmax).
  using Exec = TEST_EXECSPACE;
  const std::size_t cols = 5;
  const float ninf = -inf<float>, n = nan<float>;
  const std::vector<H> y_soft = halves<H>({0, 0, 0, 0, 0,  0, 0.25f, 0.75f, 0, 0,  1, 0, 0, 0, 0,
                                           0.5f, 0.5f, 0, 0, 0,  n, n, n, n, n});
  const std::vector<H> y_log = halves<H>({ninf, ninf, ninf, ninf, ninf,  ninf, -1.386f, -0.288f, ninf, ninf,
                                          0, ninf, ninf, ninf, ninf,  -0.693f, -0.693f, ninf, ninf, ninf,
                                          n, n, n, n, n});
  const std::vector<H> dy = halves<H>({1, 2, 3, 4, 5,  1, 2, 3, 4, 5,  1, n, 1, 1, 1,  inf<float>, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1});
  for (bool log_space : {false, true}) {
    const auto& yh = log_space ? y_log : y_soft;
    Kokkos::View<H**, Kokkos::LayoutRight, Exec::memory_space> dx("dx", 5, cols);
    const auto y = make_matrix<H, Kokkos::LayoutRight, Exec>(5, cols, yh);
    const auto d = make_matrix<H, Kokkos::LayoutRight, Exec>(5, cols, dy);
    if (log_space) kflash::log_softmax_backward(Exec(), y, d, dx);
    else kflash::softmax_backward(Exec(), y, d, dx);
    const auto got = to_host_row_major(dx);
    const std::string where = std::string(Half16<H>::name()) + (log_space ? " special log_softmax_backward"
                                                                          : " special softmax_backward");
    expect_grad_rows<float>(ref_rows(yh, dy, cols, log_space), got, cols, where);
    if (::testing::Test::HasFatalFailure()) return;
    for (std::size_t c = 0; c < cols; ++c)
      EXPECT_EQ(wide(got[c]), log_space ? wide(dy[c]) : ld(0)) << where << " masked row, col " << c;
  }
}

TEST(TEST_CATEGORY, HalfRowGradsSpecialValues) {
  check_half_special_grads<kflash::bhalf_t>();
  check_half_special_grads<kflash::half_t>();
}

/// cross_entropy_backward of 16-bit logits (rows x cols, layout L) with float dloss: dlogits apart
/// and in place over the logits, each with and without the forward's lse (float).
template <class H, class L>
void check_half_ce_grads(std::size_t rows, std::size_t cols, unsigned seed, const kflash::CrossEntropyOptions& o) {
  using Exec = TEST_EXECSPACE;
  const std::string where = std::string(Half16<H>::name()) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                            " " + typeid(L).name() + " eps " + std::to_string(o.label_smoothing) + " z " +
                            std::to_string(o.z_loss);
  const std::vector<H> x_host = halves<H>(normal_values<float>(rows * cols, seed, 4.0));
  const std::vector<ld> xw = wide_all(x_host);
  const std::vector<std::int64_t> targets = random_targets(rows, cols, seed + 1, 4, o.ignore_index);
  const std::vector<float> dloss_host = normal_values<float>(rows, seed + 2);
  std::vector<RefGrad> ref;
  std::vector<float> lse_host(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    ref.push_back(reference_ce_grad(xw.data() + r * cols, cols, targets[r], dloss_host[r], o));
    lse_host[r] = float(reference_row(xw.data() + r * cols, cols).lse());
  }
  const auto t = make_vector<std::int64_t, Exec>(targets);
  const auto dloss = make_vector<float, Exec>(dloss_host);
  const auto lse = make_vector<float, Exec>(lse_host);
  const std::vector<H> sevens(rows * cols, kflash::impl::narrow<H>(7.0f));
  for (bool in_place : {false, true}) {
    for (bool with_lse : {false, true}) {
      const auto x = make_matrix<H, L, Exec>(rows, cols, x_host);
      const auto dx = in_place ? x : make_matrix<H, L, Exec>(rows, cols, sevens);
      if (with_lse) kflash::cross_entropy_backward(Exec(), x, t, dloss, dx, o, lse);
      else kflash::cross_entropy_backward(Exec(), x, t, dloss, dx, o);
      Exec().fence();
      expect_grad_rows<float>(ref, to_host_row_major(dx), cols,
                              where + (in_place ? " in place" : "") + (with_lse ? " with lse" : ""));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

template <class H>
void check_half_ce_grad_shapes() {
  kflash::CrossEntropyOptions both;
  both.label_smoothing = 0.25;
  both.z_loss = 0.5;
  both.ignore_index = 3;
  for (const kflash::CrossEntropyOptions& o : {kflash::CrossEntropyOptions{}, both}) {
    check_half_ce_grads<H, Kokkos::LayoutRight>(11, 9, 51, o);
    check_half_ce_grads<H, Kokkos::LayoutRight>(11, 1000, 52, o);
    check_half_ce_grads<H, Kokkos::LayoutStride>(11, 1000, 53, o);
    check_half_ce_grads<H, Kokkos::LayoutRight>(3, 70001, 54, o);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(TEST_CATEGORY, HalfCrossEntropyBackward) {
  check_half_ce_grad_shapes<kflash::bhalf_t>();
  if (::testing::Test::HasFatalFailure()) return;
  check_half_ce_grad_shapes<kflash::half_t>();
}

/// The host kernels write 16-bit gradients of outputs of HostTraits::stream_bytes and more through
/// non-temporal stores: the same bits as the plain writes, from any alignment of dx and across the
/// widened blocks (too large to allocate here, so called directly).
template <class H>
void check_half_streamed_grads() {
  using kflash::impl::index_t;
  namespace host = kflash::impl::host;
  const std::size_t n = 2 * std::size_t(kflash::impl::HostTraits::widened_block) + 1037;
  const std::vector<H> b = halves<H>(normal_values<float>(n, 792));
  std::vector<float> logs = normal_values<float>(n, 793, 4.0);
  for (float& x : logs) x = -std::fabs(x);
  const std::vector<H> p = halves<H>(logs);
  auto bits = [](const std::vector<H>& v) {
    std::vector<std::uint16_t> out;
    for (const H& h : v) {
      std::uint16_t u;
      std::memcpy(&u, &h, sizeof u);
      out.push_back(u);
    }
    return out;
  };
  const H seven = kflash::impl::narrow<H>(7.0f);
  for (int op = 0; op < 3; ++op) {  // softmax's, log_softmax's and logsumexp's gradients
    for (std::size_t offset : {std::size_t(0), std::size_t(1), std::size_t(3)}) {
      std::vector<H> plain(n + 40, seven), streamed(n + 40, seven);
      for (bool stream : {false, true}) {
        H* dx = (stream ? streamed : plain).data() + offset;
        if (op == 2) host::write_lse_grad(p.data(), dx, index_t(n), 0.25f, 1.5f, stream);
        else host::write_grad(op == 0 ? kflash::impl::RowOp::softmax : kflash::impl::RowOp::log_softmax, p.data(),
                              b.data(), dx, index_t(n), 0.375f, stream);
      }
      EXPECT_EQ(bits(plain), bits(streamed)) << Half16<H>::name() << " op " << op << ", dx offset " << offset;
      EXPECT_EQ(wide(plain[offset + n]), ld(7)) << "written past the end";
    }
  }
}

TEST(TEST_CATEGORY, HalfHostStreamedGradsMatchPlainOnes) {
  if (!kflash::impl::ScheduleTraits<TEST_EXECSPACE>::host_kernels) GTEST_SKIP() << "no host kernels here";
  check_half_streamed_grads<kflash::bhalf_t>();
  check_half_streamed_grads<kflash::half_t>();
}

TEST(TEST_CATEGORY, HalfGradsBadInputThrows) {
  using Exec = TEST_EXECSPACE;
  using H = kflash::bhalf_t;
  Kokkos::View<H**, Exec::memory_space> y("y", 4, 6), dy("dy", 4, 6), wide_dy("wide", 4, 7);
  expect_invalid([&] { kflash::softmax_backward(Exec(), y, wide_dy, dy); },
                 {"kflash::softmax_backward", "'dy (4, 7)'", "shape of 'y (4, 6)'"});
  Kokkos::View<float*, Exec::memory_space> lse("lse", 4), short_dlse("short", 3);
  expect_invalid([&] { kflash::logsumexp_backward(Exec(), y, lse, short_dlse, dy); },
                 {"kflash::logsumexp_backward", "'dlse (3)' must have the shape of 'lse (4)'"});
  Kokkos::View<std::int64_t*, Exec::memory_space> targets("targets", 4);
  Kokkos::deep_copy(targets, 6);
  Kokkos::View<float*, Exec::memory_space> dloss("dloss", 4);
  Kokkos::deep_copy(dy, kflash::impl::narrow<H>(7.0f));
  expect_invalid([&] { kflash::cross_entropy_backward(Exec(), y, targets, dloss, dy); },
                 {"kflash::cross_entropy_backward", "targets(0) = 6"});
  const auto after = to_host_row_major(dy);
  for (const H& h : after) ASSERT_EQ(wide(h), ld(7)) << "cross_entropy_backward wrote before its check";
}

}  // namespace kflash_test
