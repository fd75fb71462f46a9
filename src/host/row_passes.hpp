// The host row kernels over contiguous rows: the state pass (tile by tile, through the tile
// recurrence on vector lanes), the pairing of one row's write pass with the next row's state pass,
// and the rows' statistics for cross-entropy. Softmax's family on rows of one tile (16-bit rows:
// softmax's up to HostTraits::short_row, the others' all) is in short_rows.hpp (rows of at most 16
// values on AVX-512, 16 rows at a time: lane_rows.hpp), the write passes in write_passes.hpp. Rows
// stored as 16-bit B go through the same passes with T = float: read widened as they load
// (Elements, Operand), written rounded once (Narrowing), with no pass of their own.
#pragma once

#include "lane_rows.hpp"
#include "short_rows.hpp"
#include "write_passes.hpp"

#include <kflash/impl/host/host_kernels.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace kflash::impl::host::internal {

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
/// `logits` (a compensated sum of the tiles' sums, each taken in the loop of the tile's weights
/// against the running maximum, or while the tile is in the cache where there is none). The
/// weights are computed by A's exp.
template <class T, int VB, class B = T, ExpAccuracy A = ExpAccuracy::full>
struct StatePass {
  using Lanes = VectorLanes<T, VB, A>;
  const B* x;
  index_t n;
  T* w = nullptr;
  T* tile_max = nullptr;
  bool sum_logits = false;
  RowTiles<Lanes, T> rows = {};
  SoftmaxState<T> logits = SoftmaxState<T>::identity();

  const SoftmaxState<T>& state() const { return rows.state; }

