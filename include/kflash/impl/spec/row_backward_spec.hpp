// Picks the schedule of the row operations' gradients: on spaces whose traits have host kernels,
// contiguous rows take the host schedule (host/host_row_backward.hpp); everything else the
// portable team-per-row schedule (schedule/row_backward.hpp).
#pragma once

#include <kflash/impl/host/host_row_backward.hpp>
#include <kflash/impl/schedule/row_backward.hpp>

#include <string>

namespace kflash::impl {

/// The public name of gradient op: error messages and kernel labels ("kflash::" + name).
inline const char* row_grad_name(RowGrad op) {
  switch (op) {
    case RowGrad::softmax: return "softmax_backward";
    case RowGrad::log_softmax: return "log_softmax_backward";
    default: return "logsumexp_backward";
  }
}

template <RowGrad Op, class ExecSpace, class ARows, class BRows, class DXRows, class Lse, class DLse>
void dispatch_row_backward(const ExecSpace& exec, const ARows& a, const BRows& b, const DXRows& dx, const Lse& lse,
                           const DLse& dlse) {
  const std::string label = std::string("kflash::") + row_grad_name(Op);
  if constexpr (ScheduleTraits<ExecSpace>::host_kernels && Op == RowGrad::logsumexp) {
    if (a.rows() > 0 && a.cols() > 0 && a.unit_stride() && dx.unit_stride()) {
      host::run_host_lse_backward(exec, a, dx, lse, dlse, label.c_str());
      return;
    }
  } else if constexpr (ScheduleTraits<ExecSpace>::host_kernels) {
    if (a.rows() > 0 && a.cols() > 0 && a.unit_stride() && b.unit_stride() && dx.unit_stride()) {
      host::run_host_row_backward<Op>(exec, a, b, dx, label.c_str());
      return;
    }
  }
  run_row_backward<Op>(exec, a, b, dx, lse, dlse, label.c_str());
}

}  // namespace kflash::impl
