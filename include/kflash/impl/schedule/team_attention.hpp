// Attention's team schedule for devices: a team owns a block of query rows, each K/V tile is
// staged once per team in scratch memory, and every thread keeps a register block of the tile's
// scores S and of the running output O.
#pragma once

#include <kflash/impl/schedule/attention_plan.hpp>

#include <type_traits>

namespace kflash::impl {

/// The team scratch of TeamAttentionKernel with Shape on ExecSpace: where its tiles lie in the
/// team's scratch block at head dimension D, and the bytes a team asks for (also read by
/// tests/cuda/device_footprints.cpp, which prints each device shape's footprint for the static gates).
template <class ExecSpace, class Shape>
struct TeamAttentionScratch {
  using T = typename Shape::value_type;
  // Leading dimensions of the transposed tiles, odd so that transposing stores hit distinct banks.
  static constexpr index_t LQ = Shape::BQ + 1, LK = Shape::BK + 1;

  /// Byte offsets in the block: Q transposed, K transposed, V, the weights transposed, the key
  /// groups' partial maxima and sums, the merge factors, the row states; each 16-byte aligned. The
  /// weights share K's place: a tile's K is last read before its weights are first written.
  struct Layout {
    std::size_t qt, kt, vs, pt, part, fac, st, end;
  };
  KOKKOS_INLINE_FUNCTION static constexpr std::size_t after(std::size_t at, std::size_t bytes) {
    return at + (bytes + 15) / 16 * 16;
  }
  KOKKOS_INLINE_FUNCTION static Layout layout(index_t D) {
    constexpr int BQ = Shape::BQ, BK = Shape::BK, KG = Shape::KG, DV = Shape::DV;
    Layout l{};
    l.kt = after(l.qt, sizeof(T) * std::size_t(D * LQ));
    l.pt = l.kt;
    const std::size_t k_or_p = D * LK > BK * LQ ? std::size_t(D * LK) : std::size_t(BK * LQ);
    l.vs = after(l.kt, sizeof(T) * k_or_p);
    l.part = after(l.vs, sizeof(T) * std::size_t(BK * DV));
    l.fac = after(l.part, sizeof(T) * std::size_t(2 * KG * BQ));
    l.st = after(l.fac, sizeof(T) * std::size_t(2 * BQ));
    l.end = after(l.st, sizeof(SoftmaxState<T>) * std::size_t(BQ));
    return l;
  }
  /// The block and the 15 bytes its alignment may take.
  static std::size_t bytes(index_t D) { return layout(D).end + 15; }
};

/// Attention over team-of-threads blocks with register-blocked products (see TeamAttentionShape).
/// Per K/V tile: stage K (transposed) and V; S = Q K^T by register blocks, masked; the tile's row
/// maxima across key groups; the weights exp(s - m_tile) and their partial sums; each row's state
/// merged with the tile's state (the monoid), giving the factors fa, fb; O = fa O + fb P V.
template <class ExecSpace, class Shape, class Stage, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct TeamAttentionKernel : AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial> {
  using Base = AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial>;
  using typename Base::T, typename Base::member_type, typename Base::Tile, typename Base::States;
  static_assert(std::is_same<typename Shape::value_type, T>::value, "kflash: shape and views disagree on T");

  using Scratch = TeamAttentionScratch<ExecSpace, Shape>;

  static constexpr int BQ = Shape::BQ, BK = Shape::BK, TM = Shape::TM, TN = Shape::TN;
  static constexpr int KG = Shape::KG, TNO = Shape::TNO, DV = Shape::DV;
  static constexpr index_t LQ = Scratch::LQ, LK = Scratch::LK;

  static std::size_t scratch_bytes(const AttentionPlan& p) { return Scratch::bytes(p.D); }

  /// Whether every K row (D elements) and V row (Dv) is whole chunks, aligned (rows_in_chunks):
  /// the tiles are then staged chunk by chunk.
  bool chunked_kv = false;

  /// One tile's K and V chunks as a thread holds them between their loads and their stores: the
  /// thread's items are rank, rank + team_size, ... of the tile's BK * DV / n chunks of each (K's
  /// rows have D <= DV elements, the rest of the items unused).
  static constexpr int tile_chunks = BK * (DV / Chunk<T>::n);
  static constexpr int chunks_per_thread = (tile_chunks + Shape::team_size - 1) / Shape::team_size;
  struct TileChunks {
    Chunk<T> k[chunks_per_thread], v[chunks_per_thread];
  };
  /// Whether the tiles are prefetched: loaded into registers (TileChunks) while the team computes
  /// the tile before, so that their loads overlap its products. Chunked K/V rows of D <= DV.
  KOKKOS_INLINE_FUNCTION bool prefetched() const { return chunked_kv && this->p.D > 0 && this->p.D <= DV; }

  /// Loads the tile of nk keys from t0 into c: K's chunk i is key i / (D / n), V's key i / (DV / n);
  /// zero past the tile's keys and past Dv. Consecutive threads read consecutive chunks of a row.
  KOKKOS_INLINE_FUNCTION void load_tile(const member_type& team, const typename Base::Block& w, index_t t0, int nk,
                                        TileChunks& c) const {
    constexpr int W = Chunk<T>::n, vchunks = DV / W;
    const int kchunks = int(this->p.D) / W, Dv = int(this->p.Dv);
    KFLASH_IMPL_UNROLL for (int u = 0; u < chunks_per_thread; ++u) {
      const int i = team.team_rank() + u * team.team_size();
      const int jk = i / kchunks, jv = i / vchunks, cv = (i - jv * vchunks) * W;
      c.k[u] = jk < nk ? load_chunk(&this->k(w.b, w.hk, t0 + jk, (i - jk * kchunks) * W)) : Chunk<T>{};
      c.v[u] = jv < nk && cv < Dv ? load_chunk(&this->v(w.b, w.hk, t0 + jv, cv)) : Chunk<T>{};
    }
  }
  /// Stores the chunks load_tile gave c: K transposed, kt(d, j); V, vs(j, c).
  KOKKOS_INLINE_FUNCTION void store_tile(const member_type& team, const TileChunks& c, const Tile& kt,
                                         const Tile& vs) const {
    constexpr int W = Chunk<T>::n, vchunks = DV / W;
    const int kchunks = int(this->p.D) / W;
    KFLASH_IMPL_UNROLL for (int u = 0; u < chunks_per_thread; ++u) {
      const int i = team.team_rank() + u * team.team_size();
      if (i >= tile_chunks) break;
      const int jk = i / kchunks, jv = i / vchunks, cv = (i - jv * vchunks) * W;
      if (jk < BK) KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) kt((i - jk * kchunks) * W + e, jk) = c.k[u].x[e];
      KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) vs(jv, cv + e) = c.v[u].x[e];
    }
  }
  /// The tile of nk keys from t0 into scratch, element by element (rows not in chunks, or D > DV):
  /// K transposed, V zero past Dv and past the tile's keys. In-tile indices are 32-bit: a tile is a
  /// few KiB.
  KOKKOS_INLINE_FUNCTION void stage_tile(const member_type& team, const typename Base::Block& w, index_t t0, int nk,
                                         const Tile& kt, const Tile& vs) const {
    const int D = int(this->p.D), Dv = int(this->p.Dv);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * D), [&](int idx) {
      const int j = idx / D, d = idx - j * D;
      kt(d, j) = j < nk ? this->k(w.b, w.hk, t0 + j, d) : T(0);
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * DV), [&](int idx) {
      const int j = idx / DV, c = idx - j * DV;
      vs(j, c) = j < nk && c < Dv ? this->v(w.b, w.hk, t0 + j, c) : T(0);
    });
  }

  /// The first tile start t0 >= t (tiles start at w.kb, BK keys apart) that the block mask does
  /// not hide, or w.ke.
  KOKKOS_INLINE_FUNCTION index_t next_tile(const typename Base::Block& w, index_t t) const {
    for (; t < w.ke; t += BK)
      if (!this->tile_hidden(w, t, keys_at(w, t))) return t;
    return w.ke;
  }
  KOKKOS_INLINE_FUNCTION static index_t keys_at(const typename Base::Block& w, index_t t0) {
    return w.ke - t0 < BK ? w.ke - t0 : BK;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const typename Base::Block w = this->block_of(team.league_rank());
    const auto& p = this->p;
    const index_t D = p.D, Dv = p.Dv;
    const auto l = Scratch::layout(D);
    char* const block = this->scratch_block(team, l.end);
    const auto carve = [&](std::size_t at, index_t n0, index_t n1) {
      return Tile(reinterpret_cast<T*>(block + at), n0, n1);
    };
    const Tile qt = carve(l.qt, D, LQ);           // scaled Q, transposed: qt(d, r)
    const Tile kt = carve(l.kt, D, LK);           // the tile's K, transposed: kt(d, j)
    const Tile vs = carve(l.vs, BK, DV);          // the tile's V, zero past Dv and past the tile's keys
    const Tile pt = carve(l.pt, BK, LQ);          // the tile's weights, transposed: pt(j, r)
    const Tile part = carve(l.part, 2 * KG, BQ);  // per key group: row maxima, then row sums
    const Tile fac = carve(l.fac, 2, BQ);         // per row: fa, fb of the latest merge
    const States st(reinterpret_cast<SoftmaxState<T>*>(block + l.st), BQ);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * D), [&](index_t idx) {
      const index_t r = idx / D, d = idx % D;
      T x = T(0);
      if (r < w.nrows) {
        const auto row = this->row_of(w, w.rho0 + r);
        x = this->q(w.b, row.h, row.i, d) * this->scale;
      }
      qt(d, r) = x;
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](index_t r) { st(r) = SoftmaxState<T>::identity(); });

    const int rank = team.team_rank(), nt = team.team_size();
    T o[Shape::blocks][TM][TNO];
    T s[Shape::blocks][TM][TN];
    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb)
      KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
        KFLASH_IMPL_UNROLL for (int c = 0; c < TNO; ++c) o[bb][a][c] = T(0);

    // Prefetched tiles: the next visible tile's chunks are loaded before this tile's products.
    const bool prefetch = prefetched();
    TileChunks next{};
    index_t t0 = next_tile(w, w.kb);
    if (prefetch && t0 < w.ke) load_tile(team, w, t0, int(keys_at(w, t0)), next);
    while (t0 < w.ke) {
      const index_t nk = keys_at(w, t0);
      team.team_barrier();  // the previous tile is no longer read
      if (prefetch) store_tile(team, next, kt, vs);
      else stage_tile(team, w, t0, int(nk), kt, vs);
      team.team_barrier();
      const index_t t1 = next_tile(w, t0 + BK);
      if (prefetch && t1 < w.ke) load_tile(team, w, t1, int(keys_at(w, t1)), next);

      // Scores of this thread's blocks, masked; each block row's maximum over its TN keys.
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt, r0 = id / KG * TM, j0 = id % KG * TN;
        T acc[TM][TN];
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) acc[a][c] = T(0);
        for (index_t d = 0; d < D; ++d) {
          T qa[TM], kb[TN];
          KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) qa[a] = qt(d, r0 + a);
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) kb[c] = kt(d, j0 + c);
          KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
            KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) acc[a][c] += qa[a] * kb[c];
        }
        // The score stage: the pairs a row does not see (and the keys past the tile) are -inf.
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
          const bool real = r0 + a < w.nrows;
          const auto row = this->row_of(w, w.rho0 + (real ? r0 + a : 0));
          const KeyRange keys = real ? this->keys_of(w, row.i).in_tile(t0, nk) : KeyRange{0, nk};
          T m = -infinity<T>();
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) {
            const T x = staged_score(this->stage, acc[a][c], this->at(w, row), keys, index_t(j0 + c), t0);
            s[bb][a][c] = x;
            m = x > m ? x : m;
          }
          part(id % KG, r0 + a) = m;
        }
      }
      team.team_barrier();

      // Weights against the tile's row maxima, and their sums per key group.
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt, r0 = id / KG * TM, j0 = id % KG * TN;
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
          T m = -infinity<T>();
          KFLASH_IMPL_UNROLL for (int g = 0; g < KG; ++g) m = part(g, r0 + a) > m ? part(g, r0 + a) : m;
          T sum = T(0);
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) {
            const T x = SoftmaxState<T>::weight(s[bb][a][c], m);
            pt(j0 + c, r0 + a) = x;
            sum += x;
          }
          part(KG + id % KG, r0 + a) = sum;
        }
      }
      team.team_barrier();

      // Each row's state absorbs the tile's (the monoid merge); fa and fb rescale O.
      for (index_t r = rank; r < BQ; r += nt) {
        SoftmaxState<T> tile = SoftmaxState<T>::identity();
        KFLASH_IMPL_UNROLL for (int g = 0; g < KG; ++g) tile.max = part(g, r) > tile.max ? part(g, r) : tile.max;
        KFLASH_IMPL_UNROLL for (int g = 0; g < KG; ++g) tile.add_term(part(KG + g, r));
        SoftmaxState<T> row = st(r);
        const OutputFactors<T> f = OutputFactors<T>::merge(row, tile);
        st(r) = row;
        fac(0, r) = f.fa;
        fac(1, r) = f.fb;
      }
      team.team_barrier();

      // O = fa O + fb P V on this thread's register blocks.
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt, r0 = id / KG * TM, c0 = id % KG * TNO;
        OutputFactors<T> f[TM];
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
          f[a].fa = fac(0, r0 + a);
          f[a].fb = fac(1, r0 + a);
          KFLASH_IMPL_UNROLL for (int c = 0; c < TNO; ++c) o[bb][a][c] = f[a].kept(o[bb][a][c]);
        }
        for (index_t j = 0; j < nk; ++j) {
          T pa[TM], vb[TNO];
          KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) pa[a] = f[a].weight(pt(j, r0 + a));
          KFLASH_IMPL_UNROLL for (int c = 0; c < TNO; ++c) vb[c] = vs(j, c0 + c);
          KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
            KFLASH_IMPL_UNROLL for (int c = 0; c < TNO; ++c) o[bb][a][c] += pa[a] * vb[c];
        }
      }
      t0 = t1;
    }
    team.team_barrier();  // the states of every row are final

    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
      const int id = rank + bb * nt, r0 = id / KG * TM, c0 = id % KG * TNO;
      KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
        const index_t r = r0 + a;
        if (r >= w.nrows) continue;
        const auto row = this->row_of(w, w.rho0 + r);
        SoftmaxState<T> state = st(r);
        const T factor = this->finish(w, row, state);
        KFLASH_IMPL_UNROLL for (int c = 0; c < TNO; ++c)
          if (c0 + c < Dv) this->out(w, row, c0 + c) = o[bb][a][c] * factor;
        if (c0 == 0) this->store_lse(w, row, state);
      }
    }
  }
};

}  // namespace kflash::impl
