// Picks the schedule of the row operations' gradients: the portable team-per-row schedule
// (schedule/row_backward.hpp) on every space and layout.
#pragma once

#include <kflash/impl/schedule/row_backward.hpp>

namespace kflash::impl {

inline const char* row_grad_label(RowGrad op) {
  switch (op) {
    case RowGrad::softmax: return "kflash::softmax_backward";
    case RowGrad::log_softmax: return "kflash::log_softmax_backward";
    default: return "kflash::logsumexp_backward";
  }
}

template <RowGrad Op, class ExecSpace, class ARows, class BRows, class DXRows, class Lse, class DLse>
void dispatch_row_backward(const ExecSpace& exec, const ARows& a, const BRows& b, const DXRows& dx, const Lse& lse,
                           const DLse& dlse) {
  run_row_backward<Op>(exec, a, b, dx, lse, dlse, row_grad_label(Op));
}

}  // namespace kflash::impl
