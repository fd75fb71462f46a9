// The host schedule of the row operations on contiguous rows: a team of one thread per work item
// (several whole rows, or one chunk of a split row), handing the rows to the compiled host kernels.
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/row_kernel.hpp>

#include <string>

namespace kflash::impl::host {

/// The alignment of softmax's weights in team scratch, a cache line: Kokkos aligns level-1 scratch
/// to 8 or 16 bytes only, and the weight passes load and store whole vectors.
inline constexpr std::size_t weights_alignment = 64;

/// A row plan with the host kernels' decisions for it: non-temporal stores, and where softmax keeps
/// its weights (with the bytes of team scratch that takes). 16-bit rows: weights_bytes is the team
/// scratch of softmax's float weights (RowBlock16::buffer) for whole rows longer than
/// HostTraits::short_row.
struct HostRowPlan {
  RowPlan rows;
  bool stream = false;
  WeightsAt weights_at = WeightsAt::recomputed;
  std::size_t weights_bytes = 0;
};

template <class T>
HostRowPlan plan_host_rows(RowOp op, const RowPlan& rows) {
  HostRowPlan p;
  p.rows = rows;
  const index_t bytes = rows.cols * index_t(sizeof(T));
  p.stream = rows.rows * bytes >= HostTraits::stream_bytes;
  if constexpr (is_half_type<T>) {
    const index_t floats = weights_elements(rows.cols) * index_t(sizeof(float));
    if (op == RowOp::softmax && rows.chunks == 1 && rows.cols > HostTraits::short_row &&
        floats <= HostTraits::buffered_weights_bytes)
      p.weights_bytes = std::size_t(floats);
    return p;
  }
  if (op != RowOp::softmax) return p;
  if (rows.cols <= HostTraits::tile || (!p.stream && bytes <= HostTraits::stored_weights_bytes)) {
    p.weights_at = WeightsAt::output;
  } else if (rows.chunks == 1 &&
             weights_elements(rows.cols) * index_t(sizeof(T)) <= HostTraits::buffered_weights_bytes) {
    p.weights_at = WeightsAt::scratch;
    p.weights_bytes = std::size_t(weights_elements(rows.cols)) * sizeof(T);
  }
  return p;
}

/// 16-bit rows (S a 16-bit type, T float): whole rows through run_rows16, the chunks of split rows
/// through row_state's and write_row's 16-bit overloads; logsumexp's output is float or S.
template <class ExecSpace, class XRows, class YRows, class Workspace, RowOp Op>
struct HostRowKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = std::remove_cv_t<typename Workspace::value_type::value_type>;
  using S = std::remove_cv_t<typename decltype(XRows::v)::value_type>;
  using YS = typename decltype(YRows::v)::non_const_value_type;

  XRows x;
  YRows y;
  Workspace ws;
  HostRowPlan plan;
  RowPhase phase;
  index_t items_per_row;

  /// In the whole phase an item is plan.rows.rows_per_item rows; otherwise one chunk of a row.
  void operator()(const member_type& team) const {
    const RowPlan& p = plan.rows;
    const index_t item = team.league_rank();
    if (phase == RowPhase::whole) {
      const index_t r0 = item * p.rows_per_item;
      const index_t r1 = r0 + p.rows_per_item < p.rows ? r0 + p.rows_per_item : p.rows;
      if (r0 >= r1) return;
      if constexpr (is_half_type<S>) {
        run_rows16(block16_of(team, r0, r1));
      } else {
        run_rows(block_of(team, r0, r1));
      }
      return;
    }
    const index_t r = item / items_per_row, c = item % items_per_row;
    const index_t begin = c * p.chunk_len;
    const index_t n = (begin + p.chunk_len < p.cols ? begin + p.chunk_len : p.cols) - begin;
    const S* xr = x.row(r) + begin;
    if (phase == RowPhase::partial) {
      ws(r, c) = row_state(xr, n);
      return;
    }
    SoftmaxState<T> s = SoftmaxState<T>::identity();
    if (phase == RowPhase::write) s = ws(r, 0);
    else for (index_t j = 0; j < p.chunks; ++j) s.merge(ws(r, j));
    finish(r, xr, n, s, begin);
  }

