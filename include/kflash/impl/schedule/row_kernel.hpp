// The portable row schedule, for rows of any layout on any space: a team per row (or chunk of a
// row), tiles over the team's threads, each tile over the lanes Traits::tile_lanes names; the
// tiles' states merge by the team reduction. Split rows: the chunks' states go to a workspace, then
// each chunk merges its row's states and writes its outputs.
#pragma once

#include <kflash/impl/schedule/rows.hpp>
#include <kflash/impl/workspace.hpp>

#include <string>

namespace kflash::impl {

/// The phases a row kernel runs in:
///  whole:   reduce a whole row to its state, then write the row's outputs;
///  partial: reduce one chunk of a row to a state in the workspace;
///  finish:  merge a row's chunk states, then write one chunk's outputs;
///  write:   write one chunk's outputs from its row's finished state ws(r, 0) (streams).
enum class RowPhase { whole, partial, finish, write };

template <class ExecSpace, class Traits, class XRows, class YRows, class Workspace, RowOp Op>
struct RowKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = std::remove_cv_t<typename Workspace::value_type::value_type>;
  using state_type = SoftmaxState<T>;
  using reducer_type = OnlineSoftmax<T, Kokkos::AnonymousSpace>;
  using Lanes = typename Traits::template tile_lanes<T, member_type>;

  using YS = typename decltype(YRows::v)::non_const_value_type;  // y's stored type (16-bit: T rounded)

  XRows x;
  YRows y;  // for logsumexp: the output rows (rank 0 or 1 View seen as y(r, 0))
  Workspace ws;
  RowPlan plan;
  RowPhase phase;
  index_t items_per_row;  // work items (teams) per row in this phase: 1 or plan.chunks

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const index_t item = team.league_rank();
    const index_t r = item / items_per_row;
    const index_t c = item % items_per_row;
    const index_t begin = c * plan.chunk_len;
    const index_t end = begin + plan.chunk_len < plan.cols ? begin + plan.chunk_len : plan.cols;

    state_type s = state_type::identity();
    if (phase == RowPhase::write) {
      s = ws(r, 0);
    } else if (phase == RowPhase::finish) {
      // The same merge as every other tier, over the row's chunk states.
      Kokkos::parallel_reduce(
          Kokkos::TeamVectorRange(team, plan.chunks),
          [&](index_t j, state_type& acc) { acc.merge(ws(r, j)); }, reducer_type(s));
    } else {
      constexpr index_t tile = Traits::tile;
      const Lanes lanes(team);
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, (end - begin + tile - 1) / tile),
          [&](index_t t, state_type& acc) {
            const index_t tb = begin + t * tile;
            const index_t te = tb + tile < end ? tb + tile : end;
            acc.merge(lanes.tile_state(tb, te, [&](index_t i) { return widen(x(r, i)); }, NoStore<T>{}));
          },
          reducer_type(s));
    }

    if (phase == RowPhase::partial) {
      Kokkos::single(Kokkos::PerTeam(team), [&]() { ws(r, c) = s; });
    } else if constexpr (Op == RowOp::logsumexp) {
      Kokkos::single(Kokkos::PerTeam(team), [&]() { y(r, 0) = store_as<YS>(s.logsumexp()); });
    } else {
      const SoftmaxNormalizer<T> n(s, Op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, begin, end), [&](index_t i) {
        if constexpr (Op == RowOp::softmax) {
          y(r, i) = store_as<YS>(n.prob(widen(x(r, i))));
        } else {
          y(r, i) = store_as<YS>(n.log_prob(widen(x(r, i))));
        }
      });
    }
  }
};

/// Runs rows split into chunks (plan.chunks > 1): each chunk's state into a workspace of rows x
/// chunks states (partial), then each chunk merges its row's states and writes its outputs
/// (finish; logsumexp writes one value per row, so its finish has one item per row).
/// launch(label, phase, items, items_per_row, ws) runs one phase.
template <RowOp Op, class T, class MemorySpace, class ExecSpace, class Launch>
void run_split_rows(const ExecSpace& exec, const RowPlan& plan, const std::string& label, const Launch& launch) {
  using Workspace = Kokkos::View<SoftmaxState<T>**, MemorySpace, Kokkos::MemoryUnmanaged>;
  const CachedWorkspace<MemorySpace> scratch(
      exec, sizeof(SoftmaxState<T>) * std::size_t(plan.rows * plan.chunks), label + " workspace");
  const Workspace ws(scratch.template at<SoftmaxState<T>>(0), plan.rows, plan.chunks);
  launch(label + " partial", RowPhase::partial, plan.rows * plan.chunks, plan.chunks, ws);
  const index_t finish_per_row = Op == RowOp::logsumexp ? 1 : plan.chunks;
  launch(label + " finish", RowPhase::finish, plan.rows * finish_per_row, finish_per_row, ws);
  exec.fence();  // the workspace must outlive the kernels
}

/// Runs rows through RowKernel on plan p.
template <RowOp Op, class Traits, class ExecSpace, class XRows, class YRows>
void run_row_kernel(const ExecSpace& exec, const XRows& x, const YRows& y, const RowPlan& plan,
                    const std::string& label) {
  using T = arith_t<typename decltype(x.v)::value_type>;
  using memory_space = typename ExecSpace::memory_space;
  using Workspace = Kokkos::View<SoftmaxState<T>**, memory_space, Kokkos::MemoryUnmanaged>;
  using Kernel = RowKernel<ExecSpace, Traits, XRows, YRows, Workspace, Op>;
  auto policy = [&](index_t league) {
    return Kokkos::TeamPolicy<ExecSpace>(exec, int(league), Traits::row_team_size, Traits::vector_length);
  };
  if (plan.chunks == 1) {
    Kokkos::parallel_for(label, policy(plan.rows), Kernel{x, y, Workspace(), plan, RowPhase::whole, 1});
    return;
  }
  run_split_rows<Op, T, memory_space>(
      exec, plan, label, [&](const std::string& name, RowPhase phase, index_t items, index_t per_row, Workspace ws) {
        Kokkos::parallel_for(name, policy(items), Kernel{x, y, ws, plan, phase, per_row});
      });
}

}  // namespace kflash::impl
