// The gradients of softmax, log_softmax and logsumexp (GUIDE §8): softmax_backward,
// log_softmax_backward and logsumexp_backward over rank-1 and rank-2 Views.
#pragma once

#include <kflash/impl/errors.hpp>
#include <kflash/impl/spec/row_backward_spec.hpp>

#include <type_traits>

namespace kflash {
namespace impl {

/// softmax_backward and log_softmax_backward: dx from the forward's output y and the upstream dy.
template <RowGrad Op, class ExecSpace, class YView, class DYView, class DXView>
void softmax_rows_backward(const ExecSpace& exec, const YView& y, const DYView& dy, const DXView& dx) {
  static_check_view<ExecSpace, YView, false, true>();
  static_check_view<ExecSpace, DYView, false, true>();
  static_check_view<ExecSpace, DXView, true, true>();
  static_check_same_type<YView, DYView>();
  static_check_same_type<YView, DXView>();
  const char* fn = row_grad_name(Op);
  const CallScope<ExecSpace> call(fn);
  require_rank(fn, "y", y, 1, 2);
  require_same_shape(fn, "y", y, "dy", dy);
  require_same_shape(fn, "y", y, "dx", dx);
  require_disjoint(fn, "dx", dx, "y", y);
  require_same_or_disjoint(fn, "dy", dy, "dx", dx);
  constexpr int r = view_rank<YView>;
  if constexpr (r >= 1 && r <= 2 && view_rank<DYView> == r && view_rank<DXView> == r) {
    dispatch_row_backward<Op>(exec, Rows<YView>{y}, Rows<DYView>{dy}, Rows<DXView>{dx}, NoRowScalars{},
                              NoRowScalars{});
  }
}

}  // namespace impl

/// The gradient of y = softmax(x): dx_i = y_i (dy_i − Σ_j dy_j y_j), from y as softmax() wrote it
/// and the upstream gradient dy. Rank 1 (one row) or 2 (rows over the last extent), any layout; dx
/// may be dy's View (in place), and must not overlap y. y, dy and dx have one value type: float,
/// double, or 16-bit storage (kflash::bhalf_t, kflash::half_t: computed in float, each element of
/// dx rounded once). Asynchronous like softmax().
template <class ExecSpace, class YView, class DYView, class DXView>
void softmax_backward(const ExecSpace& exec, const YView& y, const DYView& dy, const DXView& dx) {
  impl::softmax_rows_backward<impl::RowGrad::softmax>(exec, y, dy, dx);
}

/// The gradient of y = log_softmax(x): dx_i = dy_i − exp(y_i) Σ_j dy_j, with the rules of
/// softmax_backward().
template <class ExecSpace, class YView, class DYView, class DXView>
void log_softmax_backward(const ExecSpace& exec, const YView& y, const DYView& dy, const DXView& dx) {
  impl::softmax_rows_backward<impl::RowGrad::log_softmax>(exec, y, dy, dx);
}

/// The gradient of lse = logsumexp(x): dx_i = dlse · exp(x_i − lse), from x, lse as logsumexp()
/// wrote it and the upstream dlse (lse's shape: rank 0 for rank-1 x, one value per row for rank-2
/// x). A row whose x and lse are -inf gets 0. dx has x's shape and value type and may be x's View
/// (in place). lse and dlse have x's value type, or float where x holds 16-bit values.
template <class ExecSpace, class XView, class LseView, class DLseView, class DXView>
void logsumexp_backward(const ExecSpace& exec, const XView& x, const LseView& lse, const DLseView& dlse,
                        const DXView& dx) {
  using namespace impl;
  static_check_view<ExecSpace, XView, false, true>();
  static_check_view<ExecSpace, LseView, false, true>();
  static_check_view<ExecSpace, DLseView, false, true>();
  static_check_view<ExecSpace, DXView, true, true>();
  static_check_same_type<XView, DXView>();
  static_check_row_scalars<XView, LseView>();
  static_check_row_scalars<XView, DLseView>();
  constexpr int xr = view_rank<XView>;
  const char* fn = row_grad_name(RowGrad::logsumexp);
  const CallScope<ExecSpace> call(fn);
  require_rank(fn, "x", x, 1, 2);
  if (view_rank<LseView> != xr - 1 || (xr == 2 && lse.extent(0) != x.extent(0))) {
    throw_invalid_argument(fn, "argument '" + describe("lse", lse) + "' does not fit '" + describe("x", x) +
                                   "': expected a rank-0 View for rank-1 x, or a rank-1 View with one "
                                   "element per row of rank-2 x");
  }
  require_same_shape(fn, "lse", lse, "dlse", dlse);
  require_same_shape(fn, "x", x, "dx", dx);
  require_disjoint(fn, "dx", dx, "lse", lse);
  require_disjoint(fn, "dx", dx, "dlse", dlse);
  require_same_or_disjoint(fn, "x", x, "dx", dx);
  if constexpr ((xr == 1 || xr == 2) && view_rank<LseView> == xr - 1 && view_rank<DLseView> == xr - 1 &&
                view_rank<DXView> == xr) {
    dispatch_row_backward<RowGrad::logsumexp>(exec, Rows<XView>{x}, NoRowScalars{}, Rows<DXView>{dx},
                                              LseOut<LseView>{lse}, LseOut<DLseView>{dlse});
  }
}

/// The same, on the default execution space of the first View.
template <class YView, class DYView, class DXView>
void softmax_backward(const YView& y, const DYView& dy, const DXView& dx) {
  softmax_backward(impl::default_space<YView>("softmax_backward"), y, dy, dx);
}
template <class YView, class DYView, class DXView>
void log_softmax_backward(const YView& y, const DYView& dy, const DXView& dx) {
  log_softmax_backward(impl::default_space<YView>("log_softmax_backward"), y, dy, dx);
}
template <class XView, class LseView, class DLseView, class DXView>
void logsumexp_backward(const XView& x, const LseView& lse, const DLseView& dlse, const DXView& dx) {
  logsumexp_backward(impl::default_space<XView>("logsumexp_backward"), x, lse, dlse, dx);
}

}  // namespace kflash
