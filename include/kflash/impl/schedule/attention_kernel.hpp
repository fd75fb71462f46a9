// Attention's per-row schedule, for head dimensions beyond the team shapes': a team owns a block of
// query rows, one thread per row; K/V tiles are staged in team scratch (widened to float from 16-bit
// storage); each row takes the tile step over plain lanes.
#pragma once

#include <kflash/impl/schedule/attention_plan.hpp>

namespace kflash::impl {

template <class ExecSpace, class Stage, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct AttentionKernel : AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial> {
  using Base = AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial>;
  using typename Base::T, typename Base::Row, typename Base::member_type, typename Base::Tile, typename Base::States;
  using Base::p, Base::q, Base::k, Base::v, Base::scale, Base::row_of;

  static std::size_t scratch_bytes(const AttentionPlan& p) {
    return Tile::shmem_size(p.bq, p.D) + Tile::shmem_size(p.bk, p.D) + Tile::shmem_size(p.bk, p.Dv) +
           Tile::shmem_size(p.bq, p.bk) + Tile::shmem_size(p.bq, p.Dv) + States::shmem_size(p.bq);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const typename Base::Block w = this->block_of(team.league_rank());
    const index_t b = w.b, hk = w.hk, rho0 = w.rho0, nrows = w.nrows;
    const auto& scratch = team.team_scratch(this->scratch_level);
    Tile qs(scratch, p.bq, p.D), ks(scratch, p.bk, p.D), vs(scratch, p.bk, p.Dv);
    Tile ss(scratch, p.bq, p.bk), os(scratch, p.bq, p.Dv);
    States st(scratch, p.bq);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](index_t r) {
      const Row row = row_of(w, rho0 + r);
      for (index_t d = 0; d < p.D; ++d) qs(r, d) = widen(q(b, row.h, row.i, d)) * scale;
      for (index_t d = 0; d < p.Dv; ++d) os(r, d) = T(0);
      st(r) = SoftmaxState<T>::identity();
    });

    for (index_t t0 = w.kb; t0 < w.ke; t0 += p.bk) {
      const index_t nk = w.ke - t0 < p.bk ? w.ke - t0 : p.bk;
      if (this->tile_hidden(w, t0, nk)) continue;
      team.team_barrier();  // the previous tile is no longer read
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nk), [&](index_t j) {
        for (index_t d = 0; d < p.D; ++d) ks(j, d) = widen(k(b, hk, t0 + j, d));
        for (index_t d = 0; d < p.Dv; ++d) vs(j, d) = widen(v(b, hk, t0 + j, d));
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](index_t r) {
        const Row query = row_of(w, rho0 + r);
        const RowAt where = this->at(w, query);
        const KeyRange keys = this->keys_of(w, query.i).in_tile(t0, nk);
        for (index_t j = 0; j < nk; ++j) {
          T score = 0;
          for (index_t d = 0; d < p.D; ++d) score += qs(r, d) * ks(j, d);
          ss(r, j) = staged_score(this->stage, score, where, keys, j, t0);
        }
        SoftmaxState<T> row = st(r);
        const OutputFactors<T> f = tile_step<ScalarLanes<T>, T>(
            row, keys, nk, [&](index_t j) { return ss(r, j); }, [&](index_t j, T x) { ss(r, j) = x; });
        st(r) = row;
        for (index_t d = 0; d < p.Dv; ++d) os(r, d) = f.kept(os(r, d));
        for (index_t j = 0; j < nk; ++j) {
          const T pj = f.weight(ss(r, j));
          for (index_t d = 0; d < p.Dv; ++d) os(r, d) += pj * vs(j, d);
        }
      });
    }

    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](index_t r) {
      this->store(w, row_of(w, rho0 + r), TileRow<Tile>{os, r}, st(r));
    });
  }
};

}  // namespace kflash::impl
