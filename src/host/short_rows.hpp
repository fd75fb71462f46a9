// softmax, log_softmax and logsumexp over rows of at most one tile (16-bit rows: softmax's of at
// most HostTraits::short_row elements, log_softmax's and logsumexp's of any length), a group of rows
// at a time: each step runs for every row of the group before the next, so the rows' chains of
// dependent operations overlap. Rows stored as 16-bit B are read widened as they load and written
// rounded once.
#pragma once

#include "write_passes.hpp"

#include <type_traits>

namespace kflash::impl::host::internal {

/// The rows short_rows takes at a time: short_group, fewer where rows are longer than a tile, so
/// that the group's widened rows fit its buffer of short_group tiles (one where even one does not:
/// log_softmax's and logsumexp's rows, which keep no weights). softmax's groups hold at most
/// HostTraits::short_softmax_elements elements, or two rows where one row holds no more than that
/// (two rows' chains of dependent operations overlap), or one longer row.
constexpr index_t short_rows_group(RowOp op, index_t n) {
  constexpr index_t group = HostTraits::short_group, weights = HostTraits::short_softmax_elements;
  const index_t buffered =
      n <= HostTraits::tile ? group : n >= group * HostTraits::tile ? 1 : group * HostTraits::tile / n;
  if (op != RowOp::softmax || n * buffered <= weights) return buffered;
  const index_t by_weights = n > weights ? 1 : weights / n < 2 ? 2 : weights / n;
  return by_weights < buffered ? by_weights : buffered;
}

/// Whether op's rows of n 16-bit values take an exp shorter than float's where their 16-bit outputs
/// allow it (ExpAccuracy; the accuracy is the caller's). softmax's weights: each is an output alone.
/// log_softmax's sums in rows of at most a tile, whose maximum m is found before them: exp(m - m)
/// is exactly 1 in every exp, so an exp within d relative puts l = sum exp(x - m) within d (l - 1)
/// and log l within d (l - 1) / l <= d log l, and log l <= |x - m - log l| for every output: each
/// output stays within d of itself, far below half a 16-bit ulp. (Against a reference other than
/// the maximum, log l would move by up to d itself: more than the output x - m - log l where one
/// value dominates the row. logsumexp's lse and cross-entropy's sums are outputs or feed one.)
constexpr bool short_exp_takes(RowOp op, index_t n) {
  return op == RowOp::softmax || (op == RowOp::log_softmax && n <= HostTraits::tile);
}

/// The maximum of a row of n values of a group whose maxima are taken one after another: rows of at
/// most Lanes::chains blocks on one chain (the rows' chains overlap; more chains only add
/// instructions and stack), longer ones on Lanes::chains.
template <class Lanes, class T, class F>
T group_row_max(index_t n, const F& value) {
  return n <= Lanes::chains * Lanes::width ? tile_max<Lanes, T, 1>(0, n, value) : tile_max<Lanes, T>(0, n, value);
}

/// write_pass over a row longer than a tile, 4 tiles at a time, each followed by prefetches into
/// L2 of the same elements of `ahead` (the row the next group reads in this one's place; nullptr if
/// none): the next group's reads from memory overlap this row's writes instead of following them.
/// Into L2 only: L1 holds the group's buffer and rows. Rows of at most 4 tiles take none: the
/// hardware's prefetchers keep up with rows that short (docs/benchmarks.md has the figures).
template <class T, int VB, class X, class Y, class F, class P>
void write_pass_ahead(const X* x, Y* y, index_t n, const F& f, const P* ahead, bool stream) {
  constexpr index_t step = 4 * HostTraits::tile;
  if (n <= step) ahead = nullptr;
  for (index_t b = 0; b < n; b += step) {
    const index_t e = b + step < n ? b + step : n;
    write_pass<T, VB>(x + b, y + b, e - b, f, stream, false);
    if (ahead != nullptr) prefetch_lines<2>(ahead + b, e - b);
  }
  if (stream) Stream<T, VB>::fence();
}

/// Rows [r0, r0 + g) of blk (g <= short_rows_group(blk.op, blk.cols)), as in the file's comment:
/// their maxima, then their weights' sums (softmax's weights go to y, or to a float buffer for 16-bit
/// rows; 16-bit rows longer than a tile take both in one pass, below), then their states, then
/// the logs that logsumexp and log_softmax need, taken together in vectors (log_of_total), then
/// their outputs. Each step's chains of dependent operations are short, and the rows' chains
/// overlap. Rows stored as 16-bit B are read widened as they load;
/// softmax's weights and log_softmax's sums are computed by A's exp (short_exp_takes).
template <class T, int VB, class B = T, ExpAccuracy A = ExpAccuracy::full>
void short_rows(const RowBlock<T, B>& blk, index_t r0, index_t g) {
  constexpr index_t group = HostTraits::short_group;
  constexpr bool widened = !std::is_same<T, B>::value;
  using Lanes = VectorLanes<T, VB, A>;
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
    if constexpr (widened) w[i] = softmax ? buffer + i * n : nullptr;
    else w[i] = y[i];
  }
  SoftmaxState<T> s[group];
  const bool guessed = widened && n > HostTraits::tile;  // m: the weights' references
  const bool stream = blk.stream && n > HostTraits::tile;
  if (guessed) {
    // 16-bit rows longer than a tile: each row in one pass against a guess of its maximum, as the
    // tile loop's first tile (RowTiles: the maximum found in the same loop, the row computed again
    // against its own maximum where it overshoots the guess by more than the slack); the exps then
    // overlap the row's reads instead of following a pass that only reads. softmax's weights are
    // against that reference, scaled by TileFactor. Rows longer than short_row (log_softmax's and
    // logsumexp's only: m is then no one's reference) go in segments of short_row, each as the tile
    // loop's tiles: a segment's lanes sum at most short_row / width weights, the segments' sums are
    // added compensated.
    using Tiles = RowTiles<Lanes, T>;
    for (index_t i = 0; i < g; ++i) {
      const Elements<T, B> value{x[i]};
      Tiles tiles;
      tiles.start_at(0, n, value);
      for (index_t b = 0; b < n; b += HostTraits::short_row) {
        const index_t e = b + HostTraits::short_row < n ? b + HostTraits::short_row : n;
        bool kept = false;
        if (tiles.try_running_max())
          kept = softmax ? tiles.add_against_running_max(b, e, value, Store<T>{w[i]}, Tiles::stored_slack, m[i])
                         : tiles.add_against_running_max(b, e, value, NoStore<T>{}, Tiles::slack, m[i]);
        if (!kept)
          m[i] = softmax ? tiles.add_own_max(b, e, value, Store<T>{w[i]}) : tiles.add_own_max(b, e, value, NoStore<T>{});
      }
      s[i] = tiles.state;
    }
  } else {
    for (index_t i = 0; i < g; ++i) m[i] = group_row_max<Lanes, T>(n, Elements<T, B>{x[i]});
    TileSums<Lanes, T> sums[group];
    for (index_t i = 0; i < g; ++i) {
      if (softmax) {
        sums[i].add_weights(m[i], 0, n, Elements<T, B>{x[i]}, Store<T>{w[i]});
      } else {
        sums[i].add_weights(m[i], 0, n, Elements<T, B>{x[i]}, NoStore<T>{});
      }
    }
    for (index_t i = 0; i < g; ++i) s[i] = sums[i].state(m[i]);
  }
  if (softmax) {
    // The row the next group takes in row i's place, for write_pass_ahead (softmax's only: with the
    // same prefetches log_softmax's write pass, which reads x again, ran slower).
    auto ahead = [&](index_t i) { return r0 + g + i < blk.rows ? blk.x + (r0 + g + i) * blk.ldx : nullptr; };
    for (index_t i = 0; i < g; ++i) {
      const SoftmaxNormalizer<T> norm(s[i]);
      if constexpr (widened) {
        if (!guessed) {
          write_pass<T, VB>(w[i], y[i], n, Scaled<T>{norm.inv_sum}, false);  // norm.prob_of_weight, rounded
          continue;
        }
        const TileFactor<T, RowTiles<Lanes, T>> f(m[i], s[i].max, norm.inv_sum);
        if (f.twice) write_pass_ahead<T, VB>(w[i], y[i], n, ScaledTwice<T>{f.first, f.factor}, ahead(i), stream);
        else write_pass_ahead<T, VB>(w[i], y[i], n, Scaled<T>{f.factor}, ahead(i), stream);
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
      write_pass<T, VB>(x[i], y[i], n, LogProbOf<T>{norm}, stream);
    }
  }
}

}  // namespace kflash::impl::host::internal
