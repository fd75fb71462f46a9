// attention_backward's team schedule for devices: FlashAttention 2's backward tiles without its
// atomics, as two kernels on the forward's team shapes (TeamAttentionShape). A dk/dv team owns a
// block of BK keys of one K/V head, stages their K and V once and takes every block of BQ query rows
// of the head's group that sees them; a dq team owns a block of BQ query rows, stages their q and
// dout once and takes every tile of BK keys they see. For each block pair both compute the scores
// and dP = dout V^T by register blocks (thread id: rows id / KG + RG a, keys id % KG + KG c, as the
// forward), then P and dS through the tile layer's pair_grad into scratch, then dv += P^T dout and
// dk += dS^T q (dk/dv teams) or dq += dS k (dq teams) on register blocks. Every gradient element is
// summed by one thread in one order: the same bits run to run, no atomics. The price: the scores
// and dP of a pair are computed by both kernels (7 block products a pair against FA2's 5).
#pragma once

#include <kflash/impl/schedule/team_backward_tiles.hpp>

namespace kflash::impl {

/// dq by blocks of query rows: dq(row) = sum over the keys of dS(row, j) k_j. Thread id keeps its
/// rows' dq in registers, the columns of chunks id % KG + KG q (q < TNO / W), as the forward's O.
template <class ExecSpace, class Shape, class Pairs, class DQV>
struct TeamBackwardDq : TeamBackwardBase<ExecSpace, Shape, Pairs> {
  using Base = TeamBackwardBase<ExecSpace, Shape, Pairs>;
  using Base::BQ, Base::BK, Base::TM, Base::KG, Base::W, Base::LD, Base::LP;
  using typename Base::T, typename Base::member_type, typename Base::Tiles, typename Base::Row;
  static constexpr int QC = Shape::TNO / W;
  static_assert(Shape::TNO % W == 0, "kflash: a team backward shape's dq columns must be whole chunks");

  DQV dq;
  index_t nqb = 0;  // blocks of query rows per K/V head

  KOKKOS_INLINE_FUNCTION static int column(int id, int q) { return (id % KG + KG * q) * W; }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const auto& p = this->pairs.p;
    const index_t item = team.league_rank();
    const index_t qb = item % nqb, hk = item / nqb % p.Hk, b = item / (nqb * p.Hk);
    const index_t nq = this->pairs.seq.nq(b), rows = p.group * nq, rho0 = qb * BQ;
    if (rho0 >= rows) return;
    const int nr = rows - rho0 < BQ ? int(rows - rho0) : BQ;
    const KeyMask mask = this->pairs.mask_of(b);
    const KeyRange seen = mask.keys_of_group_rows(nq, rho0, nr);
    const Tiles t = this->tiles(team);
    this->stage_rows(team, t, b, hk, nq, rho0, nr);

    const int rank = team.team_rank(), nt = team.team_size();
    T acc[Shape::blocks][TM][QC * W];
    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
        KFLASH_IMPL_UNROLL for (int c = 0; c < QC * W; ++c) acc[bb][a][c] = T(0);
    // The tiles of keys the rows see that the block mask does not hide; with rows in chunks, the next
    // tile's K and V are loaded while the team computes the current one.
    const auto tile_keys = [&](index_t t0) { return seen.end - t0 < BK ? int(seen.end - t0) : BK; };
    const auto next_tile = [&](index_t t0) {
      for (; t0 < seen.end; t0 += BK)
        if (!this->pairs_hidden(b, hk, nq, rho0, nr, t0, tile_keys(t0))) return t0;
      return seen.end;
    };
    const bool prefetch = this->chunked;
    typename Base::template Held<BK> next{};
    index_t t0 = next_tile(seen.begin);
    if (prefetch && t0 < seen.end) this->load_keys(team, next, b, hk, t0, tile_keys(t0));
    while (t0 < seen.end) {
      const int nk = tile_keys(t0);
      team.team_barrier();  // the previous tile is no longer read
      if (prefetch)
        this->store(team, next, t.ks, t.vs);
      else
        this->stage_keys(team, t, b, hk, t0, nk);
      team.team_barrier();
      const index_t t1 = next_tile(t0 + BK);
      if (prefetch && t1 < seen.end) this->load_keys(team, next, b, hk, t1, tile_keys(t1));
      this->pair_block(team, t, b, hk, nq, mask, rho0, nr, t0, nk);
      team.team_barrier();
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt;
        for (int j = 0; j < nk; ++j) {
          Chunk<T> kc[QC];
          KFLASH_IMPL_UNROLL for (int q = 0; q < QC; ++q) kc[q] = load_chunk(t.ks + j * LD + column(id, q));
          KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
            const T x = t.dss[Base::block_row(id, a) * LP + j];
            KFLASH_IMPL_UNROLL for (int q = 0; q < QC; ++q) KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e)
                acc[bb][a][q * W + e] += x * kc[q].x[e];
          }
        }
      }
      t0 = t1;
    }
    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
      const int id = rank + bb * nt;
      KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
        const int r = Base::block_row(id, a);
        if (r >= nr) continue;
        const Row row = this->row_of(hk, nq, rho0 + r);
        KFLASH_IMPL_UNROLL for (int q = 0; q < QC; ++q) KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) {
          const int d = column(id, q) + e;
          if (d < p.D) dq(b, row.h, row.i, d) = acc[bb][a][q * W + e];
        }
      }
    }
  }
};

