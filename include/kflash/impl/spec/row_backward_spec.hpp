// Picks the schedule of the row operations' gradients: the portable team-per-row schedule
// (schedule/row_backward.hpp) on every space and layout.
#pragma once

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
  run_row_backward<Op>(exec, a, b, dx, lse, dlse, label.c_str());
}

}  // namespace kflash::impl
