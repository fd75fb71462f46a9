// Attention's warp-product schedule for 16-bit and fp32 storage on devices, on FlashAttention 2's
// forward structure: a team of warps owns a block of query rows, 16 a warp; each K/V tile is staged once per
// team in scratch as stored (V transposed, so that both products read their operands along k), by
// 16-byte chunks, loaded into registers while the team computes where the shape prefetches (a
// tile's V during its scores, the next tile's K during its P V);
// both products go through warp_product (tile/warp_product.hpp: the tensor cores on CUDA). A warp's
// scores and running output stay in its lanes' registers in WarpBlock's layout; its weights go
// through scratch, stored as the storage type (16-bit: rounded), as the second product's operand.
#pragma once

#include <kflash/impl/schedule/attention_plan.hpp>
#include <kflash/impl/schedule/kv_chunks.hpp>
#include <kflash/impl/tile/warp_product.hpp>

#include <type_traits>

namespace kflash::impl {

/// The team scratch of WarpAttentionKernel with Shape at head dimension D (also read by
/// tests/cuda/device_footprints.cpp): Q (BQ x D), the tile's K (BK x D) and V transposed (DV x BK),
/// the weights (BQ x BK), all of the storage type, each row padded with zeros to whole products'
/// depth and then 16 bytes more, so that the 32-bit words a fragment's lanes read (16-bit pairs or
/// fp32 values) lie on distinct banks; then the rows' partial maxima and sums, one per lane of a
/// row's 4 (floats).
template <class Shape>
struct WarpAttentionScratch {
  using S = typename Shape::storage_type;
  static constexpr index_t depth = WarpBlock::depth;
  /// The 16 bytes of padding after each row, in elements.
  static constexpr index_t pad = 16 / index_t(sizeof(S));
  /// D rounded up to the product's depth.
  KOKKOS_INLINE_FUNCTION static constexpr index_t padded(index_t D) { return (D + depth - 1) / depth * depth; }
  /// The leading dimensions of Q's and K's rows, and of V's transposed rows and the weights' rows.
  KOKKOS_INLINE_FUNCTION static constexpr index_t ld_qk(index_t D) { return padded(D) + pad; }
  static constexpr index_t ld_keys = Shape::BK + pad;

