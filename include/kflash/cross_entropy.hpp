// cross_entropy: the loss of rows of logits against integer targets, from one read of the logits.
#pragma once

#include <kflash/impl/errors.hpp>
#include <kflash/impl/spec/cross_entropy_spec.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

namespace kflash {

/// The options of cross_entropy (PyTorch's CrossEntropyLoss, plus PaLM's z-loss).
struct CrossEntropyOptions {
  /// Rows whose target equals this get loss 0 and are left out of the mean.
  std::int64_t ignore_index = -100;
  /// epsilon in [0, 1]: loss = (1 - epsilon) (-log p_target) + (epsilon / vocab) sum_c (-log p_c).
  double label_smoothing = 0;
  /// coefficient >= 0 of lse^2 added to each row's loss (lse = logsumexp of the row's logits).
  double z_loss = 0;
};

namespace impl {

/// Throws unless `view` (rank 1) has one element per row of logits (rank 2).
template <class View, class LogitsView>
void require_one_per_row(const char* fn, const char* name, const View& view, const LogitsView& logits,
                         const char* what) {
  require_rank(fn, name, view, 1, 1);
  if constexpr (view_rank<LogitsView> == 2 && view_rank<View> == 1) {
    if (view.extent(0) != logits.extent(0))
      throw_invalid_argument(fn, "argument '" + describe(name, view) + "' must have " + what + " per row of '" +
                                     describe("logits", logits) + "'");
  }
}

/// The checks cross_entropy and cross_entropy_backward share: logits of rank 2, a View of integer
/// targets with one per row, and valid options. Takes16: 16-bit logits are taken.
template <class ExecSpace, bool Takes16 = false, class LogitsView, class TargetsView>
void check_logits_and_targets(const char* fn, const LogitsView& logits, const TargetsView& targets,
                              const CrossEntropyOptions& options) {
  static_check_view<ExecSpace, LogitsView, false, Takes16>();
  static_assert(Kokkos::is_view<TargetsView>::value, "kflash: arguments must be Kokkos::View");
  static_assert(std::is_integral<std::remove_cv_t<typename TargetsView::value_type>>::value,
                "kflash::cross_entropy: targets must be a View of an integer type");
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, typename TargetsView::memory_space>::accessible,
                "kflash: View memory space is not accessible from the execution space");
  require_rank(fn, "logits", logits, 2, 2);
  require_one_per_row(fn, "targets", targets, logits, "one target");
  if (!(options.label_smoothing >= 0 && options.label_smoothing <= 1))
    throw_invalid_argument(fn, "options.label_smoothing = " + std::to_string(options.label_smoothing) +
                                   " is outside [0, 1]");
  if (!(options.z_loss >= 0 && std::isfinite(options.z_loss)))
    throw_invalid_argument(fn, "options.z_loss = " + std::to_string(options.z_loss) +
                                   " must be finite and >= 0");
}

/// Takes16: 16-bit logits are taken (with a float loss).
template <class ExecSpace, bool Takes16 = false, class LogitsView, class TargetsView, class LossView>
void check_cross_entropy(const LogitsView& logits, const TargetsView& targets, const LossView& loss,
                         const CrossEntropyOptions& options) {
  static_check_view<ExecSpace, LossView, true>();
  static_assert(std::is_same<arith_t<typename LogitsView::value_type>, typename LossView::value_type>::value,
                "kflash::cross_entropy: loss must have the logits' value type (float where the logits are 16-bit)");
  const char* fn = "cross_entropy";
  const CallScope<ExecSpace> call(fn);
  require_disjoint(fn, "loss", loss, "logits", logits);
  require_disjoint(fn, "loss", loss, "targets", targets);
  check_logits_and_targets<ExecSpace, Takes16>(fn, logits, targets, options);
  require_one_per_row(fn, "loss", loss, logits, "one element");
}

/// The vocabulary's size named as logits' extent 1, for require_targets_in.
template <class LogitsView>
auto vocabulary_of(const LogitsView& logits) {
  return [&logits] { return "'" + describe("logits", logits) + "' extent 1"; };
}

/// Throws unless the loss phase whose totals are `total`, over `rows` rows of a vocabulary of `vocab`
/// classes, found every target in range or ignored. vocab_is() says where that size comes from (a
/// string built only for the message: on every call it took about a tenth of a small call's time).
template <class VocabIs>
void require_targets_in(const LossTotal& total, index_t rows, index_t vocab, const VocabIs& vocab_is,
                        std::int64_t ignore_index, const char* fn = "cross_entropy",
                        const char* consequence = "its loss is NaN") {
  if (total.bad_row >= rows) return;
  throw_invalid_argument(fn, "targets(" + std::to_string(total.bad_row) + ") = " +
                                              std::to_string(total.bad_target) + " is outside [0, " +
                                              std::to_string(vocab) + ") (the vocabulary: " + vocab_is() +
                                              ") and is not ignore_index (" + std::to_string(ignore_index) +
                                              "); " + consequence);
}

/// Runs the loss over the rows, then refuses a target outside the vocabulary (after the kernels:
/// every other row's loss is written, that row's is NaN). Returns the totals.
template <class ExecSpace, class LogitsView, class TargetsView, class LossView>
LossTotal cross_entropy_checked(const ExecSpace& exec, const LogitsView& logits, const TargetsView& targets,
                                const LossView& loss, const CrossEntropyOptions& options) {
  check_cross_entropy<ExecSpace, true>(logits, targets, loss, options);
  LossTotal total = LossTotal::identity();
  if constexpr (view_rank<LogitsView> == 2 && view_rank<TargetsView> == 1 && view_rank<LossView> == 1) {
    total = cross_entropy_rows(exec, logits, targets, loss, options.ignore_index,
                               LossTerms{options.label_smoothing, options.z_loss});
  }
  require_targets_in(total, index_t(logits.extent(0)), index_t(logits.extent(1)), vocabulary_of(logits),
                     options.ignore_index);
  return total;
}

}  // namespace impl

