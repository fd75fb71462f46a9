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
  /// groups' partial maxima and sums, the merge factors, the row states; each 16-byte aligned.
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
    l.vs = after(l.kt, sizeof(T) * std::size_t(D * LK));
    l.pt = after(l.vs, sizeof(T) * std::size_t(BK * DV));
    l.part = after(l.pt, sizeof(T) * std::size_t(BK * LQ));
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
  /// Chunk loads each thread has in flight before it stores the first of them: 4, or 2 where the
  /// register blocks of S and O already take more than 128 registers a thread (more would spill).
  static constexpr int loads_in_flight = TM * (TN + TNO) * int(sizeof(T) / 4) > 128 ? 2 : 4;

  /// Items [0, n) of the team's threads, loads_in_flight at a time per thread: load(i) of each
  /// first, then put(i, chunk) of each, so that the loads overlap.
  template <class Load, class Put>
  KOKKOS_INLINE_FUNCTION static void chunks_through(const member_type& team, int n, const Load& load,
                                                    const Put& put) {
    const int nt = team.team_size();
    for (int base = team.team_rank(); base < n; base += loads_in_flight * nt) {
      Chunk<T> c[loads_in_flight];
      KFLASH_IMPL_UNROLL for (int u = 0; u < loads_in_flight; ++u)
        if (base + u * nt < n) c[u] = load(base + u * nt);
      KFLASH_IMPL_UNROLL for (int u = 0; u < loads_in_flight; ++u)
        if (base + u * nt < n) put(base + u * nt, c[u]);
    }
  }

  /// The tile of nk keys from t0 into scratch: K transposed, kt(d, j); V, vs(j, c), zero past Dv and
  /// past the tile's keys. By chunks where chunked_kv (consecutive threads read consecutive chunks
  /// of a row), else element by element. In-tile indices are 32-bit: a tile is a few KiB.
  KOKKOS_INLINE_FUNCTION void stage_tile(const member_type& team, const typename Base::Block& w, index_t t0, int nk,
                                         const Tile& kt, const Tile& vs) const {
    const int D = int(this->p.D), Dv = int(this->p.Dv);
    if (chunked_kv) {
      constexpr int W = Chunk<T>::n;
      const int kchunks = D / W;
      chunks_through(
          team, BK * kchunks,
          [&](int i) {
            const int j = i / kchunks;
            return j < nk ? load_chunk(&this->k(w.b, w.hk, t0 + j, (i - j * kchunks) * W)) : Chunk<T>{};
          },
          [&](int i, const Chunk<T>& c) {
            const int j = i / kchunks, d = (i - j * kchunks) * W;
            KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) kt(d + e, j) = c.x[e];
          });
      constexpr int vchunks = DV / W;
      chunks_through(
          team, BK * vchunks,
          [&](int i) {
            const int j = i / vchunks, c = (i - j * vchunks) * W;
            return j < nk && c < Dv ? load_chunk(&this->v(w.b, w.hk, t0 + j, c)) : Chunk<T>{};
          },
          [&](int i, const Chunk<T>& c) {
            const int j = i / vchunks, c0 = (i - j * vchunks) * W;
            KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) vs(j, c0 + e) = c.x[e];
          });
      return;
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * D), [&](int idx) {
      const int j = idx / D, d = idx - j * D;
      kt(d, j) = j < nk ? this->k(w.b, w.hk, t0 + j, d) : T(0);
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * DV), [&](int idx) {
      const int j = idx / DV, c = idx - j * DV;
      vs(j, c) = j < nk && c < Dv ? this->v(w.b, w.hk, t0 + j, c) : T(0);
    });
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

    for (index_t t0 = w.kb; t0 < w.ke; t0 += BK) {
      const index_t nk = w.ke - t0 < BK ? w.ke - t0 : BK;
      if (this->tile_hidden(w, t0, nk)) continue;
      team.team_barrier();  // the previous tile is no longer read
      stage_tile(team, w, t0, int(nk), kt, vs);
      team.team_barrier();

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
