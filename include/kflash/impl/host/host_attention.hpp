// The host schedule of attention: a team of one thread per block of query rows stages the block's
// Q and each K/V tile into its scratch (or points at them in place; 16-bit ones are widened to float
// there), and hands every tile to the compiled tile kernel.
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/attention_plan.hpp>

namespace kflash::impl::host {

/// K transposed once per K/V head for all the head's query blocks (plan's packed_ld > 0): element d
/// of key j of head (b, hk) at packed[((b * Hk + hk) * D + d) * ld + j], keys [Nk, ld) zero. One
/// work item per bk keys of a head.
template <class KV, class T>
struct PackKeys {
  KV k;
  T* packed;
  index_t Hk, Nk, D, ld, bk;

  void operator()(index_t item) const {
    const index_t per_head = ld / bk, bh = item / per_head, j0 = item % per_head * bk;
    const index_t b = bh / Hk, hk = bh % Hk;
    const index_t valid = Nk - j0 < bk ? (Nk > j0 ? Nk - j0 : 0) : bk;
    T* out = packed + bh * D * ld + j0;
    for (index_t j = 0; j < valid; ++j)
      for (index_t d = 0; d < D; ++d) out[d * ld + j] = widen(k(b, hk, j0 + j, d));
    for (index_t d = 0; d < D; ++d)
      for (index_t j = valid; j < bk; ++j) out[d * ld + j] = T(0);
  }
};

template <class ExecSpace, class Stage, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct HostAttentionKernel : AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial> {
  using Base = AttentionKernelBase<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial>;
  using Base::p, Base::q, Base::k, Base::v, Base::scale, Base::row_of;
  using typename Base::S, typename Base::T, typename Base::Row, typename Base::member_type, typename Base::Tile,
      typename Base::States;
  using Ranges = Kokkos::View<KeyRange*, typename Base::scratch_space, Kokkos::MemoryUnmanaged>;
  using ScoreRows = Kokkos::View<TileScoreRow<T>*, typename Base::scratch_space, Kokkos::MemoryUnmanaged>;
  static constexpr bool user_functors = Stage::user_score || Stage::user_mask;
  /// K packed by PackKeys (null: each block stages its tiles of K).
  const T* packed_keys = nullptr;

  /// q, K transposed, V, scores, O (V and O padded), states, each row's keys and score stage in the
  /// tile.
  static std::size_t scratch_bytes(const AttentionPlan& p) {
    return Tile::shmem_size(p.bq, p.D) + Tile::shmem_size(p.D, p.bk) + Tile::shmem_size(p.bk, p.dvp) +
           Tile::shmem_size(p.bq, p.bk) + Tile::shmem_size(p.bq, p.dvp) + States::shmem_size(p.bq) +
           Ranges::shmem_size(p.bq) + ScoreRows::shmem_size(p.bq);
  }

  /// The compiled tile's part of the score stage for `row` in the tile from key t0: ALiBi, bias, and
  /// the mask View unless the user's score_mod comes before it (then it stays header-side, with the
  /// functors).
  TileScoreRow<T> score_row(const RowAt& row, index_t t0) const {
    return tile_score_row(this->stage.opt, row, t0, !Stage::user_score);
  }

  void operator()(const member_type& team) const {
    const typename Base::Block w = this->block_of(team.league_rank());
    const index_t b = w.b, hk = w.hk, rho0 = w.rho0, nrows = w.nrows;
    const auto& scratch = team.team_scratch(this->scratch_level);
    Tile qs(scratch, p.bq, p.D), kt(scratch, p.D, p.bk), vs(scratch, p.bk, p.dvp);
    Tile ss(scratch, p.bq, p.bk), os(scratch, p.bq, p.dvp);
    States st(scratch, p.bq);
    Ranges keys(scratch, p.bq);
    ScoreRows score_rows(scratch, p.bq);
    const ScoreOptions<T>& so = this->stage.opt;
    const bool per_row = so.alibi.on() || so.bias.on() || (so.mask.on() && !Stage::user_score);
    for (index_t r = 0; r < nrows; ++r) {
      const Row row = row_of(w, rho0 + r);
      for (index_t d = 0; d < p.D; ++d) qs(r, d) = widen(q(b, row.h, row.i, d)) * scale;
      for (index_t d = 0; d < p.dvp; ++d) os(r, d) = T(0);
      st(r) = SoftmaxState<T>::identity();
    }
    for (index_t j = 0; j < p.bk; ++j)
      for (index_t d = p.Dv; d < p.dvp; ++d) vs(j, d) = T(0);
    AttentionTile<T> tile{qs.data(), kt.data(), vs.data(), ss.data(), os.data(), st.data(), keys.data(),
                          nrows,     0,         p.bk,      p.D,       p.dvp};
    tile.ldv = p.dvp;
    tile.softcap = so.softcap;
    tile.inv_softcap = so.inv_softcap;
    tile.score_rows = per_row ? score_rows.data() : nullptr;
    // K packed for the head's blocks is read there. Otherwise rows of K with unit stride are read as
    // rows (by dot products) for blocks of at most dot_rows query rows (decode), where staging K
    // transposed would cost more than the products. Rows of float or double are read in place (V
    // when no padding is needed); 16-bit rows are widened into the tile's scratch first.
    constexpr bool in_place = std::is_same<S, T>::value;
    const T* packed = packed_keys != nullptr ? packed_keys + (b * p.Hk + hk) * p.D * p.packed_ld : nullptr;
    const bool k_rows = packed == nullptr && k.stride(3) == 1 && nrows <= HostTraits::dot_rows;
    const bool k_in_place = in_place && k_rows;
    const bool v_in_place = in_place && v.stride(3) == 1 && p.Dv == p.dvp;
    // 16-bit rows widened by one call a tile (widen_keys), whose next tile can be asked for ahead.
    const bool k_ahead16 = !in_place && k_rows && index_t(k.stride(2)) == p.D;
    const bool v_ahead16 = !in_place && v.stride(3) == 1 && index_t(v.stride(2)) == p.Dv && p.Dv == p.dvp;
    tile.ldkt = packed != nullptr ? p.packed_ld : p.bk;
    // A tile ends where the keys' contiguous run does (a page of a paged cache).
    const auto tile_end = [&](index_t t0) {
      index_t end = t0 + p.bk < w.ke ? t0 + p.bk : w.ke;
      const index_t k_end = contiguous_keys_end(k, b, t0), v_end = contiguous_keys_end(v, b, t0);
      if (k_end < end) end = k_end;
      if (v_end < end) end = v_end;
      return end;
    };
    // Key j's row of K or V where it is read in place (null otherwise).
    const auto row_at = [&](const auto& kv, index_t j) -> const T* {
      if constexpr (in_place)
        return &kv(b, hk, j, 0);
      else
        return nullptr;
    };
    // Keys [t0, t0 + n) of 16-bit K or V (unit stride along d) widened into rows `ld` apart at out:
    // by one call where the keys' rows follow one another and out's do too.
    const auto widen_keys = [&](const auto& kv, index_t t0, index_t n, index_t width, T* out, index_t ld) {
      if constexpr (!in_place) {
        if (index_t(kv.stride(2)) == width && ld == width) {
          widen_row(&kv(b, hk, t0, 0), out, n * width);
        } else {
          for (index_t j = 0; j < n; ++j) widen_row(&kv(b, hk, t0 + j, 0), out + j * ld, width);
        }
      }
    };
    for (index_t t0 = w.kb; t0 < w.ke; t0 += tile.nk) {
      const index_t end = tile_end(t0);
      tile.nk = end - t0;
      if (this->tile_hidden(w, t0, tile.nk)) continue;
      if (packed != nullptr) {
        tile.kt = packed + t0;
      } else if (k_in_place) {
        tile.k = row_at(k, t0);
        tile.ldk = index_t(k.stride(2));
      } else if (k_rows) {  // 16-bit rows, widened into kt's scratch as bk x D rows
        widen_keys(k, t0, tile.nk, p.D, kt.data(), p.D);
        tile.k = kt.data();
        tile.ldk = p.D;
      } else {
        for (index_t j = 0; j < tile.nk; ++j)
          for (index_t d = 0; d < p.D; ++d) kt(d, j) = widen(k(b, hk, t0 + j, d));
      }
      if (v_in_place) {
        tile.v = row_at(v, t0);
        tile.ldv = index_t(v.stride(2));
      } else if (!in_place && v.stride(3) == 1) {
        widen_keys(v, t0, tile.nk, p.Dv, vs.data(), p.dvp);
      } else {
        for (index_t j = 0; j < tile.nk; ++j)
          for (index_t d = 0; d < p.Dv; ++d) vs(j, d) = widen(v(b, hk, t0 + j, d));
      }
      for (index_t r = 0; r < nrows; ++r) {
        const Row row = row_of(w, rho0 + r);
        keys(r) = this->keys_of(w, row.i).in_tile(t0, tile.nk);
        if (per_row) score_rows(r) = score_row(this->at(w, row), t0);
      }
      // The next tile's rows read in place, or widened from 16-bit rows that follow one another: the
      // products ask for them while they run (16-bit rows as float rows of the products' stride,
      // two keys each).
      tile.nk_next = (k_in_place || v_in_place || k_ahead16 || v_ahead16) && end < w.ke ? tile_end(end) - end : 0;
      if (tile.nk_next > 0) {
        if constexpr (in_place) {
          tile.k_next = k_in_place ? row_at(k, end) : nullptr;
          tile.v_next = v_in_place ? row_at(v, end) : nullptr;
        } else {
          tile.k_next = k_ahead16 ? reinterpret_cast<const T*>(&k(b, hk, end, 0)) : nullptr;
          tile.v_next = v_ahead16 ? reinterpret_cast<const T*>(&v(b, hk, end, 0)) : nullptr;
          tile.nk_next = (tile.nk_next + 1) / 2;
        }
      }
      if constexpr (!user_functors) {
        attention_tile(tile);
        continue;
      }
      // The user's functors between the products, on each row's visible keys.
      tile.part = TilePart::scores;
      attention_tile(tile);
      for (index_t r = 0; r < nrows; ++r) {
        const RowAt at = this->at(w, row_of(w, rho0 + r));
        T* s = &ss(r, 0);
        for (index_t j = keys(r).begin; j < keys(r).end; ++j)
          s[j] = this->stage.user_and_masks(s[j], at, t0 + j, Stage::user_score);
      }
      tile.part = TilePart::update;
      attention_tile(tile);
      tile.part = TilePart::whole;
    }
    for (index_t r = 0; r < nrows; ++r)
      this->store(w, row_of(w, rho0 + r), TileRow<Tile>{os, r}, st(r));
  }
};

}  // namespace kflash::impl::host
