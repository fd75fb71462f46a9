// Picks the schedule of a row operation for an execution space and a layout: contiguous rows on a
// space whose traits have host kernels go to the host schedule (host/host_rows.hpp); otherwise the
// device row schedules (schedule/team_rows.hpp) where a tier holds the rows, else the portable row
// kernel (schedule/row_kernel.hpp).
#pragma once

#include <kflash/impl/host/host_rows.hpp>
#include <kflash/impl/schedule/row_kernel.hpp>
#include <kflash/impl/schedule/streams.hpp>
#include <kflash/impl/schedule/team_rows.hpp>

#include <string>

namespace kflash::impl {

inline const char* row_op_name(RowOp op) {
  switch (op) {
    case RowOp::softmax: return "softmax";
    case RowOp::log_softmax: return "log_softmax";
    default: return "logsumexp";
  }
}

/// 16-bit rows (stored as kflash::bhalf_t or half_t, computed in float) take the host kernels where
/// the space has them, else the portable row kernel (the device team schedules read 16-byte chunks
/// of float or double only).
template <RowOp Op, class ExecSpace, class XRows, class YRows>
void dispatch_rows(const ExecSpace& exec, const XRows& x, const YRows& y) {
  using S = std::remove_cv_t<typename decltype(x.v)::value_type>;
  using T = arith_t<S>;
  using YS = typename decltype(y.v)::non_const_value_type;
  using Traits = ScheduleTraits<ExecSpace>;
  RowPlan plan = plan_rows<T, Traits>(exec, x.rows(), x.cols());
  if (plan.rows == 0) return;
  if (x.cols() == 0) {  // nothing to read (x may lie in no memory); an empty row's logsumexp is -inf
    if constexpr (Op == RowOp::logsumexp) Kokkos::deep_copy(exec, y.v, store_as<YS>(-infinity<T>()));
    return;
  }
  const std::string label = std::string("kflash::") + row_op_name(Op);
  if constexpr (Traits::host_kernels) {
    bool contiguous = x.unit_stride();
    if constexpr (Op != RowOp::logsumexp) contiguous = contiguous && y.unit_stride();
    if (contiguous) {
      host::run_host_rows<Op>(exec, x, y, plan, label);
      return;
    }
    plan.rows_per_item = 1;  // the portable kernel takes one row (or chunk) per team
  } else if constexpr (!is_half_type<S>) {
    if (run_team_rows<Op, Traits, Traits::template team_regs<T>>(exec, x, y, plan, label)) return;
  }
  run_row_kernel<Op, Traits>(exec, x, y, plan, label);
}

}  // namespace kflash::impl

namespace kflash::impl {

/// Runs one phase of a row operation on plan `plan` through the schedule for the space: the host
/// kernels for contiguous rows where the traits have them, the portable row kernel otherwise.
/// Streams use the partial phase (each chunk's state into ws(r, c)) and the write phase (outputs
/// from the finished states ws(r, 0)).
template <RowOp Op, class ExecSpace, class XRows, class YRows, class Workspace>
void run_row_phase(const ExecSpace& exec, const XRows& x, const YRows& y, const Workspace& ws, const RowPlan& plan,
                   RowPhase phase, const std::string& label) {
  using T = std::remove_cv_t<typename decltype(x.v)::value_type>;
  using Traits = ScheduleTraits<ExecSpace>;
  if (plan.rows == 0) return;
  const index_t per_row = phase == RowPhase::write && Op == RowOp::logsumexp ? 1 : plan.chunks;
  if constexpr (Traits::host_kernels) {
    bool contiguous = x.unit_stride();
    if constexpr (Op != RowOp::logsumexp) contiguous = contiguous && (phase == RowPhase::partial || y.unit_stride());
    if (contiguous) {
      using Kernel = host::HostRowKernel<ExecSpace, XRows, YRows, Workspace, Op>;
      Kokkos::parallel_for(label, Kokkos::TeamPolicy<ExecSpace>(exec, int(plan.rows * per_row), 1, 1),
                           Kernel{x, y, ws, host::plan_host_rows<T>(Op, plan), phase, per_row});
      return;
    }
  }
  using Kernel = RowKernel<ExecSpace, Traits, XRows, YRows, Workspace, Op>;
  Kokkos::parallel_for(label,
                       Kokkos::TeamPolicy<ExecSpace>(exec, int(plan.rows * per_row), Traits::row_team_size,
                                                     Traits::vector_length),
                       Kernel{x, y, ws, plan, phase, per_row});
}

/// states(r) absorbs the state of every column of row r of x (Rows), through the partial phase and
/// a merge of its chunks' states (the streams' update, a rank's shard of a sharded row). Returns
/// after the kernels complete (they use a cached workspace).
template <class ExecSpace, class XRows, class States>
void absorb_row_states(const ExecSpace& exec, const XRows& x, const States& states, const std::string& label) {
  using T = arith_t<typename decltype(x.v)::value_type>;
  using memory_space = typename ExecSpace::memory_space;
  using Workspace = Kokkos::View<SoftmaxState<T>**, Kokkos::LayoutRight, memory_space, Kokkos::MemoryUnmanaged>;
  const RowPlan plan = plan_rows<T, ScheduleTraits<ExecSpace>>(exec, x.rows(), x.cols());
  if (plan.rows == 0 || plan.cols == 0) return;
  const CachedWorkspace<memory_space> scratch(exec, sizeof(SoftmaxState<T>) * std::size_t(plan.rows * plan.chunks),
                                              label + " workspace");
  const Workspace ws(scratch.template at<SoftmaxState<T>>(0), plan.rows, plan.chunks);
  run_row_phase<RowOp::logsumexp>(exec, x, x, ws, plan, RowPhase::partial, label);
  Kokkos::parallel_for(label + " absorb", Kokkos::RangePolicy<ExecSpace>(exec, 0, plan.rows),
                       AbsorbRowStates<States, Workspace>{states, ws, plan.chunks});
  exec.fence();  // the workspace must outlive the kernels
}

/// Op's write phase: out from x (Rows) and each row's finished state states(r), on plan.
template <RowOp Op, class ExecSpace, class XRows, class OutRows, class States>
void write_from_states(const ExecSpace& exec, const XRows& x, const OutRows& out, const States& states,
                       const RowPlan& plan, const std::string& label) {
  using State = typename States::value_type;
  using Workspace = Kokkos::View<State**, Kokkos::LayoutRight, typename States::memory_space, Kokkos::MemoryUnmanaged>;
  const Workspace ws(states.data(), states.extent(0), 1);
  run_row_phase<Op>(exec, x, out, ws, plan, RowPhase::write, label);
}

}  // namespace kflash::impl
