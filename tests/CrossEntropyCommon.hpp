// What the cross-entropy tests and the fuzzer share: the long-double reference loss, its
// tolerance, targets, and the checked call.
#pragma once

#include <TestCommon.hpp>

#include <algorithm>
#include <cstdint>

namespace kflash_test {

/// The loss of one row in long double: (1 - eps)(lse - x_t) + eps (lse - mean x) + z lse^2; NaN for
/// a row with NaN or +inf, +inf where a log-probability in a term is -inf; 0 for an ignored row.
/// Each difference is taken as (max - x) + log l: lse - x would lose log l against a maximum near
/// FLT_MAX even in long double.
template <class T>
ld reference_loss(const T* x, std::size_t cols, std::int64_t target, const kflash::CrossEntropyOptions& o) {
  if (target == o.ignore_index) return 0;
  const RefRow r = reference_row(x, cols);
  if (r.nan || r.max == inf<ld>) return nan<ld>;
  if (r.max == -inf<ld>) return inf<ld>;
  const ld lse = r.lse();
  ld loss = 0;
  const ld log_l = std::log(r.l);
  if (o.label_smoothing != 1) loss += (1 - ld(o.label_smoothing)) * ((r.max - ld(x[target])) + log_l);
  if (o.label_smoothing != 0) {
    ld sum = 0;
    for (std::size_t c = 0; c < cols; ++c) sum += x[c];
    loss += ld(o.label_smoothing) * ((r.max - sum / ld(cols)) + log_l);
  }
  if (o.z_loss != 0) loss += ld(o.z_loss) * lse * lse;
  return loss;
}

/// Tolerance of a row's loss: the contract's bound on l (2e-6 / 2e-13 relative, so as much absolute
/// in log l), carried through the z-loss's square, plus the rounding of the result to T.
template <class T>
ld loss_tolerance(ld ref, ld lse, const kflash::CrossEntropyOptions& o) {
  const ld rel_l = std::is_same<T, float>::value ? 2e-6L : 2e-13L;
  return rel_l * (1 + 2 * ld(o.z_loss) * std::fabs(lse)) + 2 * eps<T> * std::fabs(ref);
}

template <class T>
void expect_loss_matches(ld ref, T got, ld tol, const std::string& where) {
  if (std::isnan(ref)) {
    ASSERT_TRUE(std::isnan(got)) << where << ": expected NaN, got " << got;
  } else if (std::isinf(ref) || std::isinf(T(ref))) {  // a loss past T's range rounds to infinity
    ASSERT_EQ(ld(got), ld(T(ref))) << where << ": reference " << double(ref);
  } else {
    ASSERT_LE(std::fabs(ld(got) - ref), tol) << where << ": got " << got << " ref " << ref;
  }
}

/// Targets for `rows` rows of `cols` classes, reproducible from the seed; every `ignore_every`-th
/// row (if not 0) gets ignore_index.
inline std::vector<std::int64_t> random_targets(std::size_t rows, std::size_t cols, unsigned seed,
                                                std::size_t ignore_every, std::int64_t ignore_index = -100) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> pick(0, std::int64_t(cols) - 1);
  std::vector<std::int64_t> t(rows);
  for (std::size_t r = 0; r < rows; ++r) t[r] = ignore_every != 0 && r % ignore_every == 1 ? ignore_index : pick(gen);
  return t;
}

/// Runs cross_entropy on logits of layout L (row-major host data) and targets of type I, and checks
/// each row's loss and the mean against the reference.
template <class T, class L, class I = std::int64_t>
void check_cross_entropy(std::size_t rows, std::size_t cols, const std::vector<T>& host,
                         const std::vector<std::int64_t>& targets, const kflash::CrossEntropyOptions& o,
                         const std::string& where) {
  using Exec = TEST_EXECSPACE;
  const auto logits = make_matrix<T, L, Exec>(rows, cols, host);
  std::vector<I> t_host(targets.begin(), targets.end());
  const auto t = make_vector<I, Exec>(t_host);
  Kokkos::View<T*, typename Exec::memory_space> loss("loss", rows);
  Kokkos::View<T, typename Exec::memory_space> mean("mean");
  kflash::cross_entropy(Exec(), logits, t, loss, mean, o);
  const auto got = to_host(loss);
  T got_mean;
  Kokkos::deep_copy(got_mean, mean);
  ld sum = 0, sum_tol = 0;
  std::size_t counted = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const T* x = host.data() + r * cols;
    const ld ref = reference_loss(x, cols, targets[r], o);
    const bool ignored = targets[r] == o.ignore_index;  // exactly 0
    // Label smoothing takes the logits' mean from their sum in T, plain within a host tile and
    // compensated across tiles: up to min(cols, tile) roundings of the magnitudes' sum, over cols.
    ld magnitudes = 0;
    for (std::size_t c = 0; c < cols; ++c)
      if (std::isfinite(x[c])) magnitudes += std::fabs(ld(x[c]));
    const ld tile = ld(std::min<std::size_t>(cols, kflash::impl::HostTraits::tile));
    const ld mean_tol = ld(o.label_smoothing) * eps<T> * tile * magnitudes / ld(cols);
    const ld tol = ignored ? 0 : loss_tolerance<T>(ref, reference_row(x, cols).lse(), o) + mean_tol;
    expect_loss_matches(ref, got[r], tol, where + " row " + std::to_string(r));
    if (::testing::Test::HasFatalFailure()) return;
    if (!ignored) {
      sum += ref;
      sum_tol += tol;
      ++counted;
    }
  }
  if (counted == 0) {
    EXPECT_TRUE(std::isnan(got_mean)) << where << ": the mean over no rows is NaN";
  } else if (std::fabs(sum) > ld(std::numeric_limits<double>::max())) {
    // The losses are summed in double: past its range the mean is infinite (README, Cross-entropy).
    EXPECT_EQ(ld(got_mean), sum > 0 ? inf<ld> : -inf<ld>) << where << " mean";
  } else {
    const ld ref_mean = sum / ld(counted);
    expect_loss_matches(ref_mean, got_mean, sum_tol / ld(counted) + 2 * eps<T> * std::fabs(ref_mean),
                        where + " mean");
  }
}

}  // namespace kflash_test
