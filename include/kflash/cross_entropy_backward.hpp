// cross_entropy_backward (GUIDE §8): the gradient of each row's cross-entropy loss with respect to
// its logits, in place over the logits if asked.
#pragma once

#include <kflash/cross_entropy.hpp>

#include <cstddef>

namespace kflash {
namespace impl {

template <class ExecSpace, class LogitsView, class TargetsView, class DLossView, class DLogitsView, class LseView>
void cross_entropy_backward_checked(const ExecSpace& exec, const LogitsView& logits, const TargetsView& targets,
                                    const DLossView& dloss, const DLogitsView& dlogits, const LseView& lse,
                                    const CrossEntropyOptions& options) {
  static_check_view<ExecSpace, DLossView, false, true>();
  static_check_view<ExecSpace, DLogitsView, true, true>();
  static_check_row_scalars<LogitsView, DLossView>();
  static_check_same_type<LogitsView, DLogitsView>();
  const char* fn = "cross_entropy_backward";
  const CallScope<ExecSpace> call(fn);
  check_logits_and_targets<ExecSpace, true>(fn, logits, targets, options);
  require_one_per_row(fn, "dloss", dloss, logits, "one element");
  require_same_shape(fn, "logits", logits, "dlogits", dlogits);
  require_same_or_disjoint(fn, "logits", logits, "dlogits", dlogits);
  require_disjoint(fn, "dlogits", dlogits, "targets", targets);
  require_disjoint(fn, "dlogits", dlogits, "dloss", dloss);
  if constexpr (!std::is_null_pointer<LseView>::value) {
    static_check_view<ExecSpace, LseView, false, true>();
    static_check_row_scalars<LogitsView, LseView>();
    require_one_per_row(fn, "lse", lse, logits, "one element");
    require_disjoint(fn, "dlogits", dlogits, "lse", lse);
  }
  if constexpr (view_rank<LogitsView> == 2 && view_rank<TargetsView> == 1 && view_rank<DLossView> == 1 &&
                view_rank<DLogitsView> == 2) {
    const auto run = [&] {
      const LossTotal check = cross_entropy_backward_rows(exec, logits, targets, dloss, dlogits, lse,
                                                          options.ignore_index,
                                                          LossTerms{options.label_smoothing, options.z_loss});
      require_targets_in(check, index_t(logits.extent(0)), index_t(logits.extent(1)),
                         vocabulary_of(logits), options.ignore_index, fn,
                         "nothing was written");
    };
    if constexpr (std::is_null_pointer<LseView>::value) run();
    else if constexpr (view_rank<LseView> == 1) run();
  }
}

}  // namespace impl

/// dlogits(r, c) = d loss(r) / d logits(r, c) times dloss(r), for loss = cross_entropy(logits,
/// targets, options):
///   dloss(r) ((1 + 2 z lse_r) p_rc - eps / C - (1 - eps) [c = targets(r)]),
/// p_r = softmax(logits(r, :)), lse_r its logsumexp, C the vocabulary, eps = label_smoothing, z =
/// z_loss. Rows whose target is ignore_index get 0; a row whose lse is not finite (NaN or +inf in it,
/// or only -inf) gets NaN. dlogits may be the logits' own View (in place: no vocabulary-sized
/// buffer) and must not overlap the others. A target outside [0, C) that is not ignore_index throws
/// std::invalid_argument before anything is written. dlogits has the logits' value type; dloss (and
/// lse) the logits' value type, or float where the logits hold 16-bit values (computed in float,
/// each element of dlogits rounded once). Returns after its first check of the targets
/// (a fence); the gradient may still be running (fence exec before reading it on the host), except
/// without lse, where the call returns after it.
template <class ExecSpace, class LogitsView, class TargetsView, class DLossView, class DLogitsView,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void cross_entropy_backward(const ExecSpace& exec, const LogitsView& logits, const TargetsView& targets,
                            const DLossView& dloss, const DLogitsView& dlogits, const CrossEntropyOptions& options = {}) {
  impl::cross_entropy_backward_checked(exec, logits, targets, dloss, dlogits, nullptr, options);
}

/// The same, with each row's lse (rank 1, as logsumexp(logits) writes it) from the caller: one read
/// of the logits fewer.
template <class ExecSpace, class LogitsView, class TargetsView, class DLossView, class DLogitsView, class LseView,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value && Kokkos::is_view<LseView>::value, int> = 0>
void cross_entropy_backward(const ExecSpace& exec, const LogitsView& logits, const TargetsView& targets,
                            const DLossView& dloss, const DLogitsView& dlogits, const CrossEntropyOptions& options,
                            const LseView& lse) {
  impl::cross_entropy_backward_checked(exec, logits, targets, dloss, dlogits, lse, options);
}

/// The same, on the default execution space of the logits' View.
template <class LogitsView, class TargetsView, class DLossView, class DLogitsView,
          std::enable_if_t<Kokkos::is_view<LogitsView>::value, int> = 0>
void cross_entropy_backward(const LogitsView& logits, const TargetsView& targets, const DLossView& dloss,
                            const DLogitsView& dlogits, const CrossEntropyOptions& options = {}) {
  cross_entropy_backward(impl::default_space<LogitsView>("cross_entropy_backward"), logits, targets, dloss, dlogits,
                         options);
}
template <class LogitsView, class TargetsView, class DLossView, class DLogitsView, class LseView,
          std::enable_if_t<Kokkos::is_view<LogitsView>::value && Kokkos::is_view<LseView>::value, int> = 0>
void cross_entropy_backward(const LogitsView& logits, const TargetsView& targets, const DLossView& dloss,
                            const DLogitsView& dlogits, const CrossEntropyOptions& options, const LseView& lse) {
  cross_entropy_backward(impl::default_space<LogitsView>("cross_entropy_backward"), logits, targets, dloss, dlogits,
                         options, lse);
}

}  // namespace kflash
