// The online-attention monoid (m, l, O) for one query row, and its Kokkos reducer.
#pragma once

#include <kflash/softmax_state.hpp>

namespace kflash {

/// Running state of one query row of attention over a set of keys j with scores s_j:
///   (max, l) = the SoftmaxState of the scores,   O = sum_j exp(s_j - max) v_j   (Dv values).
/// The output is O / l. States merge like SoftmaxState, O with the same factors, so partial results
/// over disjoint key sets combine exactly (split-K/V, KV-cache chunks, ring attention).
/// A row that saw no key (or only -inf scores) has l = 0 and outputs 0; a NaN score makes it NaN.
/// How a running attention output O changes when its row's state absorbs another state: the
/// factors of SoftmaxState::merge, l = fa * l + fb * l_other, give O = fa * O + fb * X, where X is
/// the other side's output (its O, one key's value row, or a tile's P V with P its weights). Every
/// kernel (prefill, split-K/V, merge_attention, AttentionState, users' own) updates O through this.
template <class T>
struct OutputFactors {
  T fa = T(1);
  T fb = T(0);

  /// Merges `other` into the row state `row`; returns the factors for the row's O.
  KOKKOS_INLINE_FUNCTION static OutputFactors merge(SoftmaxState<T>& row, const SoftmaxState<T>& other) {
    OutputFactors f;
    row.merge(other, f.fa, f.fb);
    return f;
  }

  /// fa * o + fb * x for one column.
  KOKKOS_INLINE_FUNCTION T merged(T o, T x) const { return o * fa + fb * x; }
  /// The same in two parts, for kernels that form X = sum_j p_j v_j by products: o * fa, to which
  /// the products of the weights fb * p_j with V are added.
  KOKKOS_INLINE_FUNCTION T kept(T o) const { return o * fa; }
  KOKKOS_INLINE_FUNCTION T weight(T p) const { return fb * p; }
};

template <class T, int Dv>
struct AttentionState {
  static_assert(Dv >= 1, "kflash::AttentionState: Dv must be at least 1");
  using value_type = T;

  SoftmaxState<T> s;
  T o[Dv];

  KOKKOS_INLINE_FUNCTION static AttentionState identity() {
    AttentionState a;
    a.s = SoftmaxState<T>::identity();
    for (int d = 0; d < Dv; ++d) a.o[d] = T(0);
    return a;
  }

  /// Adds one key with score `score` and value row v (v(d) for d < Dv).
  template <class VRow>
  KOKKOS_INLINE_FUNCTION void push(T score, const VRow& v) {
    const auto f = OutputFactors<T>::merge(s, SoftmaxState<T>::of(score));
    for (int d = 0; d < Dv; ++d) o[d] = f.merged(o[d], v(d));
  }

  /// Merges another state (over other keys) into this one.
  KOKKOS_INLINE_FUNCTION void merge(const AttentionState& other) {
    const auto f = OutputFactors<T>::merge(s, other.s);
    for (int d = 0; d < Dv; ++d) o[d] = f.merged(o[d], other.o[d]);
  }

  /// The attention output O / l for column d (0 for a row without keys, NaN for a NaN row).
  KOKKOS_INLINE_FUNCTION T output(int d) const { return o[d] * SoftmaxNormalizer<T>(s).inv_sum; }

  /// log(sum_j exp(s_j)).
  KOKKOS_INLINE_FUNCTION T logsumexp() const { return s.logsumexp(); }
};

/// Kokkos custom reducer over AttentionState<T, Dv>, shaped like OnlineSoftmax.
template <class T, int Dv, class Space = Kokkos::HostSpace>
struct OnlineAttention {
 public:
  using reducer = OnlineAttention<T, Dv, Space>;
  using value_type = AttentionState<T, Dv>;
  using result_view_type = Kokkos::View<value_type, Space>;

 private:
  result_view_type value_;
  bool references_scalar_v_;

 public:
  KOKKOS_INLINE_FUNCTION
  OnlineAttention(value_type& value) : value_(&value), references_scalar_v_(true) {}

  KOKKOS_INLINE_FUNCTION
  OnlineAttention(const result_view_type& value) : value_(value), references_scalar_v_(false) {}

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

template <class T, int Dv>
OnlineAttention(AttentionState<T, Dv>&) -> OnlineAttention<T, Dv, Kokkos::HostSpace>;

}  // namespace kflash