/// loss(r) = the cross-entropy of row r of logits (rows, vocabulary) against the class targets(r):
///   -log softmax(logits(r, :))[targets(r)], with options.label_smoothing and options.z_loss as
///   CrossEntropyOptions describes; rows whose target is options.ignore_index get 0.
/// logits of any layout, float, double or 16-bit (kflash::bhalf_t, kflash::half_t: computed in
/// float, loss float); targets of any integer type. Reads the logits once. Returns after the
/// kernels complete (it checks the targets as it runs): a target outside [0, vocabulary) that is not
/// ignore_index throws std::invalid_argument naming the first such row, after writing the others.
template <class ExecSpace, class LogitsView, class TargetsView, class LossView,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void cross_entropy(const ExecSpace& exec, const LogitsView& logits, const TargetsView& targets, const LossView& loss,
                   const CrossEntropyOptions& options = {}) {
  impl::cross_entropy_checked(exec, logits, targets, loss, options);
}

/// The same, and mean() = the mean loss over the rows not ignored (NaN if there are none), as
/// PyTorch's reduction='mean'. mean: a rank-0 View of the loss's value type.
template <class ExecSpace, class LogitsView, class TargetsView, class LossView, class MeanView,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value && Kokkos::is_view<MeanView>::value, int> = 0>
void cross_entropy(const ExecSpace& exec, const LogitsView& logits, const TargetsView& targets, const LossView& loss,
                   const MeanView& mean, const CrossEntropyOptions& options = {}) {
  using T = typename LossView::value_type;
  impl::static_check_view<ExecSpace, MeanView, true>();
  static_assert(std::is_same<typename MeanView::value_type, T>::value,
                "kflash::cross_entropy: mean must have the value type of loss");
  impl::require_rank("cross_entropy", "mean", mean, 0, 0);
  const impl::LossTotal total = impl::cross_entropy_checked(exec, logits, targets, loss, options);
  const T value = total.counted > 0 ? T(total.sum / double(total.counted)) : impl::quiet_nan<T>();
  if constexpr (impl::view_rank<MeanView> == 0) Kokkos::deep_copy(mean, value);
}

/// The same, on the default execution space of the logits' View.
template <class LogitsView, class TargetsView, class LossView,
          std::enable_if_t<Kokkos::is_view<LogitsView>::value, int> = 0>
void cross_entropy(const LogitsView& logits, const TargetsView& targets, const LossView& loss,
                   const CrossEntropyOptions& options = {}) {
  cross_entropy(impl::default_space<LogitsView>("cross_entropy"), logits, targets, loss, options);
}
template <class LogitsView, class TargetsView, class LossView, class MeanView,
          std::enable_if_t<Kokkos::is_view<LogitsView>::value && Kokkos::is_view<MeanView>::value, int> = 0>
void cross_entropy(const LogitsView& logits, const TargetsView& targets, const LossView& loss, const MeanView& mean,
                   const CrossEntropyOptions& options = {}) {
  cross_entropy(impl::default_space<LogitsView>("cross_entropy"), logits, targets, loss, mean, options);
}

}  // namespace kflash
