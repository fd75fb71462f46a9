// Picks the schedule of cross-entropy's statistics phase and of its gradient's write phase:
// contiguous rows on a space whose traits have host kernels go to the host schedules
// (host/host_loss.hpp), others to the portable kernels (schedule/cross_entropy.hpp); the loss phase
// is portable.
#pragma once

#include <kflash/impl/host/host_loss.hpp>
#include <kflash/impl/schedule/cross_entropy.hpp>
#include <kflash/impl/workspace.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

namespace kflash::impl {

/// ws(r, c) = the LogitStats of chunk c of row r of x under `plan` (x's first column being column
/// col0 of the vocabulary), their logits' sums only with sum_logits (else 0: the loss needs them
/// only for label smoothing, the gradient never).
template <class ExecSpace, class XRows, class Targets, class Workspace>
void dispatch_logit_stats(const ExecSpace& exec, const XRows& x, const Targets& targets, const Workspace& ws,
                          RowPlan plan, index_t col0, bool sum_logits, const std::string& label) {
  using Traits = ScheduleTraits<ExecSpace>;
  if (plan.rows == 0) return;
  if constexpr (Traits::host_kernels) {
    if (x.unit_stride()) {
      host::run_host_logit_stats(exec, x, targets, ws, plan, col0, sum_logits, label);
      return;
    }
  }
  plan.rows_per_item = 1;  // the portable kernel takes one row (or chunk) per team
  run_logit_stats_kernel<Traits>(exec, x, targets, ws, plan, col0, sum_logits, label);
}

/// The cross-entropy of every row of logits x (rows, vocabulary) into loss: the statistics phase
/// into a workspace, then the loss phase, whose totals it returns (after the kernels complete).
template <class ExecSpace, class XView, class TargetsView, class LossView>
LossTotal cross_entropy_rows(const ExecSpace& exec, const XView& x, const TargetsView& targets, const LossView& loss,
                             std::int64_t ignore_index, const LossTerms& terms) {
  using T = arith_t<typename XView::value_type>;
  using Traits = ScheduleTraits<ExecSpace>;
  using memory_space = typename ExecSpace::memory_space;
  using Workspace = Kokkos::View<LogitStats<T>**, memory_space, Kokkos::MemoryUnmanaged>;
  const Rows<XView> rows{x};
  const RowPlan plan = plan_rows<T, Traits>(exec, rows.rows(), rows.cols());
  const std::string label = "kflash::cross_entropy";
  const CachedWorkspace<memory_space> scratch(
      exec, sizeof(LogitStats<T>) * std::size_t(plan.rows * plan.chunks), label + " workspace");
  const Workspace ws(scratch.template at<LogitStats<T>>(0), plan.rows, plan.chunks);
  dispatch_logit_stats(exec, rows, targets, ws, plan, 0, terms.label_smoothing != 0, label + " stats");
  return run_cross_entropy_loss(exec, ws, targets, loss, plan.cols, ignore_index, terms, label + " loss");
}

/// The gradient of the cross-entropy of every row of logits x (rows, vocabulary) into dx, after
/// check_targets found every target valid (else nothing is written and its totals say which row):
/// each row's lse from the caller's View, or (lse = nullptr) from the statistics phase into a
/// workspace, then the gradient phase (fenced: the workspace must outlive it). Returns the
/// targets' check.
template <class ExecSpace, class XView, class TargetsView, class DLossView, class DXView, class LseView>
LossTotal cross_entropy_backward_rows(const ExecSpace& exec, const XView& x, const TargetsView& targets,
                                      const DLossView& dloss, const DXView& dx, const LseView& lse,
                                      std::int64_t ignore_index, const LossTerms& terms) {
  using T = arith_t<typename XView::value_type>;
  using Traits = ScheduleTraits<ExecSpace>;
  using memory_space = typename ExecSpace::memory_space;
  const Rows<XView> rows{x};
  const std::string label = "kflash::cross_entropy_backward";
  const LossTotal check = check_targets(exec, targets, rows.cols(), ignore_index, label + " targets");
  if (check.bad_row < rows.rows()) return check;
  const RowPlan plan = plan_rows<T, Traits>(exec, rows.rows(), rows.cols());
  if (plan.rows == 0 || plan.cols == 0) return check;
  const Rows<DXView> dx_rows{dx};
  const auto gradient = [&](const auto& row_lse) {
    if constexpr (Traits::host_kernels) {
      if (rows.unit_stride() && dx_rows.unit_stride()) {
        host::run_host_cross_entropy_grad(exec, rows, targets, dloss, row_lse, dx_rows, plan, ignore_index, terms,
                                          label);
        return;
      }
    }
    run_cross_entropy_grad<Traits>(exec, rows, targets, dloss, row_lse, dx_rows, plan, ignore_index, terms, label);
  };
  if constexpr (std::is_null_pointer<LseView>::value) {
    using Workspace = Kokkos::View<LogitStats<T>**, memory_space, Kokkos::MemoryUnmanaged>;
    const CachedWorkspace<memory_space> scratch(
        exec, sizeof(LogitStats<T>) * std::size_t(plan.rows * plan.chunks), label + " workspace");
    const Workspace ws(scratch.template at<LogitStats<T>>(0), plan.rows, plan.chunks);
    dispatch_logit_stats(exec, rows, targets, ws, plan, 0, false, label + " stats");
    gradient(LseOfStats<Workspace>{ws});
    exec.fence();  // the workspace must outlive the kernels
  } else {
    gradient(LseGiven<LseView>{lse});
  }
  return check;
}

}  // namespace kflash::impl
