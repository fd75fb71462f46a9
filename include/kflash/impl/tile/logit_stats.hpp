// The one place a row of logits becomes its cross-entropy loss: the row's statistics (its softmax
// state, the sum of its logits for label smoothing, its target's logit), which merge like the state
// itself (chunks of a row, ranks holding parts of a vocabulary), and the loss computed from them.
#pragma once

#include <kflash/impl/tile/tile_state.hpp>

namespace kflash::impl {

/// What the loss of a row needs from its logits, for any set of its columns. Monoid: identity() is
/// the empty set, merge() the union of disjoint sets.
template <class T>
struct LogitStats {
  using value_type = T;

  SoftmaxState<T> state;  ///< (m, l) of the logits
  SoftmaxState<T> total;  ///< the sum of the logits, compensated (used as a sum only: total() is it); the
                          ///< statistics phase leaves it 0 where the loss has no label smoothing
  T target_logit;         ///< the target's logit when the set holds the target column, else 0

  KOKKOS_INLINE_FUNCTION static constexpr LogitStats identity() {
    return LogitStats{SoftmaxState<T>::identity(), SoftmaxState<T>::identity(), T(0)};
  }

  /// Adds the sum `s` of some logits to `total`.
  KOKKOS_INLINE_FUNCTION void add_logits(T s) { total.add_term(s); }

  KOKKOS_INLINE_FUNCTION void merge(const LogitStats& other) {
    state.merge(other.state);
    total.add_term(other.total.sum);
    total.comp += other.total.comp;
    target_logit += other.target_logit;  // only the set with the target column holds a non-zero one
  }
};

/// Kokkos reducer of any monoid V with V::identity() and V::merge(), its result a V in Space (the
/// nested reductions of the loss kernels: AnonymousSpace; a host result: HostSpace).
template <class V, class Space = Kokkos::AnonymousSpace>
struct MergeOf {
  using reducer = MergeOf<V, Space>;
  using value_type = V;
  using result_view_type = Kokkos::View<value_type, Space>;
  result_view_type value_;

  KOKKOS_INLINE_FUNCTION MergeOf(value_type& value) : value_(&value) {}
  KOKKOS_INLINE_FUNCTION void join(value_type& dest, const value_type& src) const { dest.merge(src); }
  KFLASH_IMPL_VOLATILE_JOIN(value_type)
  KOKKOS_INLINE_FUNCTION void init(value_type& val) const { val = value_type::identity(); }
  KOKKOS_INLINE_FUNCTION value_type& reference() const { return *value_.data(); }
  KOKKOS_INLINE_FUNCTION result_view_type view() const { return value_; }
  KOKKOS_INLINE_FUNCTION bool references_scalar() const { return true; }
};

/// The target logit that columns [begin, end) of row r contribute, the row's first column being
/// column col0 of the vocabulary: x(r, targets(r) - col0) if that is among them, else 0.
template <class XRows, class Targets>
KOKKOS_INLINE_FUNCTION auto target_logit_in(const XRows& x, const Targets& targets, index_t r, index_t col0,
                                            index_t begin, index_t end) {
  using T = arith_t<std::remove_cv_t<std::remove_reference_t<decltype(x(r, begin))>>>;
  const index_t c = index_t(targets(r)) - col0;
  return c >= begin && c < end ? T(widen(x(r, c))) : T(0);
}

/// The cross-entropy options a row's loss needs (CrossEntropyOptions resolved).
struct LossTerms {
  double label_smoothing = 0;  ///< epsilon: loss = (1 - eps) nll + (eps / C) sum_c -log p_c
  double z_loss = 0;           ///< coefficient of lse^2
};

/// The loss of a row of `cols` logits whose statistics are s, the target's logit among them:
///   (1 - eps) (lse - x_t) + eps (lse - sum / cols) + z lse^2,   lse = m + log l,
/// each difference taken as (m - x) + log l, in double (l = sum + comp keeps its low part there).
/// The numerics contract: a row with NaN or +inf has loss NaN; a target logit of -inf, or a row of
/// only -inf, has log p_t = -inf and so loss +inf; a term whose coefficient is 0 is left out. The
/// smoothing term needs the logits' sum finite in T (it is +-inf past T's range, and the loss with it).
/// The loss is returned in double, before its rounding to T: the mean over rows sums these, so a
/// row whose loss is past T's range still counts at its value.
template <class T>
KOKKOS_INLINE_FUNCTION double cross_entropy_loss(const LogitStats<T>& s, index_t cols, const LossTerms& terms) {
  const T l = s.state.total();
  const double inf = infinity<double>();
  if (l != l || s.state.max == infinity<T>()) return quiet_nan<double>();
  if (s.state.max == -infinity<T>()) return inf;
  const double m = double(s.state.max);
  const double log_l = impl::log(double(s.state.sum) + double(s.state.comp));
  double loss = 0;
  if (terms.label_smoothing != 1) loss = (1 - terms.label_smoothing) * ((m - double(s.target_logit)) + log_l);
  if (terms.label_smoothing != 0) {
    // A -inf logit makes the sum -inf and its compensation NaN (TwoSum of infinities).
    const double sum = is_finite(s.total.sum) ? double(s.total.sum) + double(s.total.comp) : double(s.total.sum);
    const double mean = sum / double(cols);
    loss += terms.label_smoothing * ((m - mean) + log_l);
  }
  if (terms.z_loss != 0) loss += terms.z_loss * (m + log_l) * (m + log_l);
  return loss;
}

/// The per-row factors of cross-entropy's gradient (GUIDE §8): with p_c = exp(x_c - lse),
///   dloss/dx_c = g ((1 + 2 z lse) p_c - eps / cols - (1 - eps) [c = t])
/// for the row's upstream gradient g. A row whose lse is not finite (NaN or +inf in the row, or only
/// -inf, where the loss is NaN or +inf) gets NaN, never a finite gradient.
template <class T>
struct CrossEntropyGrad {
  T lse, weight, smooth, hit;  // lse; g (1 + 2 z lse); g eps / cols; g (1 - eps)

  KOKKOS_INLINE_FUNCTION CrossEntropyGrad(T lse_, T g, index_t cols, const LossTerms& terms) : lse(lse_) {
    const T eps = T(terms.label_smoothing);
    weight = is_finite(lse) ? g * (T(1) + T(2 * terms.z_loss) * lse) : quiet_nan<T>();
    smooth = g * (eps / T(cols));
    hit = g * (T(1) - eps);
  }
  /// The gradient of logit x of the row's column c, target saying whether c is the row's target.
  KOKKOS_INLINE_FUNCTION T operator()(T x, bool target) const {
    const T d = weight * exp(x - lse) - smooth;
    return target ? d - hit : d;
  }
};

}  // namespace kflash::impl
