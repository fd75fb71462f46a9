// Attention's team schedule for devices: a team owns a block of query rows, each K/V tile is
// staged once per team in scratch memory (widened to float from 16-bit storage), and every thread
// keeps a register block of the tile's scores S and of the running output O.
#pragma once

#include <kflash/impl/schedule/attention_plan.hpp>
#include <kflash/impl/schedule/kv_chunks.hpp>

#include <type_traits>

namespace kflash::impl {

/// The team scratch of TeamAttentionKernel with Shape on ExecSpace: where its tiles lie in the
/// team's scratch block at head dimension D, and the bytes a team asks for (also read by
/// tests/cuda/device_footprints.cpp, which prints each device shape's footprint for the static gates).
/// Every tile is row-major and read by whole chunks (16 bytes): Q and K by rows of the head
/// dimension, padded with zeros to whole chunks; the weights by rows of keys; V by rows of columns.
template <class ExecSpace, class Shape>
struct TeamAttentionScratch {
  using T = typename Shape::value_type;
  static constexpr index_t W = Chunk<T>::n;
  /// D rounded up to whole chunks.
  KOKKOS_INLINE_FUNCTION static constexpr index_t padded(index_t D) { return (D + W - 1) / W * W; }
  /// The leading dimension of Q's and K's rows: one chunk past the padded D, so that the rows a
  /// warp reads at once start on different banks (at D = 64 and 128).
  KOKKOS_INLINE_FUNCTION static constexpr index_t ld_qk(index_t D) { return padded(D) + W; }
  /// The leading dimension of the weights' rows, one chunk past the tile's keys for the same reason.
  static constexpr index_t LP = Shape::BK + W;