  /// Rows [r0, r1) for run_rows.
  RowBlock<T> block_of(const member_type& team, index_t r0, index_t r1) const {
    RowBlock<T> block{Op, x.row(r0), x.row_stride(), nullptr, 0, nullptr, 0, r1 - r0, plan.rows.cols, plan.stream,
                      plan.weights_at};
    if (plan.weights_at == WeightsAt::scratch)
      block.weights = static_cast<T*>(team.team_scratch(1).get_shmem_aligned(plan.weights_bytes, weights_alignment));
    if constexpr (Op == RowOp::logsumexp) {
      block.out = y.row(r0);
      block.ldout = y.row_stride();
    } else {
      block.y = y.row(r0);
      block.ldy = y.row_stride();
    }
    return block;
  }

  /// 16-bit rows [r0, r1) for run_rows16.
  RowBlock16 block16_of(const member_type& team, index_t r0, index_t r1) const {
    RowBlock16 block{storage16_of<S>, Op, reinterpret_cast<const std::uint16_t*>(x.row(r0)), x.row_stride(),
                     nullptr, 0, nullptr, nullptr, 0, r1 - r0, plan.rows.cols};
    block.stream = plan.stream;
    if (plan.weights_bytes > 0) {
      block.buffer =
          static_cast<float*>(team.team_scratch(1).get_shmem_aligned(plan.weights_bytes, weights_alignment));
      block.buffer_elements = index_t(plan.weights_bytes / sizeof(float));
    }
    if constexpr (Op == RowOp::logsumexp) {
      if constexpr (is_half_type<YS>) block.out16 = reinterpret_cast<std::uint16_t*>(y.row(r0));
      else block.out = y.row(r0);
      block.ldout = y.row_stride();
    } else {
      block.y = reinterpret_cast<std::uint16_t*>(y.row(r0));
      block.ldy = y.row_stride();
    }
    return block;
  }

  /// Row r's outputs from its state s: logsumexp's value, or the n outputs from column `begin` of
  /// the elements xr.
  void finish(index_t r, const S* xr, index_t n, const SoftmaxState<T>& s, index_t begin) const {
    if constexpr (Op == RowOp::logsumexp) {
      y(r, 0) = store_as<YS>(s.logsumexp());
    } else {
      const SoftmaxNormalizer<T> norm(s, Op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
      write_row(Op, xr, y.row(r) + begin, n, norm, plan.stream);
    }
  }
};

/// Runs contiguous rows on a host space through the host kernels.
template <RowOp Op, class ExecSpace, class XRows, class YRows>
void run_host_rows(const ExecSpace& exec, const XRows& x, const YRows& y, const RowPlan& rows,
                   const std::string& label) {
  using S = std::remove_cv_t<typename decltype(x.v)::value_type>;
  using T = arith_t<S>;
  using Workspace = Kokkos::View<SoftmaxState<T>**, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  using Kernel = HostRowKernel<ExecSpace, XRows, YRows, Workspace, Op>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  const HostRowPlan plan = plan_host_rows<S>(Op, rows);
  if (rows.chunks == 1) {
    Policy policy(exec, int((rows.rows + rows.rows_per_item - 1) / rows.rows_per_item), 1, 1);
    if (plan.weights_bytes > 0)
      policy.set_scratch_size(1, Kokkos::PerTeam(plan.weights_bytes + weights_alignment));
    Kokkos::parallel_for(label, policy, Kernel{x, y, Workspace(), plan, RowPhase::whole, 1});
    return;
  }
  run_split_rows<Op, T, Kokkos::HostSpace>(
      exec, rows, label, [&](const std::string& name, RowPhase phase, index_t items, index_t per_row, Workspace ws) {
        Kokkos::parallel_for(name, Policy(exec, int(items), 1, 1), Kernel{x, y, ws, plan, phase, per_row});
      });
}

}  // namespace kflash::impl::host
