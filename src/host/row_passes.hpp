// The host row kernels over contiguous rows: the state pass (tile by tile, through the tile
// recurrence on vector lanes), the write passes (plain or non-temporal stores), rows of one tile
// taken several at a time, and the pairing of one row's write pass with the next row's state pass.
// Rows stored as 16-bit B go through the same passes with T = float: read widened as they load
// (Elements, Operand), written rounded once (Narrowing), with no pass of their own.
#pragma once

#include "vector_lanes.hpp"

#include <kflash/impl/host/host_kernels.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace kflash::impl::host::internal {

/// The write passes: y[i] = f(x[i]), i in [0, n); with `stream`, through non-temporal stores.
template <class T>
struct ProbOf {
  SoftmaxNormalizer<T> norm;
  T operator()(T v) const { return norm.prob(v); }
};
template <class T>
struct LogProbOf {
  SoftmaxNormalizer<T> norm;
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
template <class T, int VB, int N>
inline void apply_lanes(const ProbOf<T>& f, const T* v, T* w) {  // norm.prob with the vector exp
  LaneExp<T, VB>::template apply<N>(v, f.norm.shift, w);
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

/// The write pass y[i] = f(x[i]), i in [0, n), x stored as B, y as Y (T, or 16-bit: each output
/// rounded once; those take no non-temporal stores).
template <class T, int VB, class B, class Y, class F>
inline void write_pass(const B* x, Y* y, index_t n, const F& f, bool stream, bool fence = true) {
  using S = Stream<T, VB>;
  using In = Operand<T, VB, B>;
  index_t i = 0;
  if constexpr (std::is_same<Y, T>::value) {
    if (stream && S::available) {
      for (; i < n && reinterpret_cast<std::uintptr_t>(y + i) % VB != 0; ++i) y[i] = f(In::element(x[i]));
      constexpr index_t group = StreamAhead<T, VB>::group, ahead = StreamAhead<T, VB>::ahead;
      for (; i + ahead + group <= n; i += group) {
        prefetch_lines(x + i + ahead, group);
        write_vectors<T, VB, S>(x, y, i, i + group, f);
      }
      i = write_vectors<T, VB, S>(x, y, i, n, f);
      if (fence) S::fence();
    } else {
      i = write_vectors<T, VB, Vec<T, VB>>(x, y, i, n, f);
    }
  } else {
    i = write_vectors<T, VB, Narrowing<VB>>(x, y, i, n, f);
  }
  for (; i < n; ++i) y[i] = Y(f(In::element(x[i])));
}

/// Asks for the tile after next of x[0, n) (from x + e on) while this one is computed: the tile
/// loops alternate a memory-bound pass (the maximum) with a compute-bound one (the weights).
template <class T>
inline void prefetch_ahead(const T* x, index_t e, index_t n) {
#if defined(__GNUC__) || defined(__clang__)
  constexpr index_t line = 64 / sizeof(T);
  const index_t b = e + HostTraits::tile;
  const index_t end = b + HostTraits::tile < n ? b + HostTraits::tile : n;
#if !defined(__CUDACC__) && !defined(__clang__)
#pragma GCC unroll 8  // one prefetch per line: the rolled loop spends 4 more instructions on each
#endif
  for (index_t i = b; i < end; i += line) __builtin_prefetch(x + i);
#else
  (void)x, (void)e, (void)n;
#endif
}

/// Stores weights into a tile buffer (buf[i - b]), for a state pass that writes over its values.
template <class T>
struct TileBufferStore {
  T* buf;
  index_t b;
  KOKKOS_INLINE_FUNCTION void operator()(index_t i, T w) const { buf[i - b] = w; }
};

/// The state pass over x[0, n) (stored as B), a tile at a time, through RowTiles (tile_state.hpp).
/// With w, the weights go to w[0, n) and tile t's reference (the running maximum before it, or its
/// own maximum) to tile_max[t]; w may be x (in place): a tile tried against the running maximum
/// then keeps its weights in a buffer until it is kept. With sum_logits, the sum of x goes to
/// `logits` (a compensated sum of the tiles' sums, each taken while its tile is in the cache).
template <class T, int VB, class B = T>
struct StatePass {
  const B* x;
  index_t n;
  T* w = nullptr;
  T* tile_max = nullptr;
  bool sum_logits = false;
  RowTiles<VectorLanes<T, VB>, T> rows = {};
  SoftmaxState<T> logits = SoftmaxState<T>::identity();

  const SoftmaxState<T>& state() const { return rows.state; }

  /// The tile from b (a multiple of HostTraits::tile).
  void tile(index_t b) {
    const index_t e = b + HostTraits::tile < n ? b + HostTraits::tile : n;
    prefetch_ahead(x, e, n);
    const Elements<T, B> value{x};
    bool kept = false;
    if (b == 0) rows.start_at(b, e, value);
    if (rows.try_running_max()) {
      T ref;
      if (w == nullptr) {
        kept = rows.add_against_running_max(b, e, value, NoStore<T>{}, rows.slack, ref);
      } else if (!in_place()) {
        kept = rows.add_against_running_max(b, e, value, Store<T>{w}, rows.stored_slack, ref);
      } else {
        T buf[HostTraits::tile];
        kept = rows.add_against_running_max(b, e, value, TileBufferStore<T>{buf, b}, rows.stored_slack, ref);
        if (kept)
          for (index_t i = b; i < e; ++i) w[i] = buf[i - b];
      }
      if (kept && w != nullptr) tile_max[b / HostTraits::tile] = ref;
    }
    if (!kept) {
      const T m =
          w != nullptr ? rows.add_own_max(b, e, value, Store<T>{w}) : rows.add_own_max(b, e, value, NoStore<T>{});
      if (w != nullptr) tile_max[b / HostTraits::tile] = m;
    }
    if (sum_logits) logits.add_term(impl::tile_sum<VectorLanes<T, VB>, T>(b, e, value));
  }
  void all() {
    for (index_t b = 0; b < n; b += HostTraits::tile) tile(b);
  }
  bool in_place() const {
    if constexpr (std::is_same<T, B>::value) return w == x;
    return false;
  }
};

template <class T, int VB, class B = T>
SoftmaxState<T> row_state(const B* x, index_t n) {
  StatePass<T, VB, B> pass{x, n};
  pass.all();
  return pass.state();
}

/// The LogitStats of each row of blk. Rows of one tile go short_group at a time, each step (the
/// maxima, the logits' sums, the weights' sums) for all of them before the next, as in short_rows:
/// the rows' chains of dependent operations overlap.
template <class T, int VB, class B = T>
void run_logit_rows(const LogitBlock<T, B>& blk) {
  const index_t n = blk.cols;
  if (n > HostTraits::tile) {
    for (index_t r = 0; r < blk.rows; ++r) {
      StatePass<T, VB, B> pass{blk.x + r * blk.ldx, n, nullptr, nullptr, true};
      pass.all();
      blk.out[r * blk.ldout] = LogitStats<T>{pass.state(), pass.logits, T(0)};
    }
    return;
  }
  constexpr index_t group = HostTraits::short_group;
  using Lanes = VectorLanes<T, VB>;
  for (index_t r0 = 0; r0 < blk.rows; r0 += group) {
    const index_t g = blk.rows - r0 < group ? blk.rows - r0 : group;
    T m[group], logits[group];
    for (index_t i = 0; i < g; ++i) m[i] = tile_max<Lanes, T>(0, n, Elements<T, B>{blk.x + (r0 + i) * blk.ldx});
    for (index_t i = 0; i < g; ++i) logits[i] = tile_sum<Lanes, T>(0, n, Elements<T, B>{blk.x + (r0 + i) * blk.ldx});
    TileSums<Lanes, T> sums[group];
    for (index_t i = 0; i < g; ++i)
      sums[i].add_weights(m[i], 0, n, Elements<T, B>{blk.x + (r0 + i) * blk.ldx}, NoStore<T>{});
    // Written member by member: a whole LogitStats would be assembled on the stack by scalar stores
    // and copied out by vector loads that wait for them (about 9 ns a row).
    for (index_t i = 0; i < g; ++i) {
      LogitStats<T>& s = blk.out[(r0 + i) * blk.ldout];
      s.state = sums[i].state(m[i]);
      s.total = SoftmaxState<T>::identity();
      s.add_logits(logits[i]);
      s.target_logit = T(0);
    }
  }
}

template <class T, int VB, class B = T>
void write_row(RowOp op, const B* x, B* y, index_t n, const SoftmaxNormalizer<T>& norm, bool stream) {
  if (op == RowOp::softmax) {
    write_pass<T, VB>(x, y, n, ProbOf<T>{norm}, stream);
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

/// Rows [r0, r0 + g) of blk (g <= HostTraits::short_group), each of at most one tile: their
/// maxima, then their weights' sums (softmax's weights go to y, or to a float buffer for 16-bit
/// rows), then their states, then the logs that logsumexp and log_softmax need, taken together in
/// vectors (log_of_total), then their outputs. Each step's chains of dependent operations are
/// short, and the rows' chains overlap. Rows stored as 16-bit B are read widened as they load.
template <class T, int VB, class B = T>
void short_rows(const RowBlock<T, B>& blk, index_t r0, index_t g) {
  constexpr index_t group = HostTraits::short_group;
  constexpr bool widened = !std::is_same<T, B>::value;
  using Lanes = VectorLanes<T, VB>;
  const index_t n = blk.cols;
  const bool softmax = blk.op == RowOp::softmax;
  alignas(VB) T buffer[widened ? group * HostTraits::tile : 1];
  const B* x[group];
  B* y[group];
  T* w[group];
  T m[group];
  for (index_t i = 0; i < g; ++i) {
    x[i] = blk.x + (r0 + i) * blk.ldx;
    y[i] = softmax || blk.op == RowOp::log_softmax ? blk.y + (r0 + i) * blk.ldy : nullptr;
    if constexpr (widened) w[i] = buffer + i * n;
    else w[i] = y[i];
    m[i] = tile_max<Lanes, T>(0, n, Elements<T, B>{x[i]});
  }
  TileSums<Lanes, T> sums[group];
  for (index_t i = 0; i < g; ++i) {
    if (softmax) {
      sums[i].add_weights(m[i], 0, n, Elements<T, B>{x[i]}, Store<T>{w[i]});
    } else {
      sums[i].add_weights(m[i], 0, n, Elements<T, B>{x[i]}, NoStore<T>{});
    }
  }
  SoftmaxState<T> s[group];
  for (index_t i = 0; i < g; ++i) s[i] = sums[i].state(m[i]);
  if (softmax) {
    for (index_t i = 0; i < g; ++i) {
      const SoftmaxNormalizer<T> norm(s[i]);
      if constexpr (widened) {
        write_pass<T, VB>(w[i], y[i], n, Scaled<T>{norm.inv_sum}, false);  // norm.prob_of_weight, rounded
      } else {
        for (index_t j = 0; j < n; ++j) y[i][j] = norm.prob_of_weight(y[i][j]);
      }
    }
    return;
  }
  double l[group], log_l[group];
  bool in_range[group];
  for (index_t i = 0; i < group; ++i) {
    const double total = i < g ? double(s[i].total()) : 1.0;
    in_range[i] = in_log_of_total_range(total);
    l[i] = in_range[i] ? total : 1.0;
  }
  for (index_t i = 0; i < group; ++i) log_l[i] = log_of_total(l[i]);
  for (index_t i = 0; i < g; ++i)  // totals outside its range (an empty row, NaN, fp64 beyond 2^1023)
    if (!in_range[i]) log_l[i] = double(impl::log(s[i].total()));
  for (index_t i = 0; i < g; ++i) {
    if (blk.op == RowOp::logsumexp) {
      blk.out[(r0 + i) * blk.ldout] = s[i].logsumexp(log_l[i]);
    } else {
      const SoftmaxNormalizer<T> norm(s[i], Normalize::log_prob, T(log_l[i]));
      write_pass<T, VB>(x[i], y[i], n, LogProbOf<T>{norm}, false);
    }
  }
}

/// write_pass over x[0, n) a tile at a time, each tile followed by the same tile of `beside`'s
/// state pass (if any; its row has n elements too). With `stream`, the write pass's tiles start
/// where y is aligned (after the first): each tile then stores vectors only.
template <class T, int VB, class B, class F>
void write_pass_beside(const B* x, B* y, index_t n, const F& f, bool stream, StatePass<T, VB, B>* beside) {
  if (beside == nullptr) {
    write_pass<T, VB>(x, y, n, f, stream);
    return;
  }
  index_t head = 0;
  while (stream && head < n && reinterpret_cast<std::uintptr_t>(y + head) % VB != 0) ++head;
  index_t wb = 0;
  for (index_t b = 0; b < n; b += HostTraits::tile) {
    const index_t we = b + HostTraits::tile + head < n ? b + HostTraits::tile + head : n;
    write_pass<T, VB>(x + wb, y + wb, we - wb, f, stream, false);
    wb = we;
    beside->tile(b);
  }
  if (stream) Stream<T, VB>::fence();
}

/// softmax's write pass after a state pass that stored its weights (`done`): y = w exp(tile max -
/// row max) / l a tile at a time, each tile followed by the same tile of `beside`'s state pass (if
/// any; its row has n elements too, and its weights may go where done's were: each tile is
/// scaled before `beside` computes it). y may be done's w (in place).
template <class T, int VB, class B>
void scale_pass_beside(const StatePass<T, VB, B>& done, B* y, bool stream, StatePass<T, VB, B>* beside) {
  using Tiles = decltype(done.rows);
  const T inv_sum = SoftmaxNormalizer<T>(done.state()).inv_sum;
  const T row_max = done.state().max;
  for (index_t b = 0; b < done.n; b += HostTraits::tile) {
    const index_t e = b + HostTraits::tile < done.n ? b + HostTraits::tile : done.n;
    const T ref = done.tile_max[b / HostTraits::tile];
    const T f = SoftmaxState<T>::weight(ref, row_max) * inv_sum;
    if (f < std::numeric_limits<T>::min() && is_finite(row_max)) {
      // A weight up to e^stored_slack times a subnormal (or flushed) factor would lose the
      // probabilities down to the smallest normal number: the weights are scaled down by
      // e^-stored_slack first, then by the factor that much larger (still at most 1: f is tiny).
      const T first = exp_nonpositive(-Tiles::stored_slack);
      const T factor = exp_nonpositive(ref - row_max + Tiles::stored_slack) * inv_sum;
      write_pass<T, VB>(done.w + b, y + b, e - b, ScaledTwice<T>{first, factor}, stream, false);
    } else {
      write_pass<T, VB>(done.w + b, y + b, e - b, Scaled<T>{f}, stream, false);
    }
    if (beside != nullptr) beside->tile(b);
  }
  if (stream) Stream<T, VB>::fence();
}

/// Whole rows (rows stored as 16-bit B read widened as they load; softmax's weights of their rows
/// longer than a tile recomputed or in blk.weights).
template <class T, int VB, class B = T>
void run_rows(const RowBlock<T, B>& blk) {
  const index_t n = blk.cols;
  if (n <= HostTraits::tile) {
    for (index_t r = 0; r < blk.rows; r += HostTraits::short_group)
      short_rows<T, VB>(blk, r, blk.rows - r < HostTraits::short_group ? blk.rows - r : HostTraits::short_group);
    return;
  }
  if constexpr (std::is_same<T, B>::value) {
    if (blk.op == RowOp::softmax && blk.weights_at == WeightsAt::output &&
        n * index_t(sizeof(T)) <= HostTraits::stored_weights_bytes) {  // the room of tile_max below
      // One exp per element: the weights in y, scaled in place while the row is still in cache.
      T tile_max[HostTraits::stored_weights_bytes / sizeof(T) / HostTraits::tile];
      for (index_t r = 0; r < blk.rows; ++r) {
        T* y = blk.y + r * blk.ldy;
        StatePass<T, VB> pass{blk.x + r * blk.ldx, n, y, tile_max};
        pass.all();
        scale_pass_beside<T, VB, T>(pass, y, false, nullptr);
      }
      return;
    }
  }
  // The state pass of each row, then its write pass (softmax, log_softmax). The write pass of row r
  // runs a tile at a time alongside the state pass of row r + 1: the reads of one and the writes
  // of the other share the memory system, instead of taking turns.
  // softmax rows with WeightsAt::scratch keep their weights there (one exp per element). One row's
  // room is enough: each tile of row r is scaled into y before row r + 1's tile overwrites it.
  if (blk.rows <= 0) return;
  const bool stored = blk.op == RowOp::softmax && blk.weights_at == WeightsAt::scratch;
  auto pass_of = [&](index_t r) {
    return StatePass<T, VB, B>{blk.x + r * blk.ldx, n, stored ? blk.weights : nullptr,
                               stored ? blk.weights + n : nullptr};
  };
  StatePass<T, VB, B> next = pass_of(0);
  next.all();
  for (index_t r = 0; r < blk.rows; ++r) {
    const B* x = blk.x + r * blk.ldx;
    const StatePass<T, VB, B> done = next;
    const SoftmaxState<T> s = done.state();
    const bool more = r + 1 < blk.rows;
    if (more) next = pass_of(r + 1);
    if (stored) {
      scale_pass_beside<T, VB>(done, blk.y + r * blk.ldy, blk.stream, more ? &next : nullptr);
      continue;
    }
    if (blk.op == RowOp::logsumexp) {
      blk.out[r * blk.ldout] = s.logsumexp();
      if (more) next.all();
      continue;
    }
    const SoftmaxNormalizer<T> norm(s, blk.op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
    B* y = blk.y + r * blk.ldy;
    if (blk.op == RowOp::softmax) {
      write_pass_beside<T, VB>(x, y, n, ProbOf<T>{norm}, blk.stream, more ? &next : nullptr);
    } else {
      write_pass_beside<T, VB>(x, y, n, LogProbOf<T>{norm}, blk.stream, more ? &next : nullptr);
    }
  }
}

}  // namespace kflash::impl::host::internal