/// dk and dv by blocks of keys: dv(j) = sum over the rows of P(row, j) dout_row and dk(j) = sum of
/// dS(row, j) q_row, over every query head of the K/V head's group. Thread id keeps its keys' dk and
/// dv in registers, the columns of chunks id / KG + RG q (q < DV / RG / W).
template <class ExecSpace, class Shape, class Pairs, class DKV, class DVV>
struct TeamBackwardDkv : TeamBackwardBase<ExecSpace, Shape, Pairs> {
  using Base = TeamBackwardBase<ExecSpace, Shape, Pairs>;
  using Base::BQ, Base::BK, Base::TN, Base::RG, Base::KG, Base::DV, Base::W, Base::LD, Base::LP;
  using typename Base::T, typename Base::member_type, typename Base::Tiles;
  static constexpr int KC = DV / RG / W;
  static_assert((DV / RG) % W == 0 && DV % RG == 0, "kflash: a team backward shape's dk columns must be whole chunks");

  DKV dk;
  DVV dv;
  index_t nkb = 0;  // blocks of keys per K/V head

  KOKKOS_INLINE_FUNCTION static int column(int id, int q) { return (id / KG + RG * q) * W; }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const auto& p = this->pairs.p;
    const index_t item = team.league_rank();
    const index_t kb = item % nkb, hk = item / nkb % p.Hk, b = item / (nkb * p.Hk);
    const index_t nkeys = this->pairs.seq.nk(b), t0 = kb * BK;
    if (t0 >= nkeys) return;
    const int nk = nkeys - t0 < BK ? int(nkeys - t0) : BK;
    const index_t nq = this->pairs.seq.nq(b), rows = p.group * nq;
    const KeyMask mask = this->pairs.mask_of(b);
    const Tiles t = this->tiles(team);
    this->stage_keys(team, t, b, hk, t0, nk);

