// The online-softmax monoid (m, l) and its Kokkos reducer.
#pragma once

#include <kflash/impl/compat.hpp>
#include <kflash/impl/math.hpp>

#include <type_traits>

namespace kflash {

/// Running state of a stable softmax over a set of values x_i:
///   max = max_i x_i,   l = sum_i exp(x_i - max),   l = sum + comp.
///
/// States form a monoid: `identity()` is the empty set and `merge` is associative (within rounding),
/// so the state can be reduced in any tree shape. The sum is compensated (`comp` carries the low-order
/// part lost by each addition), so that a long sequential run of `push` loses no accuracy.
///
/// Special values follow the kflash numerics contract:
///  - -inf entries contribute nothing; a state of only -inf entries has max = -inf, l = 0.
///  - a NaN entry makes l NaN (it never enters `max`), so every result derived from the state is NaN.
///  - a +inf entry makes max = +inf and l >= 1: logsumexp() is +inf.
/// Every exp() argument is <= 0, so finite inputs of any magnitude never overflow.
template <class T>
struct SoftmaxState {
  static_assert(std::is_floating_point<T>::value, "kflash::SoftmaxState: T must be a floating-point type");
  using value_type = T;

  T max;   ///< running maximum (-inf for the empty state)
  T sum;   ///< high part of l = sum_i exp(x_i - max)
  T comp;  ///< low part of l (compensation of the rounding errors of `sum`)

  /// The empty state: max = -inf, l = 0.
  KOKKOS_INLINE_FUNCTION static constexpr SoftmaxState identity() {
    return SoftmaxState{-impl::infinity<T>(), T(0), T(0)};
  }

  /// The state of a set whose maximum is max and whose weights exp(x_i - max) were summed into
  /// `weights` (a state used as a compensated sum: its own max stays -inf).
  KOKKOS_INLINE_FUNCTION static SoftmaxState of_weights(T max, const SoftmaxState& weights) {
    return SoftmaxState{max, weights.sum, weights.comp};
  }

  /// The state of a single element x.
  KOKKOS_INLINE_FUNCTION static SoftmaxState of(T x) {
    SoftmaxState s = identity();
    s.push(x);
    return s;
  }

  /// l = sum_i exp(x_i - max).
  KOKKOS_INLINE_FUNCTION T total() const { return sum + comp; }

  /// log(sum_i exp(x_i)) = max + log(l): -inf for the empty state, +inf if an entry is +inf,
  /// NaN if an entry is NaN.
  KOKKOS_INLINE_FUNCTION T logsumexp() const { return logsumexp(impl::log(total())); }

  /// The same, with log(total()) computed by the caller (rows that take their logs together), in
  /// T or a wider type L, in which the sum is then rounded once.
  template <class L>
  KOKKOS_INLINE_FUNCTION T logsumexp(L log_total) const {
    return T(L(max) + log_total);
  }

  /// Adds exp(x - max) for an x <= max (or NaN).
  KOKKOS_INLINE_FUNCTION void add_term(T t) {
    // Knuth's TwoSum: s + e == sum + t exactly.
    const T s = sum + t;
    const T bp = s - sum;
    const T e = (sum - (s - bp)) + (t - bp);
    sum = s;
    comp += e;
  }

  /// Multiplies l by f (used when the maximum grows).
  KOKKOS_INLINE_FUNCTION void rescale(T f) {
    sum *= f;
    comp *= f;
  }

  /// exp(x - m) for an x <= m (or NaN), with the contract's rules where both are infinite:
  /// -inf against a -inf maximum weighs 0, +inf against a +inf maximum weighs 1, NaN gives NaN.
  KOKKOS_INLINE_FUNCTION static T weight(T x, T m) {
    // Both sides evaluated, then selected by masks: loops over weight() vectorise.
    return impl::select_same_bits(x, m, T(m != -impl::infinity<T>()), impl::exp_nonpositive(x - m));
  }

  /// Adds one element.
  KOKKOS_INLINE_FUNCTION void push(T x) {
    if (x > max) {  // a new maximum (never taken for NaN)
      rescale(impl::exp_nonpositive(max - x));  // max - x < 0, or -inf when max is -inf or x is +inf: exp gives 0
      max = x;
    }
    add_term(weight(x, max));
  }

  /// Merges another state into this one (the monoid operation).
  KOKKOS_INLINE_FUNCTION void merge(const SoftmaxState& other) {
    T fa, fb;
    merge(other, fa, fb);
  }

