// The portable cross-entropy schedule, for rows of any layout on any space: each row, or each chunk
// of a row as plan_rows cuts it, reduced to its LogitStats in a workspace of rows x chunks (a team
// per item, tiles over its threads, each tile over the lanes Traits::tile_lanes names); then one
// reduction over the rows merges each row's chunks, writes its loss and totals the losses.
#pragma once

#include <kflash/impl/schedule/rows.hpp>
#include <kflash/impl/tile/logit_stats.hpp>

#include <cstdint>

namespace kflash::impl {

/// The totals of a call over its rows: the losses' sum and count (rows not ignored), and the first
/// row whose target is outside the vocabulary (rows if none) with that target.
struct LossTotal {
  double sum;
  index_t counted;
  index_t bad_row;
  std::int64_t bad_target;

  KOKKOS_INLINE_FUNCTION static constexpr LossTotal identity() {
    return LossTotal{0.0, 0, index_t(0x7fffffffffffffffLL), 0};  // no bad row (the largest index_t)
  }
  KOKKOS_INLINE_FUNCTION void merge(const LossTotal& o) {
    sum += o.sum;
    counted += o.counted;
    if (o.bad_row < bad_row) {
      bad_row = o.bad_row;
      bad_target = o.bad_target;
    }
  }
};

/// One work item of the statistics phase: row r (item / chunks) from `begin` to `end` (chunk
/// item % chunks).
struct RowChunk {
  index_t r, c, begin, end;
  KOKKOS_INLINE_FUNCTION RowChunk(const RowPlan& p, index_t item) : r(item / p.chunks), c(item % p.chunks) {
    begin = c * p.chunk_len;
    end = begin + p.chunk_len < p.cols ? begin + p.chunk_len : p.cols;
  }
};

/// The statistics phase on the portable schedule: ws(r, c) = LogitStats of chunk c of row r.
template <class ExecSpace, class Traits, class XRows, class Targets, class Workspace>
struct LogitStatsKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using stats_type = typename Workspace::value_type;
  using T = typename stats_type::value_type;
  using Lanes = typename Traits::template tile_lanes<T, member_type>;

  XRows x;
  Targets targets;
  Workspace ws;
  RowPlan plan;
  index_t col0;     // the vocabulary's column of x's first column
  bool sum_logits;  // LogitStats::total taken (label smoothing needs it), else left 0

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const RowChunk rc(plan, team.league_rank());
    constexpr index_t tile = Traits::tile;
    const Lanes lanes(team);
    const auto value = [&](index_t i) { return widen(x(rc.r, i)); };
    stats_type s;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, (rc.end - rc.begin + tile - 1) / tile),
        [&](index_t t, stats_type& acc) {
          const index_t tb = rc.begin + t * tile;
          const index_t te = tb + tile < rc.end ? tb + tile : rc.end;
          acc.state.merge(lanes.tile_state(tb, te, value, NoStore<T>{}));
          if (sum_logits) acc.add_logits(lanes.tile_sum(tb, te, value));
        },
        MergeOf<stats_type>(s));
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      s.target_logit = target_logit_in(x, targets, rc.r, col0, rc.begin, rc.end);
      ws(rc.r, rc.c) = s;
    });
  }
};

template <class Traits, class ExecSpace, class XRows, class Targets, class Workspace>
void run_logit_stats_kernel(const ExecSpace& exec, const XRows& x, const Targets& targets, const Workspace& ws,
                            const RowPlan& plan, index_t col0, bool sum_logits, const std::string& label) {
  using Kernel = LogitStatsKernel<ExecSpace, Traits, XRows, Targets, Workspace>;
  Kokkos::parallel_for(
      label, Kokkos::TeamPolicy<ExecSpace>(exec, int(plan.rows * plan.chunks), Traits::row_team_size, Traits::vector_length),
      Kernel{x, targets, ws, plan, col0, sum_logits});
}

/// The loss phase: for each row, its chunks' statistics merged, its loss written (0 for ignored
/// rows, NaN for a target outside [0, cols)), and the totals.
template <class Workspace, class Targets, class LossView>
struct CrossEntropyLoss {
  using T = typename LossView::value_type;

  Workspace ws;
  Targets targets;
  LossView loss;
  index_t chunks;
  index_t cols;  // the vocabulary's size
  std::int64_t ignore_index;
  LossTerms terms;

