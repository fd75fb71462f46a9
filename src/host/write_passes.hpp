// The host write passes over contiguous rows: y[i] = f(x[i]) for the functions the row kernels
// apply once a row's state is known (probabilities, log-probabilities, scaled weights, gradients),
// through plain or non-temporal stores; x stored as B is widened as it loads, 16-bit outputs are
// rounded once (Narrowing).
#pragma once

#include "vector_lanes.hpp"

#include <kflash/impl/host/host_kernels.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace kflash::impl::host::internal {

/// The write passes: y[i] = f(x[i]), i in [0, n); with `stream`, through non-temporal stores.
/// ProbOf and LogProbOf refer to the row's normalizer rather than copy it: GCC copied its 12 bytes
/// by an 8-byte load over two of the 4-byte stores that had just built it, which cannot be
/// forwarded from them and waited until they were written (about a sixth of log_softmax's time on rows of 64).
template <class T, ExpAccuracy A = ExpAccuracy::full>  // A: the weights' exp (its vectors)
struct ProbOf {
  const SoftmaxNormalizer<T>& norm;
  T operator()(T v) const { return norm.prob(v); }
};
template <class T>
struct LogProbOf {
  const SoftmaxNormalizer<T>& norm;
  T operator()(T v) const { return norm.log_prob(v); }
};
template <class T>
struct Scaled {  // softmax's weights, stored in the state pass
  T factor;
  T operator()(T v) const { return v * factor; }
};
template <class T>
struct ScaledTwice {  // the same, the factor split in two (scale_pass_beside)
  T first, factor;
  T operator()(T v) const { return (v * first) * factor; }
};

/// The factor that scales a tile's stored weights into softmax's outputs: exp(tile's reference -
/// row max) / l, split in two (`first`, then `factor`) where it is below the smallest normal
/// number: a weight up to e^stored_slack times a subnormal (or flushed) factor would lose the
/// probabilities down to the smallest normal number, so the weights are scaled down by
/// e^-stored_slack first, then by the factor that much larger (still at most 1: it is tiny).
template <class T, class Tiles>
struct TileFactor {
  T first = T(1), factor;
  bool twice = false;
  TileFactor(T ref, T row_max, T inv_sum) : factor(SoftmaxState<T>::weight(ref, row_max) * inv_sum) {
    if (factor < std::numeric_limits<T>::min() && is_finite(row_max)) {
      first = exp_nonpositive(-Tiles::stored_slack);
      factor = exp_nonpositive(ref - row_max + Tiles::stored_slack) * inv_sum;
      twice = true;
    }
  }
};

template <class T>
struct Rounded {  // the values as they are, for a 16-bit write pass that only rounds them
  T operator()(T v) const { return v; }
};

template <class T>
struct ScaledExpOf {  // cross-entropy's gradient: scale exp(v - shift) - offset
  T shift, scale, offset;
  T operator()(T v) const { return scale * exp_nonpositive(v - shift) - offset; }
};

template <class T>
struct LseGradOf {  // logsumexp's gradient: scale exp(v - shift), for v - shift of either sign
  T shift, scale;
  T operator()(T v) const {
    // d > 0 (an lse below the row's maximum): exp(d) = (1 / exp(-d/2))^2, exp(-d/2) a normal number
    // wherever exp(d) is finite. NaN stays NaN, +inf gives inf.
    const T d = v - shift;
    const bool up = d > T(0);
    const T e = exp_nonpositive(up ? T(-0.5) * d : d);
    const T r = T(1) / e;
    return scale * (up ? r * r : e);
  }
};

/// w[l] = f(v[l]), l in [0, N): a vector's lanes.
template <class T, int VB, int N, class F>
inline void apply_lanes(const F& f, const T* v, T* w) {
  for (int l = 0; l < N; ++l) w[l] = f(v[l]);
}
template <class T, int VB, int N, ExpAccuracy A>
inline void apply_lanes(const ProbOf<T, A>& f, const T* v, T* w) {  // norm.prob with the vector exp
  ExpOf<T, VB, A>::type::template apply<N>(v, f.norm.shift, w);
  // The weights times 1 / l (prob_of_weight) as whole vectors: lane by lane, GCC multiplied scalars
  // and stored them one by one, and the vector load of w that followed waited on those stores (a
  // softmax over a 2^26 row ran at 0.15 of copy bandwidth on an Intel Xeon, log_softmax at 0.50).
  using V = Vec<T, VB>;
  constexpr int W = VB / int(sizeof(T));
  static_assert(N % W == 0, "kflash: apply_lanes takes whole vectors");
  for (int l = 0; l < N; l += W) {
    typename V::type weights, probs;
    V::load(weights, w + l);
    V::zero(probs);
    V::fma(probs, f.norm.inv_sum, weights);  // 0 + inv_sum w: the product, rounded once
    V::store(w + l, probs);
  }
}

template <class T, int VB, int N>
inline void apply_lanes(const ScaledExpOf<T>& f, const T* v, T* w) {  // with the vector exp
  LaneExp<T, VB>::template apply<N>(v, f.shift, w);
  for (int l = 0; l < N; ++l) w[l] = f.scale * w[l] - f.offset;
}