  /// The same, also giving the factors applied: l = fa * l_this + fb * l_other. Quantities that are
  /// sums weighted like l (attention's output O) merge with the same factors.
  KOKKOS_INLINE_FUNCTION void merge(const SoftmaxState& other, T& fa, T& fb) {
    const T m = other.max > max ? other.max : max;
    // Factors exp(max_i - m) <= 1; a state whose max equals m keeps factor 1 (also for infinite m).
    fa = max == m ? T(1) : impl::exp_nonpositive(max - m);
    fb = other.max == m ? T(1) : impl::exp_nonpositive(other.max - m);
    rescale(fa);
    add_term(other.sum * fb);
    comp += other.comp * fb;
    max = m;
  }
};

/// Which output a SoftmaxNormalizer is for: probabilities need 1 / l, log-probabilities log(l).
enum class Normalize { prob, log_prob };

/// The per-row constants that turn a finished state into outputs:
///   softmax(x) = exp(x - shift) * inv_sum,   log_softmax(x) = (x - shift) - log_sum.
/// Built so that the contract holds without per-element tests: a row of only -inf gives 0 and -inf,
/// a row with NaN or +inf gives NaN everywhere. Only the constant `what` asks for is computed (a
/// log per row is a large part of a short row's cost); the other one is NaN.
template <class T>
struct SoftmaxNormalizer {
  T shift;
  T inv_sum;
  T log_sum;

  KOKKOS_INLINE_FUNCTION explicit SoftmaxNormalizer(const SoftmaxState<T>& s, Normalize what = Normalize::prob)
      : SoftmaxNormalizer(s, what, what == Normalize::log_prob ? impl::log(s.total()) : T(0)) {}

  /// The same, with log(s.total()) computed by the caller (rows that take their logs together).
  KOKKOS_INLINE_FUNCTION SoftmaxNormalizer(const SoftmaxState<T>& s, Normalize what, T log_total) {
    const T l = s.total();
    const T inf = impl::infinity<T>();
    if (l != l || s.max == inf) {  // NaN entry, or +inf entry: the whole row is NaN
      shift = T(0);
      inv_sum = impl::quiet_nan<T>();
      log_sum = impl::quiet_nan<T>();
    } else if (s.max == -inf) {  // empty or fully masked row: probabilities 0, log-probabilities -inf
      shift = T(0);
      inv_sum = T(0);
      log_sum = T(0);
    } else {
      shift = s.max;
      inv_sum = what == Normalize::prob ? T(1) / l : impl::quiet_nan<T>();
      log_sum = what == Normalize::log_prob ? log_total : impl::quiet_nan<T>();
    }
  }

  KOKKOS_INLINE_FUNCTION T prob(T x) const { return impl::exp_nonpositive(x - shift) * inv_sum; }
  /// prob(x) from x's weight w = SoftmaxState<T>::weight(x, s.max) against the state s it was built
  /// from (kernels that keep the weights skip the second exp).
  KOKKOS_INLINE_FUNCTION T prob_of_weight(T w) const { return w * inv_sum; }
  KOKKOS_INLINE_FUNCTION T log_prob(T x) const { return (x - shift) - log_sum; }
};

/// Kokkos custom reducer over SoftmaxState<T>, shaped like Kokkos::MinLoc: construct it from a
/// `SoftmaxState<T>&` (host result) or a rank-0 result View, then call
///   Kokkos::parallel_reduce(policy, KOKKOS_LAMBDA(int i, SoftmaxState<T>& s) { s.push(x(i)); },
///                           kflash::OnlineSoftmax<T>(state));
/// It works with RangePolicy, MDRangePolicy, TeamPolicy and the nested TeamThreadRange,
/// ThreadVectorRange and TeamVectorRange.
template <class T, class Space = Kokkos::HostSpace>
struct OnlineSoftmax {
 public:
  using reducer = OnlineSoftmax<T, Space>;
  using value_type = SoftmaxState<std::remove_cv_t<T>>;
  using result_view_type = Kokkos::View<value_type, Space>;

 private:
  result_view_type value_;
  bool references_scalar_v_;

 public:
  KOKKOS_INLINE_FUNCTION
  OnlineSoftmax(value_type& value) : value_(&value), references_scalar_v_(true) {}

  KOKKOS_INLINE_FUNCTION
  OnlineSoftmax(const result_view_type& value) : value_(value), references_scalar_v_(false) {}

  KOKKOS_INLINE_FUNCTION
  void join(value_type& dest, const value_type& src) const { dest.merge(src); }

  KFLASH_IMPL_VOLATILE_JOIN(value_type)

  KOKKOS_INLINE_FUNCTION
  void init(value_type& val) const { val = value_type::identity(); }

  KOKKOS_INLINE_FUNCTION
  value_type& reference() const { return *value_.data(); }

  KOKKOS_INLINE_FUNCTION
  result_view_type view() const { return value_; }

  KOKKOS_INLINE_FUNCTION
  bool references_scalar() const { return references_scalar_v_; }
};

template <class T>
OnlineSoftmax(SoftmaxState<T>&) -> OnlineSoftmax<T, Kokkos::HostSpace>;

template <class T, class... Props>
OnlineSoftmax(const Kokkos::View<SoftmaxState<T>, Props...>&)
    -> OnlineSoftmax<T, typename Kokkos::View<SoftmaxState<T>, Props...>::memory_space>;

}  // namespace kflash
