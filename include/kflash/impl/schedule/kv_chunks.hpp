// The K/V tiles of attention's device schedules (team_attention.hpp, warp_attention.hpp) as a team's
// threads carry them from global memory to scratch by 16-byte chunks: loaded into registers while
// the team computes the tile before, stored where each schedule keeps its tiles after.
#pragma once

#include <kflash/impl/compat.hpp>

namespace kflash::impl {

/// One tile of BK keys' K and V chunks (16 bytes of S) as a thread of a team of TeamSize holds them:
/// the thread's items are rank, rank + TeamSize, ... of the tile's BK * DV / W chunks of each (K's
/// rows have D <= DV elements, the rest of the items unused). The calls take the team's size as the
/// team reports it, which is TeamSize.
template <class S, int BK, int DV, int TeamSize>
struct KVTileChunks {
  static constexpr int W = Chunk<S>::n;
  static constexpr int tile_chunks = BK * (DV / W);
  static constexpr int per_thread = (tile_chunks + TeamSize - 1) / TeamSize;
  static_assert(DV % W == 0, "kflash: a tile's output rows must be whole chunks");

  Chunk<S> k[per_thread], v[per_thread];

  /// Loads the tile of nk keys from t0 of K/V head (b, hk), rows of D and Dv elements (whole
  /// chunks): K's chunk i is key i / (D / W), V's key i / (DV / W); zero past the tile's keys and
  /// past Dv. Consecutive threads read consecutive chunks of a row.
  template <class KV, class VV>
  KOKKOS_INLINE_FUNCTION void load(int rank, int size, const KV& kv, const VV& vv, index_t b, index_t hk, index_t t0,
                                   int nk, int D, int Dv) {
    constexpr int vchunks = DV / W;
    const int kchunks = D / W;
    KFLASH_IMPL_UNROLL for (int u = 0; u < per_thread; ++u) {
      const int i = rank + u * size;
      const int jk = i / kchunks, jv = i / vchunks, cv = (i - jv * vchunks) * W;
      k[u] = jk < nk ? load_chunk(&kv(b, hk, t0 + jk, (i - jk * kchunks) * W)) : Chunk<S>{};
      v[u] = jv < nk && cv < Dv ? load_chunk(&vv(b, hk, t0 + jv, cv)) : Chunk<S>{};
    }
  }

  /// Hands each chunk load() gave to its place: store_k(j, d, chunk) for K's key j, columns
  /// [d, d + W) (j < BK), store_v(j, c, chunk) for V's.
  template <class StoreK, class StoreV>
  KOKKOS_INLINE_FUNCTION void store(int rank, int size, int D, const StoreK& store_k, const StoreV& store_v) const {
    constexpr int vchunks = DV / W;
    const int kchunks = D / W;
    KFLASH_IMPL_UNROLL for (int u = 0; u < per_thread; ++u) {
      const int i = rank + u * size;
      if (i >= tile_chunks) break;
      const int jk = i / kchunks, jv = i / vchunks;
      if (jk < BK) store_k(jk, (i - jk * kchunks) * W, k[u]);
      store_v(jv, (i - jv * vchunks) * W, v[u]);
    }
  }
};

}  // namespace kflash::impl