  /// Byte offsets in the block: Q, K, V, the weights, the key groups' partial maxima and sums, the
  /// merge factors, the row states; each 16-byte aligned. The weights share K's place: a tile's K is
  /// last read before its weights are first written.
  struct Layout {
    std::size_t qs, ks, vs, ps, part, fac, st, end;
  };
  KOKKOS_INLINE_FUNCTION static constexpr std::size_t after(std::size_t at, std::size_t bytes) {
    return at + (bytes + 15) / 16 * 16;
  }
  KOKKOS_INLINE_FUNCTION static Layout layout(index_t D) {
    constexpr int BQ = Shape::BQ, BK = Shape::BK, KG = Shape::KG, DV = Shape::DV;
    const std::size_t ld = std::size_t(ld_qk(D));
    Layout l{};
    l.ks = after(l.qs, sizeof(T) * BQ * ld);
    l.ps = l.ks;
    const std::size_t k_or_p = BK * ld > std::size_t(BQ * LP) ? BK * ld : std::size_t(BQ * LP);
    l.vs = after(l.ks, sizeof(T) * k_or_p);
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
/// Per K/V tile: stage K and V; S = Q K^T by register blocks, masked; the tile's row maxima across
/// key groups; the weights exp(s - m_tile) and their partial sums; each row's state merged with the
/// tile's state (the monoid), giving the factors fa, fb; O = fa O + fb P V.
///
/// Thread id holds the rows id / KG + RG a (a < TM), the keys id % KG + KG c (c < TN) and the output
/// chunks id % KG + KG q (q < TNO / W): interleaved, so that the chunks a warp reads from scratch at
/// once are either the same (a broadcast) or on distinct banks, and every scratch read is a chunk.
template <class ExecSpace, class Shape, class Stage, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct TeamAttentionKernel : AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial> {
  using Base = AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial>;
  using typename Base::S, typename Base::T, typename Base::member_type, typename Base::Tile, typename Base::States;
  static_assert(std::is_same<typename Shape::value_type, T>::value,
                "kflash: the shape is not of the views' arithmetic type");

  using Scratch = TeamAttentionScratch<ExecSpace, Shape>;

  static constexpr int BQ = Shape::BQ, BK = Shape::BK, TM = Shape::TM, TN = Shape::TN;
  static constexpr int RG = Shape::RG, KG = Shape::KG, TNO = Shape::TNO, DV = Shape::DV;
  static constexpr int W = Chunk<T>::n, QO = TNO / W;
  static_assert(TNO % W == 0 && BK % W == 0, "kflash: a team attention shape's output block and tile must be whole chunks");
  /// Elements of a stored chunk (16 bytes of S), and the chunks of T they widen to in scratch.
  static constexpr int WS = Chunk<S>::n, widened_chunks = WS / W;
  static_assert(WS % W == 0 && DV % WS == 0, "kflash: a stored chunk must widen to whole chunks of the tile");

  static std::size_t scratch_bytes(const AttentionPlan& p) { return Scratch::bytes(p.D); }

  /// Thread id's row a of the block, key c of the tile and first output column of its chunk q.
  KOKKOS_INLINE_FUNCTION static int block_row(int id, int a) { return id / KG + RG * a; }
  KOKKOS_INLINE_FUNCTION static int tile_key(int id, int c) { return id % KG + KG * c; }
  KOKKOS_INLINE_FUNCTION static int out_column(int id, int q) { return (id % KG + KG * q) * W; }

  /// Whether every K row (D elements) and V row (Dv) is whole chunks, aligned (rows_in_chunks):
  /// the tiles are then staged chunk by chunk.
  bool chunked_kv = false;

  /// One tile's K and V chunks as a thread holds them between their loads and their stores, as
  /// stored (16-bit storage: half the registers of float's).
  using TileChunks = KVTileChunks<S, BK, DV, Shape::team_size>;
  /// Whether the tiles are prefetched: loaded into registers (TileChunks) while the team computes
  /// the tile before, so that their loads overlap its products. Chunked K/V rows of D <= DV.
  KOKKOS_INLINE_FUNCTION bool prefetched() const { return chunked_kv && this->p.D > 0 && this->p.D <= DV; }

  /// The tile from t0 into c (TileChunks::load).
  KOKKOS_INLINE_FUNCTION void load_tile(const member_type& team, const typename Base::Block& w, index_t t0,
                                        TileChunks& c) const {
    c.load(team.team_rank(), team.team_size(), this->k, this->v, w.b, w.hk, t0, int(this->keys_at(w, t0, BK)),
           int(this->p.D), int(this->p.Dv));
  }
  /// Stores stored chunk c widened at to: its widened_chunks chunks of T side by side.
  KOKKOS_INLINE_FUNCTION static void store_widened(T* to, const Chunk<S>& c) {
    KFLASH_IMPL_UNROLL for (int h = 0; h < widened_chunks; ++h) {
      Chunk<T> x;
      KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) x.x[e] = widen(c.x[h * W + e]);
      store_chunk(to + h * W, x);
    }
  }
  /// Stores the chunks TileChunks::load gave c, widened: K, ks(j, d); V, vs(j, c).
  KOKKOS_INLINE_FUNCTION void store_tile(const member_type& team, const TileChunks& c, const Tile& ks,
                                         const Tile& vs) const {
    c.store(team.team_rank(), team.team_size(), int(this->p.D),
            [&](int j, int d, const Chunk<S>& x) { store_widened(&ks(j, d), x); },
            [&](int j, int d, const Chunk<S>& x) { store_widened(&vs(j, d), x); });
  }
  /// The tile of nk keys from t0 into scratch, element by element (rows not in chunks, or D > DV):
  /// K zero past D (to whole chunks), V zero past Dv, both zero past the tile's keys. In-tile
  /// indices are 32-bit: a tile is a few KiB.
  KOKKOS_INLINE_FUNCTION void stage_tile(const member_type& team, const typename Base::Block& w, index_t t0, int nk,
                                         const Tile& ks, const Tile& vs) const {
    const int D = int(this->p.D), Dp = int(Scratch::padded(D)), Dv = int(this->p.Dv);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * Dp), [&](int idx) {
      const int j = idx / Dp, d = idx - j * Dp;
      ks(j, d) = j < nk && d < D ? widen(this->k(w.b, w.hk, t0 + j, d)) : T(0);
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * DV), [&](int idx) {
      const int j = idx / DV, c = idx - j * DV;
      vs(j, c) = j < nk && c < Dv ? widen(this->v(w.b, w.hk, t0 + j, c)) : T(0);
    });
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const typename Base::Block w = this->block_of(team.league_rank());
    const auto& p = this->p;
    const index_t D = p.D, Dv = p.Dv, Dp = Scratch::padded(D), ld = Scratch::ld_qk(D);
    const auto l = Scratch::layout(D);
    char* const block = this->scratch_block(team, l.end);
    const auto carve = [&](std::size_t at, index_t n0, index_t n1) {
      return Tile(reinterpret_cast<T*>(block + at), n0, n1);
    };
    const Tile qs = carve(l.qs, BQ, ld);             // scaled Q, zero past D: qs(r, d)
    const Tile ks = carve(l.ks, BK, ld);             // the tile's K, zero past D: ks(j, d)
    const Tile vs = carve(l.vs, BK, DV);             // the tile's V, zero past Dv and past the tile's keys
    const Tile ps = carve(l.ps, BQ, Scratch::LP);    // the tile's weights: ps(r, j)
    const Tile part = carve(l.part, 2 * KG, BQ);     // per key group: row maxima, then row sums
    const Tile fac = carve(l.fac, 2, BQ);            // per row: fa, fb of the latest merge
    const States st(reinterpret_cast<SoftmaxState<T>*>(block + l.st), BQ);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * Dp), [&](index_t idx) {
      const index_t r = idx / Dp, d = idx % Dp;
      T x = T(0);
      if (r < w.nrows && d < D) {
        const auto row = this->row_of(w, w.rho0 + r);
        x = widen(this->q(w.b, row.h, row.i, d)) * this->scale;
      }
      qs(r, d) = x;
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
    index_t t0 = this->next_tile(w, w.kb, BK);
    if (prefetch && t0 < w.ke) load_tile(team, w, t0, next);
    while (t0 < w.ke) {
      const index_t nk = this->keys_at(w, t0, BK);
      team.team_barrier();  // the previous tile is no longer read
      if (prefetch) store_tile(team, next, ks, vs);
      else stage_tile(team, w, t0, int(nk), ks, vs);
      team.team_barrier();
      const index_t t1 = this->next_tile(w, t0 + BK, BK);
      if (prefetch && t1 < w.ke) load_tile(team, w, t1, next);

      // Scores of this thread's blocks, masked; each block row's maximum over its TN keys.
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt;
        T acc[TM][TN];
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) acc[a][c] = T(0);
        for (index_t d = 0; d < Dp; d += W) {
          Chunk<T> qa[TM], kb[TN];
          KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) qa[a] = load_chunk(&qs(block_row(id, a), d));
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) kb[c] = load_chunk(&ks(tile_key(id, c), d));
          KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e)
            KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
              KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) acc[a][c] += qa[a].x[e] * kb[c].x[e];
        }
        // The score stage: the pairs a row does not see (and the keys past the tile) are -inf.
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
          const int r = block_row(id, a);
          const bool real = r < w.nrows;
          const auto row = this->row_of(w, w.rho0 + (real ? r : 0));
          const KeyRange keys = real ? this->keys_of(w, row.i).in_tile(t0, nk) : KeyRange{0, nk};
          T m = -infinity<T>();
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) {
            const T x = staged_score(this->stage, acc[a][c], this->at(w, row), keys, index_t(tile_key(id, c)), t0);
            s[bb][a][c] = x;
            m = x > m ? x : m;
          }
          part(id % KG, r) = m;
        }
      }
      team.team_barrier();

      // Weights against the tile's row maxima, and their sums per key group.
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt;
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
          const int r = block_row(id, a);
          T m = -infinity<T>();
          KFLASH_IMPL_UNROLL for (int g = 0; g < KG; ++g) m = part(g, r) > m ? part(g, r) : m;
          T sum = T(0);
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) {
            const T x = SoftmaxState<T>::weight(s[bb][a][c], m);
            ps(r, tile_key(id, c)) = x;
            sum += x;
          }
          part(KG + id % KG, r) = sum;
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

      // O = fa O + fb P V on this thread's register blocks, W keys at a time (the weights past the
      // tile's keys are 0, and so are V's rows there).
      const index_t nkw = (nk + W - 1) / W * W;
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt;
        OutputFactors<T> f[TM];
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
          f[a].fa = fac(0, block_row(id, a));
          f[a].fb = fac(1, block_row(id, a));
          KFLASH_IMPL_UNROLL for (int c = 0; c < TNO; ++c) o[bb][a][c] = f[a].kept(o[bb][a][c]);
        }
        for (index_t j = 0; j < nkw; j += W) {
          Chunk<T> pa[TM];
          KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) pa[a] = load_chunk(&ps(block_row(id, a), j));
          KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) {
            Chunk<T> vb[QO];
            KFLASH_IMPL_UNROLL for (int q = 0; q < QO; ++q) vb[q] = load_chunk(&vs(j + e, out_column(id, q)));
            KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
              const T x = f[a].weight(pa[a].x[e]);
              KFLASH_IMPL_UNROLL for (int q = 0; q < QO; ++q)
                KFLASH_IMPL_UNROLL for (int e2 = 0; e2 < W; ++e2) o[bb][a][q * W + e2] += x * vb[q].x[e2];
            }
          }
        }
      }
      t0 = t1;
    }
    team.team_barrier();  // the states of every row are final

    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
      const int id = rank + bb * nt;
      KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
        const index_t r = block_row(id, a);
        if (r >= w.nrows) continue;
        const auto row = this->row_of(w, w.rho0 + r);
        SoftmaxState<T> state = st(r);
        const T factor = this->finish(w, row, state);
        KFLASH_IMPL_UNROLL for (int q = 0; q < QO; ++q)
          KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) {
            const int c = out_column(id, q) + e;
            if (c < Dv) this->out(w, row, c) = store_as<typename Base::Out>(o[bb][a][q * W + e] * factor);
          }
        if (id % KG == 0) this->store_lse(w, row, state);
      }
    }
  }
};

}  // namespace kflash::impl
