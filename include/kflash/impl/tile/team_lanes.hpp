// The tile recurrence of tile_state.hpp in the form team schedules call it (tile_state, tile_sum
// for a team thread): VectorRangeLanes over the thread's Kokkos vector lanes, ThreadLanes over a
// lane-block policy on the thread alone; ScheduleTraits::tile_lanes names one. MaxOf is their
// maximum's reducer.
#pragma once

#include <kflash/impl/tile/tile_state.hpp>

namespace kflash::impl {

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

/// The tile recurrence over a team thread's Kokkos vector lanes: the maximum by a vector
/// reduction, then the weights by a vector reduction of the monoid (each lane's sum compensated).
template <class T, class Member>
struct VectorRangeLanes {
  const Member& team;
  KOKKOS_INLINE_FUNCTION explicit VectorRangeLanes(const Member& m) : team(m) {}

  template <class F, class Store>
  KOKKOS_INLINE_FUNCTION SoftmaxState<T> tile_state(index_t b, index_t e, const F& value, const Store& store) const {
    T m;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, b, e),
        [&](index_t i, T& acc) {
          const T v = value(i);
          if (v > acc) acc = v;
        },
        MaxOf<T>(m));
    SoftmaxState<T> sum;
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, b, e),
        [&](index_t i, SoftmaxState<T>& acc) {
          const T w = SoftmaxState<T>::weight(value(i), m);
          store(i, w);
          acc.add_term(w);
        },
        OnlineSoftmax<T, Kokkos::AnonymousSpace>(sum));
    return SoftmaxState<T>::of_weights(m, sum);
  }

  /// The sum of value(i), i in [b, e), by a vector reduction.
  template <class F>
  KOKKOS_INLINE_FUNCTION T tile_sum(index_t b, index_t e, const F& value) const {
    T s = T(0);
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, b, e), [&](index_t i, T& acc) { acc += value(i); }, s);
    return s;
  }
};

/// A single thread's tile by a lane-block policy, in VectorRangeLanes' form: schedules take the
/// one their traits name (ScheduleTraits::tile_lanes) and run the same code over either.
template <class T, class Lanes>
struct ThreadLanes {
  template <class Member>
  KOKKOS_INLINE_FUNCTION explicit ThreadLanes(const Member&) {}
  template <class F, class Store>
  KOKKOS_INLINE_FUNCTION SoftmaxState<T> tile_state(index_t b, index_t e, const F& value, const Store& store) const {
    return impl::tile_state<Lanes, T>(b, e, value, store);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION T tile_sum(index_t b, index_t e, const F& value) const {
    return impl::tile_sum<Lanes, T>(b, e, value);
  }
};

}  // namespace kflash::impl
