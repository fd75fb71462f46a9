// The host schedule of cross-entropy's statistics phase on contiguous rows: a team of one thread per
// work item (several whole rows, or one chunk of a split row), handing each to the compiled host
// kernel row_logit_stats.
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/cross_entropy.hpp>

#include <string>

namespace kflash::impl::host {

template <class ExecSpace, class XRows, class Targets, class Workspace>
struct HostLogitStatsKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  XRows x;
  Targets targets;
  Workspace ws;
  RowPlan plan;
  index_t col0;

  void stats(index_t r, index_t c, index_t begin, index_t end) const {
    auto s = row_logit_stats(x.row(r) + begin, end - begin);
    s.target_logit = target_logit_in(x, targets, r, col0, begin, end);
    ws(r, c) = s;
  }

  /// Whole rows (plan.rows_per_item at a time) or one chunk of a row.
  void operator()(const member_type& team) const {
    const index_t item = team.league_rank();
    if (plan.chunks == 1) {
      const index_t r0 = item * plan.rows_per_item;
      const index_t r1 = r0 + plan.rows_per_item < plan.rows ? r0 + plan.rows_per_item : plan.rows;
      for (index_t r = r0; r < r1; ++r) stats(r, 0, 0, plan.cols);
      return;
    }
    const RowChunk rc(plan, item);
    stats(rc.r, rc.c, rc.begin, rc.end);
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