/// y[j] = f(x[j]) for the whole vectors of [i, n), x's widened as they load (Operand), each written
/// by Out::store; returns where they end. In groups of a vector (x and y may be the same row, never
/// partly overlapping ones: a group is read whole before it is written, and the compiler needs no
/// test of their overlap). x's group goes through a vector and an aligned copy: read element by
/// element the compiler may load it one element at a time, and a plain copy may be split into two
/// halves that a whole-vector load then waits for (AVX2's generic tuning splits unaligned 32-byte
/// accesses).
template <class T, int VB, class Out, class B, class Y, class F>
inline index_t write_vectors(const B* x, Y* y, index_t i, index_t n, const F& f) {
  using V = Vec<T, VB>;
  constexpr int W = VB / int(sizeof(T));
  alignas(VB) T xl[W], w[W];
  typename V::type v;
  for (; i + W <= n; i += W) {
    Operand<T, VB, B>::load(v, x + i);
    V::store(xl, v);
    apply_lanes<T, VB, W>(f, xl, w);
    V::load(v, w);
    Out::store(y + i, v);
  }
  return i;
}

/// write_vectors into 16-bit outputs that Out (Narrowing, StreamNarrowing) rounds two vectors at a
/// time (store_pair).
template <class T, int VB, class Out, class B, class Y, class F>
inline index_t write_vector_pairs(const B* x, Y* y, index_t i, index_t n, const F& f) {
  using V = Vec<T, VB>;
  constexpr int W = VB / int(sizeof(T));
  alignas(VB) T xl[2 * W], w[2 * W];
  typename V::type v, u;
  for (; i + 2 * W <= n; i += 2 * W) {
    Operand<T, VB, B>::load(v, x + i);
    V::store(xl, v);
    Operand<T, VB, B>::load(v, x + i + W);
    V::store(xl + W, v);
    apply_lanes<T, VB, 2 * W>(f, xl, w);
    V::load(v, w);
    V::load(u, w + W);
    Out::store_pair(y + i, v, u);
  }
  return i;
}

/// The streaming part of a write pass: y[i] = f(x[i]) element by element up to where y is aligned to
/// a vector, then by `vectors(i, e)` (non-temporal stores of whole vectors from i on; returns where
/// they end), a group at a time with the group ahead prefetched; returns where the vectors end.
template <class T, int VB, class B, class Y, class F, class Vectors>
inline index_t stream_vectors(const B* x, Y* y, index_t n, const F& f, const Vectors& vectors) {
  index_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(y + i) % VB != 0; ++i)
    narrow_element<VB>(f(Operand<T, VB, B>::element(x[i])), y + i);
  constexpr index_t group = StreamAhead<T, VB>::group, ahead = StreamAhead<T, VB>::ahead;
  for (; i + ahead + group <= n; i += group) {
    prefetch_lines(x + i + ahead, group);
    vectors(i, i + group);
  }
  return vectors(i, n);
}

/// The write pass y[i] = f(x[i]), i in [0, n), x stored as B, y as Y (T, or 16-bit: each output
/// rounded once); with `stream`, through non-temporal stores (and a fence after them, with `fence`).
template <class T, int VB, class B, class Y, class F>
inline void write_pass(const B* x, Y* y, index_t n, const F& f, bool stream, bool fence = true) {
  using S = Stream<T, VB>;
  index_t i = 0;
  if constexpr (std::is_same<Y, T>::value) {
    if (stream && S::available) {
      i = stream_vectors<T, VB>(x, y, n, f,
                                [&](index_t a, index_t e) { return write_vectors<T, VB, S>(x, y, a, e, f); });
    } else {
      i = write_vectors<T, VB, Vec<T, VB>>(x, y, i, n, f);
    }
  } else {
    using SN = StreamNarrowing<VB>;
    if (stream && SN::available) {
      i = stream_vectors<T, VB>(x, y, n, f,
                                [&](index_t a, index_t e) { return write_vector_pairs<T, VB, SN>(x, y, a, e, f); });
    } else {
      if constexpr (Narrowing<VB>::template pairs<Y>) i = write_vector_pairs<T, VB, Narrowing<VB>>(x, y, i, n, f);
      i = write_vectors<T, VB, Narrowing<VB>>(x, y, i, n, f);
    }
  }
  for (; i < n; ++i) narrow_element<VB>(f(Operand<T, VB, B>::element(x[i])), y + i);
  if (stream && fence) S::fence();
}

/// softmax's or log_softmax's write pass; A: the accuracy of softmax's weights.
template <class T, int VB, class B = T, ExpAccuracy A = ExpAccuracy::full>
void write_row(RowOp op, const B* x, B* y, index_t n, const SoftmaxNormalizer<T>& norm, bool stream) {
  if (op == RowOp::softmax) {
    write_pass<T, VB>(x, y, n, ProbOf<T, A>{norm}, stream);
  } else {
    write_pass<T, VB>(x, y, n, LogProbOf<T>{norm}, stream);
  }
}

template <class T, int VB, class B = T>
void write_scaled_exp(const B* x, B* y, index_t n, T shift, T scale, T offset) {
  write_pass<T, VB>(x, y, n, ScaledExpOf<T>{shift, scale, offset}, false);
}

template <class T, int VB, class B = T>
void write_lse_grad(const B* x, B* dx, index_t n, T lse, T dlse, bool stream) {
  write_pass<T, VB>(x, dx, n, LseGradOf<T>{lse, dlse}, stream);
}

}  // namespace kflash::impl::host::internal
