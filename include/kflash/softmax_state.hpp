// The online-softmax monoid (m, l) and its Kokkos reducer.
#pragma once

#include <kflash/impl/compat.hpp>
#include <kflash/impl/fast_exp.hpp>

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
  KOKKOS_INLINE_FUNCTION T logsumexp() const { return max + impl::log(total()); }

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

  KOKKOS_INLINE_FUNCTION explicit SoftmaxNormalizer(const SoftmaxState<T>& s, Normalize what = Normalize::prob) {
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
      log_sum = what == Normalize::log_prob ? impl::log(l) : impl::quiet_nan<T>();
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

namespace impl {

/// Max reducer whose identity is -inf and which ignores NaN (Kokkos::Max starts from the lowest
/// finite value, which would hide a row of only -inf).
template <class T>
struct MaxOf {
  using reducer = MaxOf<T>;
  using value_type = T;
  using result_view_type = Kokkos::View<value_type, Kokkos::AnonymousSpace>;
  result_view_type value_;

  KOKKOS_INLINE_FUNCTION MaxOf(value_type& value) : value_(&value) {}
  KOKKOS_INLINE_FUNCTION void join(value_type& dest, const value_type& src) const {
    if (src > dest) dest = src;
  }
  KFLASH_IMPL_VOLATILE_JOIN(value_type)
  KOKKOS_INLINE_FUNCTION void init(value_type& val) const { val = -infinity<T>(); }
  KOKKOS_INLINE_FUNCTION value_type& reference() const { return *value_.data(); }
  KOKKOS_INLINE_FUNCTION result_view_type view() const { return value_; }
  KOKKOS_INLINE_FUNCTION bool references_scalar() const { return true; }
};

/// The state of the values value(i), i in [b, e), over a team thread's vector lanes: the maximum
/// first, then a compensated sum of the weights exp(value - max). Summing against a fixed maximum
/// means no rescale per element: long or monotone runs keep full accuracy.
template <class T, class Member, class Index, class F>
KOKKOS_INLINE_FUNCTION SoftmaxState<T> vector_tile_state(const Member& team, Index b, Index e,
                                                         const F& value) {
  T m;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, b, e),
      [&](Index i, T& acc) {
        const T v = value(i);
        if (v > acc) acc = v;
      },
      MaxOf<T>(m));
  SoftmaxState<T> sum;  // its max stays -inf: merges of such states add the sums (compensated)
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, b, e),
      [&](Index i, SoftmaxState<T>& acc) { acc.add_term(SoftmaxState<T>::weight(value(i), m)); },
      OnlineSoftmax<T, Kokkos::AnonymousSpace>(sum));
  return SoftmaxState<T>{m, sum.sum, sum.comp};
}

/// The maximum of value(i), i in [b, e) (NaN ignored, -inf if empty), for one thread: a plain loop
/// over `lanes` independent partial maxima, which compilers vectorise.
constexpr int serial_lanes = 16;

template <class T, class Index, class F>
KOKKOS_INLINE_FUNCTION T lanes_max(Index b, Index e, const F& value) {
  constexpr int lanes = serial_lanes;
  const Index full = b + (e - b) / lanes * lanes;
  T lane[lanes];
  for (int l = 0; l < lanes; ++l) lane[l] = -infinity<T>();
  for (Index i = b; i < full; i += lanes)
    for (int l = 0; l < lanes; ++l) {
      const T v = value(i + l);
      lane[l] = v > lane[l] ? v : lane[l];
    }
  T m = -infinity<T>();
  for (int l = 0; l < lanes; ++l) m = lane[l] > m ? lane[l] : m;
  for (Index i = full; i < e; ++i) {
    const T v = value(i);
    m = v > m ? v : m;
  }
  return m;
}

/// Adds the terms term(i), i in [b, e), to `sum` (a state whose max stays -inf: a compensated sum),
/// each term also handed to store(i, term). The terms go to `lanes` independent partial sums (a
/// vectorisable loop; each sums (e - b) / lanes terms), added by a tree, lane l with lane l + half
/// for half = lanes / 2, ..., 1 (each level a vectorisable loop), the root then to `sum`. The tree
/// adds at most log2(lanes) roundings to the lanes' own; the tiles' sums merge compensated. Keep
/// e - b to a tile: the lanes' sums are not compensated. (src/host_kernels.cpp's tile_state does
/// the same additions in the same order on vector registers.)
template <class T, class Index, class Term, class Store>
KOKKOS_INLINE_FUNCTION void lanes_add_terms(Index b, Index e, const Term& term, const Store& store,
                                            SoftmaxState<T>& sum) {
  constexpr int lanes = serial_lanes;
  const Index full = b + (e - b) / lanes * lanes;
  T lane[lanes];
  for (int l = 0; l < lanes; ++l) lane[l] = T(0);
  for (Index i = b; i < full; i += lanes)
    for (int l = 0; l < lanes; ++l) {
      const T w = term(i + l);
      store(i + l, w);
      lane[l] += w;
    }
  for (Index i = full; i < e; ++i) {
    const T w = term(i);
    store(i, w);
    sum.add_term(w);
  }
  for (int half = lanes / 2; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) lane[l] += lane[l + half];
  sum.add_term(lane[0]);
}

/// Adds the weights exp(value(i) - m), i in [b, e), to `sum` as lanes_add_terms does. For a finite
/// m the weight is exp_nonpositive(value - m) itself (the contract's special cases arise only for
/// an infinite maximum), so the common case skips weight()'s select.
template <class T, class Index, class F, class Store>
KOKKOS_INLINE_FUNCTION void lanes_add_weights(Index b, Index e, const F& value, T m, const Store& store,
                                              SoftmaxState<T>& sum) {
  if (m - m == T(0)) {
    lanes_add_terms<T>(b, e, [&](Index i) { return exp_nonpositive(value(i) - m); }, store, sum);
  } else {
    lanes_add_terms<T>(b, e, [&](Index i) { return SoftmaxState<T>::weight(value(i), m); }, store, sum);
  }
}

/// The state of value(i), i in [b, e), whose maximum (NaN ignored) is m, for one thread: the
/// weights against m, each also handed to store(i, weight).
template <class T, class Index, class F, class Store>
KOKKOS_INLINE_FUNCTION SoftmaxState<T> serial_tile_state(T m, Index b, Index e, const F& value,
                                                         const Store& store) {
  SoftmaxState<T> sum = SoftmaxState<T>::identity();
  lanes_add_weights<T>(b, e, value, m, store, sum);
  return SoftmaxState<T>{m, sum.sum, sum.comp};
}

/// The same, the tile's maximum found first with lanes_max.
template <class T, class Index, class F, class Store>
KOKKOS_INLINE_FUNCTION SoftmaxState<T> serial_tile_state(Index b, Index e, const F& value,
                                                         const Store& store) {
  return serial_tile_state<T>(lanes_max<T>(b, e, value), b, e, value, store);
}

}  // namespace impl

template <class T, class... Props>
OnlineSoftmax(const Kokkos::View<SoftmaxState<T>, Props...>&)
    -> OnlineSoftmax<T, typename Kokkos::View<SoftmaxState<T>, Props...>::memory_space>;

}  // namespace kflash