  /// Byte offsets in the block, each 16-byte aligned.
  struct Layout {
    std::size_t qs, ks, vt, ps, part, end;
  };
  KOKKOS_INLINE_FUNCTION static constexpr std::size_t after(std::size_t at, std::size_t bytes) {
    return at + (bytes + 15) / 16 * 16;
  }
  KOKKOS_INLINE_FUNCTION static Layout layout(index_t D) {
    const std::size_t ld = std::size_t(ld_qk(D));
    Layout l{};
    l.ks = after(l.qs, sizeof(S) * Shape::BQ * ld);
    l.vt = after(l.ks, sizeof(S) * Shape::BK * ld);
    l.ps = after(l.vt, sizeof(S) * std::size_t(Shape::DV * ld_keys));
    l.part = after(l.ps, sizeof(S) * std::size_t(Shape::BQ * ld_keys));
    l.end = after(l.part, sizeof(float) * std::size_t(8 * Shape::BQ));
    return l;
  }
  /// The block and the 15 bytes its alignment may take.
  static std::size_t bytes(index_t D) { return layout(D).end + 15; }
};

template <class Shape>
inline constexpr bool is_warp_shape = false;
template <class S, int Warps, int BK, int DV, int Blocks, bool Prefetch>
inline constexpr bool is_warp_shape<WarpAttentionShape<S, Warps, BK, DV, Blocks, Prefetch>> = true;

/// Attention over blocks of 16-bit or fp32 q, k, v by warp products (see WarpAttentionShape). Per K/V tile:
/// stage K and V; each warp's scores S = Q K^T, scaled and masked, and each row's maximum over its
/// lane's keys; the weights exp(s - m) against m, the larger of the row's running maximum and the
/// tile's, stored as S (16-bit: rounded), and their sums over the lane's keys; each row's state absorbs the tile's
/// (the monoid merge, its factor fa rescaling O); O += P V.
///
/// Thread id is lane id % 32 of warp id / 32 (on CUDA the hardware's warps: a team's threads are
/// consecutive); each of the row's 4 lanes keeps the row's state itself, all four the same.
template <class ExecSpace, class Shape, class Stage, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct WarpAttentionKernel : AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial> {
  using Base = AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial>;
  using typename Base::S, typename Base::T, typename Base::member_type;
  static_assert(std::is_same<typename Shape::storage_type, S>::value && std::is_same<T, float>::value,
                "kflash: the warp shape is not of the views' storage type");

  using Scratch = WarpAttentionScratch<Shape>;
  static constexpr int BQ = Shape::BQ, BK = Shape::BK, DV = Shape::DV, blocks = Shape::blocks;
  /// The tile's blocks of 8 keys, the output's of 8 columns.
  static constexpr int key_blocks = BK / WarpBlock::cols, out_blocks = DV / WarpBlock::cols;
  static constexpr int W = Chunk<S>::n;

  static std::size_t scratch_bytes(const AttentionPlan& p) { return Scratch::bytes(p.D); }

  /// Whether every K row (D elements) and V row (Dv) is whole chunks, aligned (rows_in_chunks).
  bool chunked_kv = false;

  /// One tile's K or V chunks as a thread holds them between their loads and their stores. Where the
  /// shape prefetches: K's of the next tile while the team computes P V, V's of this tile while it
  /// computes the scores (FlashAttention 2's order), so that a thread holds one matrix's chunks at a time.
  using Chunks = TileChunks<S, BK, DV, Shape::team_size>;
  /// Whether the tiles move by Chunks: chunked K/V rows of D <= DV.
  KOKKOS_INLINE_FUNCTION bool by_chunks() const { return chunked_kv && this->p.D > 0 && this->p.D <= DV; }

  /// The tile's K from t0 into c (TileChunks::load): rows of D elements.
  KOKKOS_INLINE_FUNCTION void load_k(const member_type& team, const typename Base::Block& w, index_t t0,
                                     Chunks& c) const {
    const int D = int(this->p.D);
    c.load(team.team_rank(), team.team_size(), this->k, w.b, w.hk, t0, int(this->keys_at(w, t0, BK)), D / W, D);
  }
  /// The tile's V from t0 into c: rows of Dv elements, laid out DV apart.
  KOKKOS_INLINE_FUNCTION void load_v(const member_type& team, const typename Base::Block& w, index_t t0,
                                     Chunks& c) const {
    c.load(team.team_rank(), team.team_size(), this->v, w.b, w.hk, t0, int(this->keys_at(w, t0, BK)), DV / W,
           int(this->p.Dv));
  }
  /// Stores the K chunks load_k gave c as they are, into ks's rows.
  KOKKOS_INLINE_FUNCTION void store_k(const member_type& team, const Chunks& c, S* ks) const {
    const int ld = int(Scratch::ld_qk(this->p.D));
    c.store(team.team_rank(), team.team_size(), int(this->p.D) / W,
            [&](int j, int d, const Chunk<S>& x) { store_chunk(ks + j * ld + d, x); });
  }
  /// Stores the V chunks load_v gave c as they are, V's columns into vt's rows.
  KOKKOS_INLINE_FUNCTION void store_v(const member_type& team, const Chunks& c, S* vt) const {
    c.store(team.team_rank(), team.team_size(), DV / W, [&](int j, int d, const Chunk<S>& x) {
      KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) vt[(d + e) * Scratch::ld_keys + j] = x.x[e];
    });
  }
  /// The tile of nk keys from t0 into scratch element by element (rows not in chunks, or D > DV):
  /// K zero past D and V zero past Dv (to the padded widths), both zero past the tile's keys.
  KOKKOS_INLINE_FUNCTION void stage_tile(const member_type& team, const typename Base::Block& w, index_t t0, int nk,
                                         S* ks, S* vt) const {
    const int D = int(this->p.D), Dp = int(Scratch::padded(D)), Dv = int(this->p.Dv), ld = int(Scratch::ld_qk(D));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * Dp), [&](int idx) {
      const int j = idx / Dp, d = idx - j * Dp;
      ks[j * ld + d] = j < nk && d < D ? this->k(w.b, w.hk, t0 + j, d) : store_as<S>(0.0f);
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * DV), [&](int idx) {
      const int j = idx / DV, c = idx - j * DV;
      vt[c * Scratch::ld_keys + j] = j < nk && c < Dv ? this->v(w.b, w.hk, t0 + j, c) : store_as<S>(0.0f);
    });
  }

  /// The larger of the row's 4 lanes' partial maxima in part and the row's running maximum m.
  KOKKOS_INLINE_FUNCTION static T tile_max(const float* part, int r, T m) {
    KFLASH_IMPL_UNROLL for (int t = 0; t < 4; ++t) m = part[t * BQ + r] > m ? part[t * BQ + r] : m;
    return m;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const typename Base::Block w = this->block_of(team.league_rank());
    const auto& p = this->p;
    const int D = int(p.D), Dp = int(Scratch::padded(D)), ldq = int(Scratch::ld_qk(D));
    constexpr int ldk = int(Scratch::ld_keys);
    const auto l = Scratch::layout(p.D);
    char* const block = this->scratch_block(team, l.end);
    S* const qs = reinterpret_cast<S*>(block + l.qs);  // Q, zero past D and past the block's rows
    S* const ks = reinterpret_cast<S*>(block + l.ks);  // the tile's K: ks[j * ldq + d]
    S* const vt = reinterpret_cast<S*>(block + l.vt);  // the tile's V transposed: vt[c * ldk + j]
    S* const ps = reinterpret_cast<S*>(block + l.ps);  // the tile's weights: ps[r * ldk + j]
    // Row r's partial maxima over lane t's keys at part[t * BQ + r], its partial sums 4 BQ further.
    float* const part = reinterpret_cast<float*>(block + l.part);

    // Q as stored (the scale multiplies the scores); K's and V's padding zero once for all tiles.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * Dp), [&](int idx) {
      const int r = idx / Dp, d = idx - r * Dp;
      S x = store_as<S>(0.0f);
      if (r < w.nrows && d < D) {
        const auto row = this->row_of(w, w.rho0 + r);
        x = this->q(w.b, row.h, row.i, d);
      }
      qs[r * ldq + d] = x;
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * ldq + DV * ldk), [&](int idx) {
      if (idx < BK * ldq) ks[idx] = store_as<S>(0.0f);
      else vt[idx - BK * ldq] = store_as<S>(0.0f);
    });

    const int rank = team.team_rank(), nt = team.team_size();
    T o[blocks][out_blocks][4];
    T s[blocks][key_blocks][4];
    SoftmaxState<T> st[blocks][2];  // rows WarpBlock::row(lane, 0) and (lane, 2) of the warp
    KFLASH_IMPL_UNROLL for (int bb = 0; bb < blocks; ++bb) {
      KFLASH_IMPL_UNROLL for (int h = 0; h < 2; ++h) st[bb][h] = SoftmaxState<T>::identity();
      KFLASH_IMPL_UNROLL for (int c = 0; c < out_blocks; ++c)
        KFLASH_IMPL_UNROLL for (int i = 0; i < 4; ++i) o[bb][c][i] = T(0);
    }
    // Thread id's warp's first row, its lane, and the row of its half h (0: i = 0, 1; 1: i = 2, 3).
    const auto warp_row = [](int id) { return id / WarpBlock::lanes * WarpBlock::rows; };
    const auto lane_of = [](int id) { return id % WarpBlock::lanes; };
    const auto row_at = [&](int id, int h) { return warp_row(id) + WarpBlock::row(lane_of(id), 2 * h); };

    // Prefetched tiles: this tile's V is loaded before its scores and stored after its weights,
    // the next tile's K loaded before this tile's P V and stored after it. Otherwise each tile is
    // loaded and stored at its start, by chunks where the rows are.
    const bool chunked = by_chunks(), prefetch = Shape::prefetch && chunked;
    Chunks chunks{};
    index_t t0 = this->next_tile(w, w.kb, BK);
    if (prefetch && t0 < w.ke) load_k(team, w, t0, chunks);
    while (t0 < w.ke) {
      const index_t nk = this->keys_at(w, t0, BK);
      team.team_barrier();  // the previous tile is no longer read (nor the zeros above unwritten)
      if (prefetch) {
        store_k(team, chunks, ks);
        load_v(team, w, t0, chunks);
      } else if (chunked) {
        load_k(team, w, t0, chunks);
        store_k(team, chunks, ks);
        load_v(team, w, t0, chunks);
        store_v(team, chunks, vt);
      } else {
        stage_tile(team, w, t0, int(nk), ks, vt);
      }
      team.team_barrier();
      const index_t t1 = this->next_tile(w, t0 + BK, BK);

      // Scores, scaled and masked (the pairs a row does not see and the keys past the tile are
      // -inf), and each row's maximum over this lane's keys.
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < blocks; ++bb) {
        const int id = rank + bb * nt, lane = lane_of(id);
        KFLASH_IMPL_UNROLL for (int c = 0; c < key_blocks; ++c)
          KFLASH_IMPL_UNROLL for (int i = 0; i < 4; ++i) s[bb][c][i] = T(0);
        for (int d = 0; d < Dp; d += WarpBlock::depth)
          KFLASH_IMPL_UNROLL for (int c = 0; c < key_blocks; ++c)
            warp_product(s[bb][c], qs + warp_row(id) * ldq + d, ldq, ks + c * WarpBlock::cols * ldq + d, ldq, lane);
        KFLASH_IMPL_UNROLL for (int h = 0; h < 2; ++h) {
          const int r = row_at(id, h);
          const bool real = r < w.nrows;
          const auto row = this->row_of(w, w.rho0 + (real ? r : 0));
          const KeyRange keys = real ? this->keys_of(w, row.i).in_tile(t0, nk) : KeyRange{0, nk};
          T m = -infinity<T>();
          KFLASH_IMPL_UNROLL for (int c = 0; c < key_blocks; ++c)
            KFLASH_IMPL_UNROLL for (int e = 0; e < 2; ++e) {
              const int j = c * WarpBlock::cols + WarpBlock::col(lane, e);
              const T x = staged_score(this->stage, s[bb][c][2 * h + e] * this->scale, this->at(w, row), keys,
                                       index_t(j), t0);
              s[bb][c][2 * h + e] = x;
              m = x > m ? x : m;
            }
          part[lane % 4 * BQ + r] = m;
        }
      }
      team.team_barrier();

      // Weights against the larger of each row's running maximum and the tile's, stored as S (what
      // the second product takes; 16-bit S: rounded once), and their sums over this lane's keys,
      // taken before any rounding (l and the lse are fp32's).
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < blocks; ++bb) {
        const int id = rank + bb * nt, lane = lane_of(id);
        KFLASH_IMPL_UNROLL for (int h = 0; h < 2; ++h) {
          const int r = row_at(id, h);
          const T m = tile_max(part, r, st[bb][h].max);
          T sum = T(0);
          KFLASH_IMPL_UNROLL for (int c = 0; c < key_blocks; ++c)
            KFLASH_IMPL_UNROLL for (int e = 0; e < 2; ++e) {
              const T x = SoftmaxState<T>::weight(s[bb][c][2 * h + e], m);
              ps[r * ldk + c * WarpBlock::cols + WarpBlock::col(lane, e)] = store_as<S>(x);
              sum += x;
            }
          part[(4 + lane % 4) * BQ + r] = sum;
        }
      }
      if (prefetch) store_v(team, chunks, vt);
      team.team_barrier();
      if (prefetch && t1 < w.ke) load_k(team, w, t1, chunks);

      // Each row's state absorbs the tile's, whose maximum is the one its weights were taken
      // against: the merge's factor for them (fb) is then 1, and fa rescales O. Then O += P V.
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < blocks; ++bb) {
        const int id = rank + bb * nt, lane = lane_of(id);
        T fa[2];
        KFLASH_IMPL_UNROLL for (int h = 0; h < 2; ++h) {
          const int r = row_at(id, h);
          SoftmaxState<T> tile = SoftmaxState<T>::identity();
          tile.max = tile_max(part, r, st[bb][h].max);
          KFLASH_IMPL_UNROLL for (int t = 0; t < 4; ++t) tile.add_term(part[(4 + t) * BQ + r]);
          fa[h] = OutputFactors<T>::merge(st[bb][h], tile).fa;
        }
        KFLASH_IMPL_UNROLL for (int c = 0; c < out_blocks; ++c)
          KFLASH_IMPL_UNROLL for (int i = 0; i < 4; ++i) o[bb][c][i] *= fa[i / 2];
        KFLASH_IMPL_UNROLL for (int j = 0; j < BK; j += WarpBlock::depth)
          KFLASH_IMPL_UNROLL for (int c = 0; c < out_blocks; ++c)
            warp_product(o[bb][c], ps + warp_row(id) * ldk + j, ldk, vt + c * WarpBlock::cols * ldk + j, ldk, lane);
      }
      t0 = t1;
    }

    KFLASH_IMPL_UNROLL for (int bb = 0; bb < blocks; ++bb) {
      const int id = rank + bb * nt, lane = lane_of(id);
      KFLASH_IMPL_UNROLL for (int h = 0; h < 2; ++h) {
        const int r = row_at(id, h);
        if (r >= w.nrows) continue;
        const auto row = this->row_of(w, w.rho0 + r);
        SoftmaxState<T> state = st[bb][h];
        const T factor = this->finish(w, row, state);
        KFLASH_IMPL_UNROLL for (int c = 0; c < out_blocks; ++c)
          KFLASH_IMPL_UNROLL for (int e = 0; e < 2; ++e) {
            const int col = c * WarpBlock::cols + WarpBlock::col(lane, e);
            if (col < p.Dv) this->out(w, row, col) = store_as<typename Base::Out>(o[bb][c][2 * h + e] * factor);
          }
        if (lane % 4 == 0) this->store_lse(w, row, state);
      }
    }
  }
};

}  // namespace kflash::impl