    const int rank = team.team_rank(), nt = team.team_size();
    T gk[Shape::blocks][TN][KC * W], gv[Shape::blocks][TN][KC * W];
    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c)
        KFLASH_IMPL_UNROLL for (int d = 0; d < KC * W; ++d) gk[bb][c][d] = gv[bb][c][d] = T(0);
    // The blocks of rows that see the keys and that the block mask does not hide; with rows in
    // chunks, the next block's q and dout are loaded while the team computes the current one.
    const auto block_rows = [&](index_t rho0) { return rows - rho0 < BQ ? int(rows - rho0) : BQ; };
    const auto next_rows = [&](index_t rho0) {
      for (; rho0 < rows; rho0 += BQ) {
        const int nr = block_rows(rho0);
        const KeyRange seen = mask.keys_of_group_rows(nq, rho0, nr);
        if (seen.end > t0 && seen.begin < t0 + nk && !this->pairs_hidden(b, hk, nq, rho0, nr, t0, nk)) return rho0;
      }
      return rows;
    };
    const bool prefetch = this->chunked;
    typename Base::template Held<BQ> next{};
    index_t rho0 = next_rows(0);
    if (prefetch && rho0 < rows) this->load_rows(team, next, b, hk, nq, rho0, block_rows(rho0));
    while (rho0 < rows) {
      const int nr = block_rows(rho0);
      team.team_barrier();  // the previous rows are no longer read
      if (prefetch) {
        this->store(team, next, t.qs, t.dos);
        this->stage_stats(team, t, b, hk, nq, rho0, nr);
      } else {
        this->stage_rows(team, t, b, hk, nq, rho0, nr);
      }
      team.team_barrier();
      const index_t rho1 = next_rows(rho0 + BQ);
      if (prefetch && rho1 < rows) this->load_rows(team, next, b, hk, nq, rho1, block_rows(rho1));
      this->pair_block(team, t, b, hk, nq, mask, rho0, nr, t0, nk);
      team.team_barrier();
      KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt;
        for (int r = 0; r < nr; ++r) {
          Chunk<T> dc[KC], qc[KC];
          KFLASH_IMPL_UNROLL for (int q = 0; q < KC; ++q) {
            dc[q] = load_chunk(t.dos + r * LD + column(id, q));
            qc[q] = load_chunk(t.qs + r * LD + column(id, q));
          }
          KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) {
            const T pv = t.ps[r * LP + Base::tile_key(id, c)], ds = t.dss[r * LP + Base::tile_key(id, c)];
            KFLASH_IMPL_UNROLL for (int q = 0; q < KC; ++q) KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) {
              gv[bb][c][q * W + e] += pv * dc[q].x[e];
              gk[bb][c][q * W + e] += ds * qc[q].x[e];
            }
          }
        }
      }
      rho0 = rho1;
    }
    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
      const int id = rank + bb * nt;
      KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) {
        const int key = Base::tile_key(id, c);
        if (key >= nk) continue;
        KFLASH_IMPL_UNROLL for (int q = 0; q < KC; ++q) KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) {
          const int d = column(id, q) + e;
          if (d < p.D) dk(b, hk, t0 + key, d) = gk[bb][c][q * W + e];
          if (d < p.Dv) dv(b, hk, t0 + key, d) = gv[bb][c][q * W + e];
        }
      }
    }
  }
};

/// Launches one of the kernels over `league` teams of Shape's team with its scratch: teams of
/// unequal work (ragged sequences, windows, block masks; causal rows are even enough in a block of
/// keys' or rows' share) handed out as threads free up.
template <class Shape, class ExecSpace, class Kernel>
void launch_team_backward(const ExecSpace& exec, const char* label, index_t league, bool uneven, Kernel kernel) {
  const std::size_t bytes = Kernel::scratch_bytes();
  kernel.scratch_level = bytes <= std::size_t(Kokkos::TeamPolicy<ExecSpace>::scratch_size_max(0)) ? 0 : 1;
  if (league == 0) return;
  if (uneven) {
    using Dynamic = Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
    Kokkos::parallel_for(
        label,
        Dynamic(exec, int(league), Shape::team_size, 1).set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes)),
        kernel);
    return;
  }
  Kokkos::parallel_for(label,
                       Kokkos::TeamPolicy<ExecSpace>(exec, int(league), Shape::team_size, 1)
                           .set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes)),
                       kernel);
}

/// dq by blocks of rows, then dk and dv by blocks of keys, on the team shape Shape (D, Dv <= DV).
template <class Shape, class ExecSpace, class Pairs, class DQV, class DKV, class DVV>
void run_team_backward(const ExecSpace& exec, const Pairs& pairs, const DQV& dq, const DKV& dk, const DVV& dv) {
  const AttentionPlan& p = pairs.p;
  using Base = TeamBackwardBase<ExecSpace, Shape, Pairs>;
  Base base{pairs};
  base.chunked = rows_in_chunks(pairs.q, p.D) && rows_in_chunks(pairs.k, p.D) && rows_in_chunks(pairs.v, p.Dv) &&
                 rows_in_chunks(pairs.dout, p.Dv);
  const bool uneven = p.ragged || p.window_left >= 0 || p.window_right >= 0 || pairs.terms.block_mask.blocks.on();
  const index_t nqb = (p.group * p.Nq + Shape::BQ - 1) / Shape::BQ, nkb = (p.Nk + Shape::BK - 1) / Shape::BK;
  launch_team_backward<Shape>(exec, "kflash::attention_backward dq", p.B * p.Hk * nqb, uneven,
                              TeamBackwardDq<ExecSpace, Shape, Pairs, DQV>{base, dq, nqb});
  launch_team_backward<Shape>(exec, "kflash::attention_backward dk dv", p.B * p.Hk * nkb, uneven,
                              TeamBackwardDkv<ExecSpace, Shape, Pairs, DKV, DVV>{base, dk, dv, nkb});
}

}  // namespace kflash::impl
