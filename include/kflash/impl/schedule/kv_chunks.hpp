// The K/V tiles of attention's device schedules (team_attention.hpp, warp_attention.hpp) as a team's
// threads carry them from global memory to scratch by 16-byte chunks: loaded into registers while
// the team computes the tile before, stored where each schedule keeps its tiles after.
#pragma once

#include <kflash/impl/compat.hpp>

namespace kflash::impl {

/// One tile of BK keys of K or of V (rows of at most DV elements) as a thread of a team of TeamSize
/// holds it by 16-byte chunks of S: the thread's items are rank, rank + TeamSize, ... of the tile's
/// BK * DV / W chunks (rows of fewer than DV elements leave the last items unused). The calls take
/// the team's size as the team reports it, which is TeamSize.
template <class S, int BK, int DV, int TeamSize>
struct TileChunks {
  static constexpr int W = Chunk<S>::n;
  static constexpr int tile_chunks = BK * (DV / W);
  static constexpr int per_thread = (tile_chunks + TeamSize - 1) / TeamSize;
  static_assert(DV % W == 0, "kflash: a tile's rows must fit whole chunks");

  Chunk<S> c[per_thread];

  /// Loads the tile of nk keys from t0 of head (b, hk) of x, whose rows' whole chunks are laid out
  /// row_chunks apart (row_chunks * W <= DV): chunk i is key i / row_chunks; zero past the tile's
  /// keys and past a row's width elements. Consecutive threads read consecutive chunks of a row.
  template <class XV>
  KOKKOS_INLINE_FUNCTION void load(int rank, int size, const XV& x, index_t b, index_t hk, index_t t0, int nk,
                                   int row_chunks, int width) {
    KFLASH_IMPL_UNROLL for (int u = 0; u < per_thread; ++u) {
      const int i = rank + u * size;
      const int j = i / row_chunks, col = (i - j * row_chunks) * W;
      c[u] = j < nk && col < width ? load_chunk(&x(b, hk, t0 + j, col)) : Chunk<S>{};
    }
  }

  /// Hands each chunk load() gave (laid out row_chunks a key) to its place: to(j, col, chunk) for
  /// key j < BK, columns [col, col + W).
  template <class To>
  KOKKOS_INLINE_FUNCTION void store(int rank, int size, int row_chunks, const To& to) const {
    KFLASH_IMPL_UNROLL for (int u = 0; u < per_thread; ++u) {
      const int i = rank + u * size;
      if (i >= tile_chunks) break;
      const int j = i / row_chunks;
      if (j < BK) to(j, (i - j * row_chunks) * W, c[u]);
    }
  }
};

/// A tile's K (rows of D <= DV elements) and V (Dv <= DV), both whole chunks, as TileChunks.
template <class S, int BK, int DV, int TeamSize>
struct KVTileChunks {
  static constexpr int W = Chunk<S>::n;
  TileChunks<S, BK, DV, TeamSize> k, v;

  /// Both tiles of nk keys from t0 of K/V head (b, hk) (TileChunks::load).
  template <class KV, class VV>
  KOKKOS_INLINE_FUNCTION void load(int rank, int size, const KV& kv, const VV& vv, index_t b, index_t hk, index_t t0,
                                   int nk, int D, int Dv) {
    k.load(rank, size, kv, b, hk, t0, nk, D / W, D);
    v.load(rank, size, vv, b, hk, t0, nk, DV / W, Dv);
  }

  /// Hands each chunk to its place: store_k(j, d, chunk) for K's key j, columns [d, d + W),
  /// store_v(j, c, chunk) for V's.
  template <class StoreK, class StoreV>
  KOKKOS_INLINE_FUNCTION void store(int rank, int size, int D, const StoreK& store_k, const StoreV& store_v) const {
    k.store(rank, size, D / W, store_k);
    v.store(rank, size, DV / W, store_v);
  }
};

}  // namespace kflash::impl