  KOKKOS_INLINE_FUNCTION void operator()(index_t r, LossTotal& total) const {
    const std::int64_t t = std::int64_t(targets(r));
    if (t == ignore_index) {
      loss(r) = T(0);
      return;
    }
    if (t < 0 || t >= cols) {
      loss(r) = quiet_nan<T>();
      if (r < total.bad_row) {
        total.bad_row = r;
        total.bad_target = t;
      }
      return;
    }
    auto s = ws(r, 0);
    for (index_t j = 1; j < chunks; ++j) s.merge(ws(r, j));
    const double v = cross_entropy_loss(s, cols, terms);
    loss(r) = T(v);
    total.sum += v;
    total.counted += 1;
  }
};

template <class ExecSpace, class Workspace, class Targets, class LossView>
LossTotal run_cross_entropy_loss(const ExecSpace& exec, const Workspace& ws, const Targets& targets,
                                 const LossView& loss, index_t cols, std::int64_t ignore_index,
                                 const LossTerms& terms, const std::string& label) {
  LossTotal total = LossTotal::identity();
  Kokkos::parallel_reduce(label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(exec, 0, ws.extent(0)),
                          CrossEntropyLoss<Workspace, Targets, LossView>{ws, targets, loss, index_t(ws.extent(1)),
                                                                         cols, ignore_index, terms},
                          MergeOf<LossTotal, Kokkos::HostSpace>(total));
  return total;
}

/// Finds the first row whose target is outside [0, cols) and is not ignore_index (the gradient
/// checks its targets before it writes anything).
template <class Targets>
struct TargetCheck {
  Targets targets;
  index_t cols;
  std::int64_t ignore_index;

  KOKKOS_INLINE_FUNCTION void operator()(index_t r, LossTotal& total) const {
    const std::int64_t t = std::int64_t(targets(r));
    if (t != ignore_index && (t < 0 || t >= cols) && r < total.bad_row) {
      total.bad_row = r;
      total.bad_target = t;
    }
  }
};

template <class ExecSpace, class Targets>
LossTotal check_targets(const ExecSpace& exec, const Targets& targets, index_t cols, std::int64_t ignore_index,
                        const std::string& label) {
  LossTotal total = LossTotal::identity();
  Kokkos::parallel_reduce(label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(exec, 0, targets.extent(0)),
                          TargetCheck<Targets>{targets, cols, ignore_index}, MergeOf<LossTotal, Kokkos::HostSpace>(total));
  return total;
}

/// Row r's lse from the statistics phase: its chunks' states merged.
template <class Workspace>
struct LseOfStats {
  Workspace ws;
  KOKKOS_INLINE_FUNCTION auto operator()(index_t r) const {
    auto s = ws(r, 0).state;
    for (index_t j = 1; j < index_t(ws.extent(1)); ++j) s.merge(ws(r, j).state);
    return s.logsumexp();
  }
};

/// Row r's lse as the caller gave it (a rank-1 View).
template <class View>
struct LseGiven {
  View v;
  KOKKOS_INLINE_FUNCTION auto operator()(index_t r) const { return v(r); }
};

/// The gradient phase: dx(r, c) = CrossEntropyGrad of x(r, c) for each row or chunk of a row (a team
/// per item), 0 in ignored rows. dx may be x's View: each element is read before it is written, by
/// the same thread.
template <class ExecSpace, class XRows, class Targets, class DLoss, class RowLse, class DXRows>
struct CrossEntropyGradKernel {
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

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const RowChunk rc(plan, team.league_rank());
    const std::int64_t t = std::int64_t(targets(rc.r));
    if (t == ignore_index) {
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rc.begin, rc.end),
                           [&](index_t c) { dx(rc.r, c) = store_as<S>(T(0)); });
      return;
    }
    const CrossEntropyGrad<T> grad(T(widen(lse(rc.r))), T(widen(dloss(rc.r))), plan.cols, terms);
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rc.begin, rc.end),
                         [&](index_t c) { dx(rc.r, c) = store_as<S>(grad(widen(x(rc.r, c)), c == t)); });
  }
};

template <class Traits, class ExecSpace, class XRows, class Targets, class DLoss, class RowLse, class DXRows>
void run_cross_entropy_grad(const ExecSpace& exec, const XRows& x, const Targets& targets, const DLoss& dloss,
                            const RowLse& lse, const DXRows& dx, const RowPlan& plan, std::int64_t ignore_index,
                            const LossTerms& terms, const std::string& label) {
  using Kernel = CrossEntropyGradKernel<ExecSpace, XRows, Targets, DLoss, RowLse, DXRows>;
  Kokkos::parallel_for(
      label, Kokkos::TeamPolicy<ExecSpace>(exec, int(plan.rows * plan.chunks), Traits::row_team_size, Traits::vector_length),
      Kernel{x, targets, dloss, lse, dx, plan, ignore_index, terms});
}

}  // namespace kflash::impl
