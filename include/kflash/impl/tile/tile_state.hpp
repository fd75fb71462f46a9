// The tile recurrence, written once: a tile of values becomes its state (m, l) by its maximum first,
// then the compensated sum of its weights exp(x - m) against that fixed maximum (no rescale per
// element, so long or monotone runs keep full accuracy). How one thread lays out the loops is a
// lane-block policy:
//  - ScalarLanes: blocks of plain lanes (devices' single threads and generic code);
//  - the host kernels' SIMD vectors (src/host/vector_lanes.hpp), the same loops on vector registers;
//  - VectorRangeLanes: a team thread's Kokkos vector lanes (a warp's lanes on CUDA), in team_lanes.hpp.
#pragma once

#include <kflash/softmax_state.hpp>

namespace kflash::impl {

/// The row operations: softmax, log_softmax and logsumexp.
enum class RowOp { softmax, log_softmax, logsumexp };

/// Element access to contiguous memory for the tile loops (function objects rather than lambdas:
/// nvcc wants them callable from both sides), and a store that keeps nothing.
template <class T>
struct Load {
  const T* p;
  KOKKOS_INLINE_FUNCTION T operator()(index_t i) const { return p[i]; }
};
template <class T>
struct Store {
  T* p;
  KOKKOS_INLINE_FUNCTION void operator()(index_t i, T w) const { p[i] = w; }
};
template <class T>
struct NoStore {
  KOKKOS_INLINE_FUNCTION void operator()(index_t, T) const {}
};

/// The weight terms of a tile against its maximum m: exp(value(i) - m). For a finite m that is
/// exp_nonpositive itself (the contract's special cases arise only for an infinite maximum), which
/// a policy may evaluate a block of lanes at a time (`Lanes::exp_block`).
template <class T, class F>
struct WeightTerms {
  static constexpr bool paddable = true;  // a value of -inf has the weight 0 (Lanes::padded_tail)
  F value;
  T m;
  KOKKOS_INLINE_FUNCTION T operator()(index_t i) const { return exp_nonpositive(value(i) - m); }
  template <class Lanes>
  KOKKOS_INLINE_FUNCTION void block(index_t i, T* w) const {
    Lanes::exp_block(value, i, m, w);
  }
  template <class Lanes>
  KOKKOS_INLINE_FUNCTION void block_of(const T* v, T* w) const {  // the same of the values v[0, width)
    Lanes::exp_block(Load<T>{v}, 0, m, w);
  }
};

/// The same for an infinite maximum (or NaN), through SoftmaxState::weight's rules.
template <class T, class F>
struct SpecialWeightTerms {
  static constexpr bool paddable = false;  // against a NaN maximum, -inf's weight is NaN
  F value;
  T m;
  KOKKOS_INLINE_FUNCTION T operator()(index_t i) const { return SoftmaxState<T>::weight(value(i), m); }
  template <class Lanes>
  KOKKOS_INLINE_FUNCTION void block(index_t i, T* w) const {
    for (int l = 0; l < Lanes::width; ++l) w[l] = (*this)(i + l);
  }
};

/// Terms (WeightTerms, SpecialWeightTerms, WeightsAgainst: terms over `value`) that also take
/// their values' plain sum: whole blocks into `values`, the rest into `tail_values`. The values are
/// read again where the terms read them, so that compilers load each once.
template <class Lanes, class T, class Terms>
struct SummingValues {
  static constexpr bool paddable = false;  // -inf would enter the values' sum
  Terms terms;
  typename Lanes::Block* values;
  T* tail_values;
  KOKKOS_INLINE_FUNCTION T operator()(index_t i) const {
    *tail_values += terms.value(i);
    return terms(i);
  }
  template <class L>
  KOKKOS_INLINE_FUNCTION void block(index_t i, T* w) const {
    T v[Lanes::width];
    for (int l = 0; l < Lanes::width; ++l) v[l] = terms.value(i + l);
    Lanes::add(*values, v);
    terms.template block<L>(i, w);
  }
};

/// Blocks of `width` plain lanes: loops over them are plain loops that compilers vectorise.
/// A lane-block policy provides:
///   width, chains              lanes of a block; independent blocks the maximum runs on
///   Block, fill, max, max_lanes  a block of running maxima (NaN ignored)
///   add, sum_tree              a block of running sums; the lanes added by a tree, lane l with
///                              lane l + half for half = width / 2, ..., 1
///   exp_block                  w[l] = exp_nonpositive(value(i + l) - m), l < width
///   rows_at_once               blocks of as many rows whose lanes are reduced together by
///   max_lanes, sum_trees       max_lanes(a, out) and sum_trees(a, out) (out[k] from a[k])
///   padded_tail                whether the values after the last whole block go through one more
///                              block whose other lanes read -inf (tail_max; tail_block, only for
///                              terms that are `paddable`), rather than one by one
template <class T>
struct ScalarLanes {
  static constexpr int width = 16;
  static constexpr int chains = 1;
  static constexpr int rows_at_once = 1;
  static constexpr bool padded_tail = false;
  struct Block {
    T lane[width];
  };
  KOKKOS_INLINE_FUNCTION static void fill(Block& a, T x) {
    for (int l = 0; l < width; ++l) a.lane[l] = x;
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION static void max(Block& a, const F& value, index_t i) {
    for (int l = 0; l < width; ++l) {
      const T v = value(i + l);
      a.lane[l] = v > a.lane[l] ? v : a.lane[l];
    }
  }
  KOKKOS_INLINE_FUNCTION static void max(Block& a, const Block& b) {
    for (int l = 0; l < width; ++l) a.lane[l] = b.lane[l] > a.lane[l] ? b.lane[l] : a.lane[l];
  }
  KOKKOS_INLINE_FUNCTION static T max_lanes(const Block& a) {
    T m = -infinity<T>();
    for (int l = 0; l < width; ++l) m = a.lane[l] > m ? a.lane[l] : m;
    return m;
  }
  KOKKOS_INLINE_FUNCTION static void add(Block& a, const T* w) {
    for (int l = 0; l < width; ++l) a.lane[l] += w[l];
  }
  KOKKOS_INLINE_FUNCTION static T sum_tree(Block& a) {
    for (int half = width / 2; half >= 1; half /= 2)
      for (int l = 0; l < half; ++l) a.lane[l] += a.lane[l + half];
    return a.lane[0];
  }
  template <int N>
  KOKKOS_INLINE_FUNCTION static void max_lanes(const Block (&a)[N], T (&out)[N]) {
    for (int k = 0; k < N; ++k) out[k] = max_lanes(a[k]);
  }
  template <int N>
  KOKKOS_INLINE_FUNCTION static void sum_trees(Block (&a)[N], T (&out)[N]) {
    for (int k = 0; k < N; ++k) out[k] = sum_tree(a[k]);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION static void exp_block(const F& value, index_t i, T m, T* w) {
    for (int l = 0; l < width; ++l) w[l] = exp_nonpositive(value(i + l) - m);
  }
};

/// The maximum of value(i), i in [b, e) (NaN ignored), in two parts: that of the whole blocks of
/// Lanes::width values lane by lane in `lanes`, and that of the rest returned (-inf if none). The
/// blocks run on C independent chains (Lanes::chains); a kernel that takes several rows' maxima one
/// after another may ask for one: the rows' chains overlap, and more cost instructions and stack.
template <class Lanes, class T, int C = Lanes::chains, class F>
KOKKOS_INLINE_FUNCTION T tile_max_lanes(index_t b, index_t e, const F& value, typename Lanes::Block& lanes) {
  constexpr int W = Lanes::width;
  typename Lanes::Block m[C];
  for (int c = 0; c < C; ++c) Lanes::fill(m[c], -infinity<T>());
  const index_t chains_end = b + (e - b) / (C * W) * (C * W), blocks_end = b + (e - b) / W * W;
  index_t i = b;
  for (; i < chains_end; i += C * W)
    for (int c = 0; c < C; ++c) Lanes::max(m[c], value, i + c * W);
  for (; i < blocks_end; i += W) Lanes::max(m[0], value, i);
  for (int h = C / 2; h >= 1; h /= 2)
    for (int c = 0; c < h; ++c) Lanes::max(m[c], m[c + h]);
  T r = -infinity<T>();
  if constexpr (Lanes::padded_tail) {
    if (i < e) Lanes::tail_max(m[0], value, b, i, e);
    i = e;
  }
  lanes = m[0];
  for (; i < e; ++i) {
    const T v = value(i);
    r = v > r ? v : r;
  }
  return r;
}

/// The maximum of value(i), i in [b, e) (NaN ignored, -inf if empty), over Lanes' blocks on C chains.
template <class Lanes, class T, int C = Lanes::chains, class F>
KOKKOS_INLINE_FUNCTION T tile_max(index_t b, index_t e, const F& value) {
  typename Lanes::Block lanes;
  const T rest = tile_max_lanes<Lanes, T, C>(b, e, value, lanes);
  const T m = Lanes::max_lanes(lanes);
  return rest > m ? rest : m;
}

/// The running sums of a tile's weights: whole blocks of terms go to a block of plain partial sums
/// (each adds (e - b) / width terms), the rest to `tail` (compensated; or to the lanes as one more
/// block, Lanes::padded_tail); state() adds the block's
/// tree root last. Keep a tile short: the lanes' sums are not compensated; the tiles' states merge
/// compensated. A kernel that holds the sums of several tiles at once (rows of one tile, several at
/// a time) interleaves their steps.
template <class Lanes, class T>
struct TileSums {
  typename Lanes::Block lanes;
  SoftmaxState<T> tail;

  KOKKOS_INLINE_FUNCTION TileSums() : tail(SoftmaxState<T>::identity()) { Lanes::fill(lanes, T(0)); }

  /// Adds terms(i), i in [b, e), each also handed to store(i, term).
  template <class Terms, class Store>
  KOKKOS_INLINE_FUNCTION void add(index_t b, index_t e, const Terms& terms, const Store& store) {
    constexpr int W = Lanes::width;
    const index_t full = b + (e - b) / W * W;
    for (index_t i = b; i < full; i += W) {
      T w[W];
      terms.template block<Lanes>(i, w);
      for (int l = 0; l < W; ++l) store(i + l, w[l]);
      Lanes::add(lanes, w);
    }
    if constexpr (Lanes::padded_tail && Terms::paddable) {
      if (full < e) {  // the padding's weights are 0: the lanes' sums stay as they are
        T w[W];
        const int first = Lanes::tail_block(terms, b, full, e, w);
        // A loop of fixed length: GCC made one of length e - full a call to memcpy, which kept the
        // block loop's sums and maxima in memory rather than in registers.
        for (int l = 0; l < W; ++l)
          if (l < e - full) store(full + l, w[first + l]);
        Lanes::add(lanes, w);
      }
      return;
    }
    for (index_t i = full; i < e; ++i) {
      const T w = terms(i);
      store(i, w);
      tail.add_term(w);
    }
  }

  /// Adds the weights of value(i), i in [b, e), against the tile's maximum m (NaN ignored), each
  /// also handed to store(i, weight).
  template <class F, class Store>
  KOKKOS_INLINE_FUNCTION void add_weights(T m, index_t b, index_t e, const F& value, const Store& store) {
    if (is_finite(m)) {
      add(b, e, WeightTerms<T, F>{value, m}, store);
    } else {
      add(b, e, SpecialWeightTerms<T, F>{value, m}, store);
    }
  }

  /// add_weights, with the values' plain sum taken in the same loop into value_sum (as tile_sum's,
  /// but the rest after the blocks' tree): a caller that also needs it reads each value once.
  template <class F, class Store>
  KOKKOS_INLINE_FUNCTION void add_weights(T m, index_t b, index_t e, const F& value, const Store& store,
                                          T& value_sum) {
    typename Lanes::Block values;
    Lanes::fill(values, T(0));
    T tail_values = T(0);
    if (is_finite(m)) {
      add(b, e, SummingValues<Lanes, T, WeightTerms<T, F>>{{value, m}, &values, &tail_values}, store);
    } else {
      add(b, e, SummingValues<Lanes, T, SpecialWeightTerms<T, F>>{{value, m}, &values, &tail_values}, store);
    }
    value_sum = Lanes::sum_tree(values) + tail_values;
  }

  /// The state of the tile whose maximum is m: the tail plus the lanes' tree root.
  KOKKOS_INLINE_FUNCTION SoftmaxState<T> state(T m) { return state(m, Lanes::sum_tree(lanes)); }
  /// The same with the lanes' tree root already taken (Lanes::sum_trees for several rows).
  KOKKOS_INLINE_FUNCTION SoftmaxState<T> state(T m, T root) const {
    SoftmaxState<T> sum = tail;
    sum.add_term(root);
    return SoftmaxState<T>::of_weights(m, sum);
  }
};

/// The state of value(i), i in [b, e), against a reference m at least their maximum (NaN ignored):
/// the weights exp(value(i) - m), each also handed to store(i, weight), and m as the state's max.
template <class Lanes, class T, class F, class Store>
KOKKOS_INLINE_FUNCTION SoftmaxState<T> tile_state(T m, index_t b, index_t e, const F& value, const Store& store) {
  TileSums<Lanes, T> sums;
  sums.add_weights(m, b, e, value, store);
  return sums.state(m);
}

/// The same, the tile's maximum found first.
template <class Lanes, class T, class F, class Store>
KOKKOS_INLINE_FUNCTION SoftmaxState<T> tile_state(index_t b, index_t e, const F& value, const Store& store) {
  return tile_state<Lanes, T>(tile_max<Lanes, T>(b, e, value), b, e, value, store);
}

/// Weight terms exp(value(i) - ref) against a reference that the values may exceed, with the
/// values' maximum (NaN ignored) taken in the same loop: whole blocks into `max`, the rest into
/// `tail_max`. exp_nonpositive and the host's vector exps hold for arguments up to about 88 (fp32)
/// as well; RowTiles drops a tile whose arguments exceed RowTiles::slack.
template <class Lanes, class T, class F>
struct WeightsAgainst {
  static constexpr bool paddable = true;  // -inf: neither a maximum nor a weight
  F value;
  T ref;
  typename Lanes::Block* max;
  T* tail_max;
  template <class L>
  KOKKOS_INLINE_FUNCTION void block_of(const T* v, T* w) const {
    Lanes::max(*max, Load<T>{v}, 0);
    Lanes::exp_block(Load<T>{v}, 0, ref, w);
  }
  KOKKOS_INLINE_FUNCTION T operator()(index_t i) const {
    const T v = value(i);
    *tail_max = v > *tail_max ? v : *tail_max;
    return exp_nonpositive(v - ref);
  }
  template <class L>
  KOKKOS_INLINE_FUNCTION void block(index_t i, T* w) const {
    Lanes::max(*max, value, i);
    Lanes::exp_block(value, i, ref, w);
  }
};

/// A row's state built from its tiles in order. A tile is first summed in one pass against the
/// running maximum (its weights and its maximum in the same loop): when no value exceeds the
/// running maximum by more than the slack allowed, its sum joins l with no merge, and l is
/// rescaled once if the tile raised the maximum. A tile that overshoots goes through the tile
/// recurrence against its own maximum (its maximum first, then its weights, then the merge). The
/// caller asks try_running_max(), then calls add_against_running_max, and add_own_max if that one
/// declined.
template <class Lanes, class T>
struct RowTiles {
  /// The slack of tiles whose weights are only summed: weights against the running maximum stay
  /// below e^64, inside every exp's range (fp32's ends near e^88) with room for a tile's sum.
  static constexpr T slack = T(64);
  /// The slack of tiles whose weights are stored for softmax's scale pass (weights below e^16): a
  /// tile whose maximum only slightly exceeds the running one (normally distributed scores, half
  /// the second tiles) is then kept rather than computed twice. The scale pass multiplies the
  /// weights by exp(reference - row maximum) / l; where that factor is below the smallest normal
  /// number it splits it, e^-16 first (scale_pass_beside), so that no weight above 1 meets a
  /// subnormal factor.
  static constexpr T stored_slack = T(16);
  SoftmaxState<T> state = SoftmaxState<T>::identity();
  index_t tiles = 0;
  index_t computed_twice = 0;  ///< tiles tried against the running maximum and declined

  /// Not for the first tile (unless start_at gave it a reference), nor against a maximum that is
  /// not finite, nor once tiles keep overshooting (more than 2 + tiles / 8 declined: then each try
  /// costs a pass).
  KOKKOS_INLINE_FUNCTION bool try_running_max() const {
    return is_finite(state.max) && computed_twice <= 2 + tiles / 8;
  }

  /// Before the first tile [b, e): the largest of 4 of its values spread over it (at most its
  /// maximum) as the running maximum of an empty sum, so that the first tile too is summed in one
  /// pass, its maximum found in the same loop, where it does not overshoot that guess by more than
  /// the slack. A guess that is not finite is not taken.
  template <class F>
  KOKKOS_INLINE_FUNCTION void start_at(index_t b, index_t e, const F& value) {
    if (tiles > 0) return;
    const index_t q = (e - b) / 4;
    const T v[4] = {value(b), value(b + q), value(b + 2 * q), value(e - 1)};
    T guess = v[0];
    for (int i = 1; i < 4; ++i) guess = v[i] > guess ? v[i] : guess;
    if (is_finite(guess)) state = SoftmaxState<T>{guess, T(0), T(0)};
  }

  /// Adds the tile [b, e) against the running maximum, handing store its weights against it, and
  /// returns true with that reference in `ref`; returns false and adds nothing if a value is above
  /// it by more than `allowed` (slack, or stored_slack for stored weights; store may then have been called
  /// with meaningless weights). With `value_sum`, the tile's values summed in the same loop go there
  /// (whether the tile is added or not; as tile_sum's, but the rest after the blocks' tree).
  template <class F, class Store>
  KOKKOS_INLINE_FUNCTION bool add_against_running_max(index_t b, index_t e, const F& value, const Store& store,
                                                      T allowed, T& ref, T* value_sum = nullptr) {
    ref = state.max;
    typename Lanes::Block max;
    Lanes::fill(max, -infinity<T>());
    T tail_max = -infinity<T>();
    TileSums<Lanes, T> sums;
    if (value_sum == nullptr) {
      sums.add(b, e, WeightsAgainst<Lanes, T, F>{value, ref, &max, &tail_max}, store);
    } else {
      typename Lanes::Block values;
      Lanes::fill(values, T(0));
      T tail_values = T(0);
      sums.add(b, e, SummingValues<Lanes, T, WeightsAgainst<Lanes, T, F>>{{value, ref, &max, &tail_max}, &values,
                                                                           &tail_values},
               store);
      *value_sum = Lanes::sum_tree(values) + tail_values;
    }
    const T block_max = Lanes::max_lanes(max);
    const T m = block_max > tail_max ? block_max : tail_max;
    if (m > ref + allowed) {
      ++computed_twice;
      return false;
    }
    state.add_term(sums.state(ref).total());
    if (m > ref) {  // the maximum rose: l = sum exp(x - ref) becomes sum exp(x - m)
      state.rescale(exp_nonpositive(ref - m));
      state.max = m;
    }
    ++tiles;
    return true;
  }

  /// Adds the tile [b, e) through the tile recurrence; returns its maximum (its weights' reference).
  template <class F, class Store>
  KOKKOS_INLINE_FUNCTION T add_own_max(index_t b, index_t e, const F& value, const Store& store) {
    const T m = tile_max<Lanes, T>(b, e, value);
    const SoftmaxState<T> t = tile_state<Lanes, T>(m, b, e, value, store);
    if (tiles == 0) state = t;  // merging into the identity (or start_at's empty sum) would only cost two exps
    else state.merge(t);
    ++tiles;
    return m;
  }
};

/// The sum of value(i), i in [b, e), over Lanes' blocks (the lanes added by their tree; a tile is
/// short, so its plain sum is accurate; tiles' sums are then added compensated).
template <class Lanes, class T, class F>
KOKKOS_INLINE_FUNCTION T tile_sum(index_t b, index_t e, const F& value) {
  constexpr int W = Lanes::width;
  typename Lanes::Block s;
  Lanes::fill(s, T(0));
  const index_t full = b + (e - b) / W * W;
  for (index_t i = b; i < full; i += W) {
    T v[W];
    for (int l = 0; l < W; ++l) v[l] = value(i + l);
    Lanes::add(s, v);
  }
  T r = Lanes::sum_tree(s);
  for (index_t i = full; i < e; ++i) r += value(i);
  return r;
}

}  // namespace kflash::impl
