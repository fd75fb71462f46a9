// Picks the schedule of a row operation for an execution space and a layout: contiguous rows on a
// space whose traits have host kernels go to the host schedule (host/host_rows.hpp); otherwise the
// device row schedules (schedule/team_rows.hpp) where a tier holds the rows, else the portable row
// kernel (schedule/row_kernel.hpp).
#pragma once

#include <kflash/impl/host/host_rows.hpp>
#include <kflash/impl/schedule/row_kernel.hpp>
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

template <RowOp Op, class ExecSpace, class XRows, class YRows>
void dispatch_rows(const ExecSpace& exec, const XRows& x, const YRows& y) {
  using T = std::remove_cv_t<typename decltype(x.v)::value_type>;
  using Traits = ScheduleTraits<ExecSpace>;
  RowPlan plan = plan_rows<T, Traits>(exec, x.rows(), x.cols());
  if (plan.rows == 0) return;
  const std::string label = std::string("kflash::") + row_op_name(Op);
  if constexpr (Traits::host_kernels) {
    bool contiguous = x.unit_stride();
    if constexpr (Op != RowOp::logsumexp) contiguous = contiguous && y.unit_stride();
    if (contiguous) {
      host::run_host_rows<Op>(exec, x, y, plan, label);
      return;
    }
    plan.rows_per_item = 1;  // the portable kernel takes one row (or chunk) per team
  } else {
    if (run_team_rows<Op, Traits, Traits::template team_regs<T>>(exec, x, y, plan, label)) return;
  }
  run_row_kernel<Op, Traits>(exec, x, y, plan, label);
}

}  // namespace kflash::impl
