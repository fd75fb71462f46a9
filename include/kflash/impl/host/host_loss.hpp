// The host schedules of cross-entropy on contiguous rows, teams of one thread: the statistics phase
// (a work item of several whole rows, or one chunk of a split row, to the compiled kernel
// run_logit_rows) and the gradient's write phase (a row or chunk to write_scaled_exp).
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/cross_entropy.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace kflash::impl::host {

template <class ExecSpace, class XRows, class Targets, class Workspace>
struct HostLogitStatsKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = typename Workspace::value_type::value_type;

  XRows x;
  Targets targets;
  Workspace ws;
  RowPlan plan;
  index_t col0;
  bool sum_logits;  // LogitStats::total taken (label smoothing needs it), else left 0

  /// Rows [r0, r0 + rows) from column begin, `cols` columns each (c: the chunk's index in ws).
  void stats(index_t r0, index_t rows, index_t c, index_t begin, index_t cols) const {
    using S = std::remove_cv_t<typename decltype(XRows::v)::value_type>;
    if constexpr (is_half_type<S>) {
      run_logit_rows16(storage16_of<S>, reinterpret_cast<const std::uint16_t*>(x.row(r0) + begin), x.row_stride(),
                       &ws(r0, c), index_t(ws.stride_0()), rows, cols, sum_logits);
    } else {
      run_logit_rows(LogitBlock<T>{x.row(r0) + begin, x.row_stride(), &ws(r0, c), index_t(ws.stride_0()), rows, cols,
                                   sum_logits});
    }
    for (index_t r = r0; r < r0 + rows; ++r)
      ws(r, c).target_logit = target_logit_in(x, targets, r, col0, begin, begin + cols);
  }

  /// Whole rows (plan.rows_per_item at a time) or one chunk of a row.
  void operator()(const member_type& team) const {
    const index_t item = team.league_rank();
    if (plan.chunks == 1) {
      const index_t r0 = item * plan.rows_per_item;
      const index_t r1 = r0 + plan.rows_per_item < plan.rows ? r0 + plan.rows_per_item : plan.rows;
      if (r0 < r1) stats(r0, r1 - r0, 0, 0, plan.cols);
      return;
    }
    const RowChunk rc(plan, item);
    stats(rc.r, 1, rc.c, rc.begin, rc.end - rc.begin);
  }
};

template <class ExecSpace, class XRows, class Targets, class Workspace>
void run_host_logit_stats(const ExecSpace& exec, const XRows& x, const Targets& targets, const Workspace& ws,
                          const RowPlan& plan, index_t col0, bool sum_logits, const std::string& label) {
  const index_t items =
      plan.chunks == 1 ? (plan.rows + plan.rows_per_item - 1) / plan.rows_per_item : plan.rows * plan.chunks;
  using Kernel = HostLogitStatsKernel<ExecSpace, XRows, Targets, Workspace>;
  Kokkos::parallel_for(label, Kokkos::TeamPolicy<ExecSpace>(exec, int(items), 1, 1),
                       Kernel{x, targets, ws, plan, col0, sum_logits});
}

/// The gradient phase: each row or chunk (RowChunk) gets scale exp(x - lse) - offset from the
/// compiled kernel (CrossEntropyGrad's factors), then the target's element its own value from the
/// logit read before the pass (dx may be x); ignored rows get 0.
template <class ExecSpace, class XRows, class Targets, class DLoss, class RowLse, class DXRows>
struct HostCrossEntropyGradKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using S = std::remove_cv_t<typename decltype(XRows::v)::value_type>;  // storage: T, or 16 bits
  using T = arith_t<S>;

  XRows x;
  Targets targets;
  DLoss dloss;
  RowLse lse;
  DXRows dx;
  RowPlan plan;
  std::int64_t ignore_index;
  LossTerms terms;

  void operator()(const member_type& team) const {
    const RowChunk rc(plan, team.league_rank());
    S* out = dx.row(rc.r) + rc.begin;
    const std::int64_t t = std::int64_t(targets(rc.r));
    if (t == ignore_index) {
      std::fill(out, out + (rc.end - rc.begin), store_as<S>(T(0)));
      return;
    }
    const CrossEntropyGrad<T> grad(T(widen(lse(rc.r))), T(widen(dloss(rc.r))), plan.cols, terms);
    const bool has_target = t >= rc.begin && t < rc.end;
    const T x_target = has_target ? T(widen(x(rc.r, index_t(t)))) : T(0);
    write_scaled_exp(x.row(rc.r) + rc.begin, out, rc.end - rc.begin, grad.lse, grad.weight, grad.smooth);
    if (has_target) dx(rc.r, index_t(t)) = store_as<S>(grad(x_target, true));
  }
};

template <class ExecSpace, class XRows, class Targets, class DLoss, class RowLse, class DXRows>
void run_host_cross_entropy_grad(const ExecSpace& exec, const XRows& x, const Targets& targets, const DLoss& dloss,
                                 const RowLse& lse, const DXRows& dx, const RowPlan& plan, std::int64_t ignore_index,
                                 const LossTerms& terms, const std::string& label) {
  using Kernel = HostCrossEntropyGradKernel<ExecSpace, XRows, Targets, DLoss, RowLse, DXRows>;
  Kokkos::parallel_for(label, Kokkos::TeamPolicy<ExecSpace>(exec, int(plan.rows * plan.chunks), 1, 1),
                       Kernel{x, targets, dloss, lse, dx, plan, ignore_index, terms});
}

}  // namespace kflash::impl::host