  /// The tile from b (a multiple of HostTraits::tile).
  void tile(index_t b) {
    const index_t e = b + HostTraits::tile < n ? b + HostTraits::tile : n;
    prefetch_ahead(x, e, n);
    const Elements<T, B> value{x};
    bool kept = false, summed = false;
    T tile_logits = T(0);
    if (b == 0) rows.start_at(b, e, value);
    if (rows.try_running_max()) {
      T ref;
      if (w == nullptr) {
        summed = sum_logits;
        kept = rows.add_against_running_max(b, e, value, NoStore<T>{}, rows.slack, ref,
                                            summed ? &tile_logits : nullptr);
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
    if (sum_logits) logits.add_term(summed ? tile_logits : impl::tile_sum<Lanes, T>(b, e, value));
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
/// maxima, the weights' sums with the logits' sums where asked) for all of them before the next, as
/// in short_rows: the rows' chains of dependent operations overlap.
template <class T, int VB, class B = T>
void run_logit_rows(const LogitBlock<T, B>& blk) {
  const index_t n = blk.cols;
  if (n > HostTraits::tile) {
    for (index_t r = 0; r < blk.rows; ++r) {
      StatePass<T, VB, B> pass{blk.x + r * blk.ldx, n, nullptr, nullptr, blk.sum_logits};
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
    for (index_t i = 0; i < g; ++i) m[i] = group_row_max<Lanes, T>(n, Elements<T, B>{blk.x + (r0 + i) * blk.ldx});
    TileSums<Lanes, T> sums[group];
    for (index_t i = 0; i < g; ++i) {
      const Elements<T, B> value{blk.x + (r0 + i) * blk.ldx};
      logits[i] = T(0);
      if (blk.sum_logits) sums[i].add_weights(m[i], 0, n, value, NoStore<T>{}, logits[i]);
      else sums[i].add_weights(m[i], 0, n, value, NoStore<T>{});
    }
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

/// write_pass over x[0, n) a tile at a time, each tile followed by the same tile of `beside`'s
/// state pass (if any; its row has n elements too). With `stream`, the write pass's tiles start
/// where y is aligned (after the first): each tile then stores vectors only.
template <class T, int VB, class B, class F, ExpAccuracy A>
void write_pass_beside(const B* x, B* y, index_t n, const F& f, bool stream, StatePass<T, VB, B, A>* beside) {
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
/// row max) / l a tile at a time, each tile after the same tile of `beside`'s state pass (if any;
/// its row has n elements too, its weights stored elsewhere). Each tile's factor is computed a tile
/// ahead (the first before `beside`'s first tile): its exp's latency overlaps a tile's passes
/// instead of holding up the tile's scaling. y may be done's w (in place).
template <class T, int VB, class B, ExpAccuracy A>
void scale_pass_beside(const StatePass<T, VB, B, A>& done, B* y, bool stream, StatePass<T, VB, B, A>* beside) {
  using Factor = TileFactor<T, decltype(done.rows)>;
  const T inv_sum = SoftmaxNormalizer<T>(done.state()).inv_sum;
  const T row_max = done.state().max;
  Factor f(done.tile_max[0], row_max, inv_sum);
  for (index_t b = 0; b < done.n; b += HostTraits::tile) {
    const index_t e = b + HostTraits::tile < done.n ? b + HostTraits::tile : done.n;
    if (beside != nullptr) beside->tile(b);
    const Factor next = e < done.n ? Factor(done.tile_max[e / HostTraits::tile], row_max, inv_sum) : f;
    if (f.twice) {
      write_pass<T, VB>(done.w + b, y + b, e - b, ScaledTwice<T>{f.first, f.factor}, stream, false);
    } else {
      write_pass<T, VB>(done.w + b, y + b, e - b, Scaled<T>{f.factor}, stream, false);
    }
    f = next;
  }
  if (stream) Stream<T, VB>::fence();
}

/// Whole rows (rows stored as 16-bit B read widened as they load; softmax's weights of their rows
/// longer than a tile recomputed or in blk.weights). A: the accuracy of the exp that softmax's
/// weights and, in rows of at most a tile, log_softmax's sums take (short_exp_takes); the other rows
/// take ExpAccuracy::full.
template <class T, int VB, class B = T, ExpAccuracy A = ExpAccuracy::full>
void run_rows(const RowBlock<T, B>& blk) {
  const index_t n = blk.cols;
  if constexpr (A != ExpAccuracy::full) {
    if (!short_exp_takes(blk.op, n)) return run_rows<T, VB, B>(blk);
  }
  // 16-bit rows: softmax's up to short_row (its weights in short_rows' buffer), log_softmax's and
  // logsumexp's of any length (one at a time when long; no weights kept).
  const bool widened = !std::is_same<T, B>::value;
  if (n <= HostTraits::tile || (widened && (blk.op != RowOp::softmax || n <= HostTraits::short_row))) {
    const index_t group = short_rows_group(blk.op, n);
    auto rows_from = [&](index_t r0, index_t r1) {
      for (index_t r = r0; r < r1; r += group) short_rows<T, VB, B, A>(blk, r, r1 - r < group ? r1 - r : group);
    };
    index_t r = 0;
#ifdef KFLASH_IMPL_LANE_ROWS
    if constexpr (VB == 64 && std::is_same<T, float>::value) {  // a row in each lane (lane_rows.hpp)
      for (; n <= lane_rows_group && r + lane_rows_group <= blk.rows; r += lane_rows_group) {
        const bool done = n <= 8 ? lane_rows<8, B, A>(blk, r) : lane_rows<16, B, A>(blk, r);
        if (!done) rows_from(r, r + lane_rows_group);
      }
    }
#endif
    rows_from(r, blk.rows);
    return;
  }
  if constexpr (std::is_same<T, B>::value) {
    if (blk.op == RowOp::softmax && blk.weights_at == WeightsAt::output &&
        n * index_t(sizeof(T)) <= HostTraits::stored_weights_bytes) {  // the room of tile_max below
      // One exp per element: the weights in y, scaled in place while the row is still in cache.
      T tile_max[HostTraits::stored_weights_bytes / sizeof(T) / HostTraits::tile];
      for (index_t r = 0; r < blk.rows; ++r) {
        T* y = blk.y + r * blk.ldy;
        StatePass<T, VB, T, A> pass{blk.x + r * blk.ldx, n, y, tile_max};
        pass.all();
        scale_pass_beside<T, VB, T, A>(pass, y, false, nullptr);
      }
      return;
    }
  }
  // The state pass of each row, then its write pass (softmax, log_softmax). The write pass of row r
  // runs a tile at a time alongside the state pass of row r + 1: the reads of one and the writes
  // of the other share the memory system, instead of taking turns.
  // softmax rows with WeightsAt::scratch keep their weights there (one exp per element), even rows
  // in its first half, odd rows in its second (weights_elements).
  if (blk.rows <= 0) return;
  const bool stored = blk.op == RowOp::softmax && blk.weights_at == WeightsAt::scratch;
  auto pass_of = [&](index_t r) {
    T* w = stored ? blk.weights + r % 2 * row_weights_elements(n) : nullptr;
    return StatePass<T, VB, B, A>{blk.x + r * blk.ldx, n, w, stored ? w + n : nullptr};
  };
  StatePass<T, VB, B, A> next = pass_of(0);
  next.all();
  for (index_t r = 0; r < blk.rows; ++r) {
    const B* x = blk.x + r * blk.ldx;
    const StatePass<T, VB, B, A> done = next;
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
      write_pass_beside<T, VB>(x, y, n, ProbOf<T, A>{norm}, blk.stream, more ? &next : nullptr);
    } else {
      write_pass_beside<T, VB>(x, y, n, LogProbOf<T>{norm}, blk.stream, more ? &next : nullptr);
    }
  }
}

}  // namespace kflash::impl::host::internal
