// Attention's tile step, the one place a tile of scores becomes state: after the backend's product
// S = Q K^T (q pre-scaled), the score stage removes the pairs the mask hides (their score becomes
// -inf, so their weight is exactly 0); the tile's (m, l) and weights follow (tile_state.hpp); the
// row's state absorbs the tile's, and O is updated through OutputFactors (attention_state.hpp).
// The mask has one representation: the range of keys each query row sees.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/tile/tile_state.hpp>

namespace kflash::impl {

/// Keys [begin, end) that a query row sees.
struct KeyRange {
  index_t begin = 0;
  index_t end = 0;
  KOKKOS_INLINE_FUNCTION bool contains(index_t j) const { return begin <= j && j < end; }
  /// The same range within a tile of nk keys from t0, as indices in the tile.
  KOKKOS_INLINE_FUNCTION KeyRange in_tile(index_t t0, index_t nk) const {
    KeyRange r;
    r.begin = begin - t0 < 0 ? 0 : (begin - t0 < nk ? begin - t0 : nk);
    r.end = end - t0 < r.begin ? r.begin : (end - t0 < nk ? end - t0 : nk);
    return r;
  }
};

/// Which keys each query row of a sequence of Nq queries and Nk keys sees: all of them, or with
/// `causal` the keys j <= i + Nk - Nq (aligned bottom-right).
struct KeyMask {
  index_t Nq = 0, Nk = 0;
  bool causal = false;
  KOKKOS_INLINE_FUNCTION KeyRange keys_of(index_t i) const {
    KeyRange r;
    r.end = causal ? i + (Nk - Nq) + 1 : Nk;
    r.end = r.end < 0 ? 0 : (r.end < Nk ? r.end : Nk);
    return r;
  }
};

/// The score stage for key j of a row that sees `keys`.
template <class T>
KOKKOS_INLINE_FUNCTION T score_stage(T score, const KeyRange& keys, index_t j) {
  return keys.contains(j) ? score : -infinity<T>();
}

/// A row's step over one tile whose nk scores score(j) are in: the score stage (store(j, s) puts
/// the masked scores back), the tile's state by Lanes with its weights handed to store, and the
/// merge into the row's state. Returns the factors that update the row's O.
template <class Lanes, class T, class Score, class Store>
KOKKOS_INLINE_FUNCTION OutputFactors<T> tile_step(SoftmaxState<T>& row, const KeyRange& keys, index_t nk,
                                                  const Score& score, const Store& store) {
  if (keys.begin > 0 || keys.end < nk)  // some pairs hidden
    for (index_t j = 0; j < nk; ++j) store(j, score_stage(score(j), keys, j));
  return OutputFactors<T>::merge(row, tile_state<Lanes, T>(index_t(0), nk, score, store));
}

}  // namespace kflash::impl
