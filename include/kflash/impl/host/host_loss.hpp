// The host schedule of cross-entropy's statistics phase on contiguous rows: a team of one thread per
// work item (several whole rows, or one chunk of a split row), handing each to the compiled host
// kernel run_logit_rows.
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/cross_entropy.hpp>

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

  /// Rows [r0, r0 + rows) from column begin, `cols` columns each (c: the chunk's index in ws).
  void stats(index_t r0, index_t rows, index_t c, index_t begin, index_t cols) const {
    run_logit_rows(LogitBlock<T>{x.row(r0) + begin, x.row_stride(), &ws(r0, c), index_t(ws.stride_0()), rows, cols});
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
                          const RowPlan& plan, index_t col0, const std::string& label) {
  const index_t items =
      plan.chunks == 1 ? (plan.rows + plan.rows_per_item - 1) / plan.rows_per_item : plan.rows * plan.chunks;
  Kokkos::parallel_for(label, Kokkos::TeamPolicy<ExecSpace>(exec, int(items), 1, 1),
                       HostLogitStatsKernel<ExecSpace, XRows, Targets, Workspace>{x, targets, ws, plan, col0});
}

}  // namespace kflash::impl::host
