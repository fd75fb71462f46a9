// softmax, log_softmax and logsumexp over rank-1 and rank-2 Views.
#pragma once

#include <kflash/impl/errors.hpp>
#include <kflash/impl/spec/softmax_spec.hpp>
#include <kflash/softmax_state.hpp>

#include <type_traits>

namespace kflash {
namespace impl {

template <RowOp Op, class ExecSpace, class XView, class YView>
void softmax_rows(const ExecSpace& exec, const XView& x, const YView& y) {
  static_check_view<ExecSpace, XView, false, true>();
  static_check_view<ExecSpace, YView, true, true>();
  static_assert(std::is_same<std::remove_cv_t<typename XView::value_type>, typename YView::value_type>::value,
                "kflash: x and y must have the same value type");
  const char* fn = row_op_name(Op);
  const CallScope<ExecSpace> call(fn);
  require_rank(fn, "x", x, 1, 2);
  require_same_shape(fn, "x", x, "y", y);
  if constexpr (view_rank<XView> == view_rank<YView> && view_rank<XView> >= 1 && view_rank<XView> <= 2) {
    require_same_or_disjoint(fn, "x", x, "y", y);
    dispatch_rows<Op>(exec, Rows<XView>{x}, Rows<YView>{y});
  }
}

}  // namespace impl

/// y = softmax(x): over all elements of a rank-1 View, or over the last extent of each row of a
/// rank-2 View. Any layout; x and y may be the same View (in place). Value types float, double, or
/// 16-bit storage (kflash::bhalf_t, kflash::half_t: computed in float, each output rounded once).
/// Runs on `exec`; like any Kokkos kernel it may return before it completes (fence `exec` before
/// reading y on the host).
template <class ExecSpace, class XView, class YView>
void softmax(const ExecSpace& exec, const XView& x, const YView& y) {
  impl::softmax_rows<impl::RowOp::softmax>(exec, x, y);
}

/// y = log_softmax(x) = x - logsumexp(x), with the shapes and rules of softmax().
template <class ExecSpace, class XView, class YView>
void log_softmax(const ExecSpace& exec, const XView& x, const YView& y) {
  impl::softmax_rows<impl::RowOp::log_softmax>(exec, x, y);
}

/// out = log(sum exp(x)): rank-1 x gives a rank-0 out; rank-2 x gives a rank-1 out, one value per row.
/// out has x's value type, or float where x is 16-bit.
template <class ExecSpace, class XView, class OutView>
void logsumexp(const ExecSpace& exec, const XView& x, const OutView& out) {
  using namespace impl;
  static_check_view<ExecSpace, XView, false, true>();
  static_check_view<ExecSpace, OutView, true, true>();
  using XS = std::remove_cv_t<typename XView::value_type>;
  using OutS = typename OutView::value_type;
  static_assert(std::is_same<XS, OutS>::value || (is_half_type<XS> && std::is_same<OutS, float>::value),
                "kflash: out must have x's value type (or float, where x is 16-bit)");
  constexpr int xr = view_rank<XView>;
  constexpr int outr = view_rank<OutView>;
  const CallScope<ExecSpace> call("logsumexp");
  require_rank("logsumexp", "x", x, 1, 2);
  require_disjoint("logsumexp", "out", out, "x", x);
  if (outr != xr - 1 || (xr == 2 && out.extent(0) != x.extent(0))) {
    throw_invalid_argument("logsumexp", "argument '" + describe("out", out) + "' does not fit '" +
                                            describe("x", x) +
                                            "': expected a rank-0 View for rank-1 x, or a rank-1 View "
                                            "with one element per row of rank-2 x");
  }
  if constexpr ((xr == 1 || xr == 2) && outr == xr - 1) {
    dispatch_rows<RowOp::logsumexp>(exec, Rows<XView>{x}, LseOut<OutView>{out});
  }
}

/// The same, on the default execution space of x's View.
template <class XView, class YView>
void softmax(const XView& x, const YView& y) {
  softmax(impl::default_space<XView>("softmax"), x, y);
}
template <class XView, class YView>
void log_softmax(const XView& x, const YView& y) {
  log_softmax(impl::default_space<XView>("log_softmax"), x, y);
}
template <class XView, class OutView>
void logsumexp(const XView& x, const OutView& out) {
  logsumexp(impl::default_space<XView>("logsumexp"), x, out);
}

}  // namespace kflash
