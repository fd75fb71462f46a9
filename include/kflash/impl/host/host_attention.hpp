// The host schedule of attention: a team of one thread per block of query rows stages the block's
// Q and each K/V tile into its scratch (or points at them in place: 16-bit rows are widened to float
// as the tile kernel's products load them), and hands every tile to the compiled tile kernel.
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/attention_plan.hpp>

#include <cstring>

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

/// The bits of a 16-bit value.
template <class H>
std::uint16_t bits16(const H& x) {
  static_assert(sizeof(H) == 2, "kflash: bits16 takes 16-bit values");
  std::uint16_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// Dimensions of bf16 rows in pairs (AttentionTile's d16): D rounded up to the 32 values of an AMX
/// row.
inline index_t pair_dims(index_t D) { return (D + 31) / 32 * 32; }

/// Keys [j0, j0 + n) of K's head (b, hk) in bf16 pairs of dimensions (AttentionTile's k_pairs):
/// pair p of key j - j0 at out[p * 2 ldo + 2 (j - j0)], dimensions from D to pair_dims(D) zero.
template <class KV>
void pair_keys(const KV& k, index_t b, index_t hk, index_t j0, index_t n, index_t D, std::uint16_t* out, index_t ldo) {
  const index_t d16 = pair_dims(D);
  if (n <= 0) return;
  if (k.stride(3) == 1) {
    key_pairs(reinterpret_cast<const std::uint16_t*>(&k(b, hk, j0, 0)), index_t(k.stride(2)), n, D, d16, out, ldo);
    return;
  }
  for (index_t pair = 0; pair < d16 / 2; ++pair)
    for (index_t j = 0; j < n; ++j)
      for (index_t e = 0; e < 2; ++e) {
        const index_t d = 2 * pair + e;
        out[pair * 2 * ldo + 2 * j + e] = d < D ? bits16(k(b, hk, j0 + j, d)) : 0;
      }
}

/// Keys [j0, j0 + n) of V's head (b, hk) in bf16 pairs of keys (AttentionTile's v_pairs): row i
/// holds keys j0 + 2i and j0 + 2i + 1 interleaved (2 dvp values, columns from Dv zero); rows from
/// key j0 + n up to key j0 + n_pad (even) are zero.
template <class VV>
void pair_values(const VV& v, index_t b, index_t hk, index_t j0, index_t n, index_t n_pad, index_t Dv, index_t dvp,
                 std::uint16_t* out) {
  for (index_t j = 0; j < n_pad; j += 2) {
    std::uint16_t* row = out + j * dvp;
    if (j >= n) {
      for (index_t c = 0; c < 2 * dvp; ++c) row[c] = 0;
    } else if (v.stride(3) == 1) {
      const auto at = [&](index_t i) { return reinterpret_cast<const std::uint16_t*>(&v(b, hk, j0 + i, 0)); };
      row_pairs(at(j), j + 1 < n ? at(j + 1) : nullptr, Dv, dvp, row);
    } else {
      for (index_t c = 0; c < dvp; ++c) {
        row[2 * c] = c < Dv ? bits16(v(b, hk, j0 + j, c)) : 0;
        row[2 * c + 1] = c < Dv && j + 1 < n ? bits16(v(b, hk, j0 + j + 1, c)) : 0;
      }
    }
  }
}

/// bf16 K in pairs of dimensions (AttentionTile's k_pairs) once per K/V head for all the head's
/// query blocks (plan's packed_ld > 0): the pairs of key j of head (b, hk), row p, at
/// packed[((b * Hk + hk) * d16 / 2 + p) * 2 ld + 2j], keys [Nk, ld) zero. One work item per bk keys
/// of a head.
template <class KV>
struct PackKeyPairs {
  KV k;
  std::uint16_t* packed;
  index_t Hk, Nk, D, ld, bk;

  void operator()(index_t item) const {
    const index_t per_head = ld / bk, bh = item / per_head, j0 = item % per_head * bk;
    const index_t b = bh / Hk, hk = bh % Hk, d16 = pair_dims(D);
    const index_t valid = Nk - j0 < bk ? (Nk > j0 ? Nk - j0 : 0) : bk;
    std::uint16_t* out = packed + bh * d16 * ld + 2 * j0;
    pair_keys(k, b, hk, j0, valid, D, out, ld);
    for (index_t pair = 0; pair < d16 / 2; ++pair)
      for (index_t j = 2 * valid; j < 2 * bk; ++j) out[pair * 2 * ld + j] = 0;
  }
};

/// bf16 V in pairs of keys (AttentionTile's v_pairs) once per K/V head, beside PackKeyPairs: the
/// pairs of keys j, j + 1 (j even) of head (b, hk) at packed[((b * Hk + hk) * ld + j) * dvp], keys
/// [Nk, ld) zero. One work item per bk keys of a head.
template <class VV>
struct PackValuePairs {
  VV v;
  std::uint16_t* packed;
  index_t Hk, Nk, Dv, dvp, ld, bk;

  void operator()(index_t item) const {
    const index_t per_head = ld / bk, bh = item / per_head, j0 = item % per_head * bk;
    const index_t valid = Nk - j0 < bk ? (Nk > j0 ? Nk - j0 : 0) : bk;
    pair_values(v, bh / Hk, bh % Hk, j0, valid, bk, Dv, dvp, packed + (bh * ld + j0) * dvp);
  }
};

/// K and V packed once per K/V head for the host kernel: K transposed (PackKeys), or K and V in
/// bf16 pairs (PackKeyPairs, PackValuePairs), or none (all null).
template <class T>
struct PackedKV {
  const T* keys = nullptr;
  const std::uint16_t* key_pairs = nullptr;
  const std::uint16_t* value_pairs = nullptr;
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
  using Tile16 =
      Kokkos::View<std::uint16_t**, Kokkos::LayoutRight, typename Base::scratch_space, Kokkos::MemoryUnmanaged>;
  /// bf16 storage, where the host kernels have bf16 products (bf16_products()): blocks take the
  /// products on bf16 pairs (AttentionTile's q16), staged, or formed in registers from K's and V's
  /// rows in place (blocks of at most dot_rows rows with unit-stride rows and Dv a whole vector).
  static constexpr bool bf16 = !std::is_same<S, T>::value && storage16_of<S> == Storage16::bf16;
  static_assert(HostTraits::block_q % 16 == 0, "kflash: the bf16 pairs' tiles take rows by 16");
  /// K (and V) packed once per head (null: each block stages its tiles).
  PackedKV<T> packed_kv = {};

  /// q, K transposed, V, scores, O (V and O padded), states, each row's keys and score stage in the
  /// tile; for bf16, Q, K and V in pairs and the rounded weights (AttentionTile's q16, k_pairs,
  /// v_pairs, p16).
  static std::size_t scratch_bytes(const AttentionPlan& p) {
    std::size_t bytes = Tile::shmem_size(p.bq, p.D) + Tile::shmem_size(p.D, p.bk) + Tile::shmem_size(p.bk, p.dvp) +
                        Tile::shmem_size(p.bq, p.bk) + Tile::shmem_size(p.bq, p.dvp) + States::shmem_size(p.bq) +
                        Ranges::shmem_size(p.bq) + ScoreRows::shmem_size(p.bq);
    if (bf16 && bf16_products()) {
      const index_t d16 = pair_dims(p.D);
      bytes += Tile16::shmem_size(p.bq, d16) + Tile16::shmem_size(d16 / 2, 2 * p.bk) +
               Tile16::shmem_size(p.bk / 2, 2 * p.dvp) + Tile16::shmem_size(p.bq, p.bk);
    }
    return bytes;
  }

  /// The compiled tile's part of the score stage for `row` in the tile from key t0: ALiBi, bias, and
  /// the mask View unless the user's score_mod comes before it (then it stays header-side, with the
  /// functors).
  TileScoreRow<T> score_row(const RowAt& row, index_t t0) const {
    return tile_score_row(this->stage.opt, row, t0, !Stage::user_score);
  }

  /// The bf16 pairs of the tile of nk keys from key t0 of head (b, hk): K's from the head's packed
  /// pairs (key_pairs, row stride 2 packed_ld) or into kp; V's from the head's packed pairs
  /// (value_pairs) where the tile starts at a pair and its products read only its own keys (nk a
  /// whole step of 32 keys: the rows past nk would hold the next keys, whose values may be infinite),
  /// else into vp (zeros from key nk to the next step of 32 keys).
  void stage_pairs(index_t b, index_t hk, index_t t0, index_t nk, const std::uint16_t* key_pairs,
                   const std::uint16_t* value_pairs, const Tile16& kp, const Tile16& vp, AttentionTile<T>& tile) const {
    if (key_pairs != nullptr)
      tile.k_pairs = key_pairs + 2 * t0, tile.ldk_pairs = p.packed_ld;
    else
      pair_keys(k, b, hk, t0, nk, p.D, kp.data(), p.bk);
    constexpr index_t step = 32;
    if (value_pairs != nullptr && t0 % 2 == 0 && nk % step == 0) {
      tile.v_pairs = value_pairs + t0 * p.dvp;
    } else {
      pair_values(v, b, hk, t0, nk, (nk + step - 1) / step * step, p.Dv, p.dvp, vp.data());
      tile.v_pairs = vp.data();
    }
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
    // K packed for the head's blocks is read there. Otherwise rows of K with unit stride are read in
    // place (by dot products) for blocks of at most dot_rows query rows (decode), where staging K
    // transposed would cost more than the products; V in place when no padding is needed. 16-bit
    // rows in place are widened as the products load them (the tile's k16 and v16), but bf16 rows
    // of K and V both in place are paired in registers for bf16 products (V with any Dv: the loads
    // of its columns past the last whole 32 are masked). bf16 blocks that do not read K in place
    // take the products on pairs: Q, K and V staged in pairs.
    constexpr bool same = std::is_same<S, T>::value;
    const index_t head = b * p.Hk + hk, d16 = pair_dims(p.D);
    const T* packed = packed_kv.keys != nullptr ? packed_kv.keys + head * p.D * p.packed_ld : nullptr;
    const std::uint16_t* packed_pairs =
        packed_kv.key_pairs != nullptr ? packed_kv.key_pairs + head * d16 * p.packed_ld : nullptr;
    const std::uint16_t* value_pairs =
        packed_kv.value_pairs != nullptr ? packed_kv.value_pairs + head * p.packed_ld * p.dvp : nullptr;
    const bool k_in_place =
        packed == nullptr && packed_pairs == nullptr && k.stride(3) == 1 && nrows <= HostTraits::dot_rows;
    const bool v_unit = v.stride(3) == 1, v_rows = v_unit && p.Dv == p.dvp;
    const bool staged_pairs = packed_pairs != nullptr || (bf16 && !k_in_place && bf16_products());
    const bool pairs = staged_pairs || (bf16 && k_in_place && v_unit && bf16_products());
    const bool v_in_place = !staged_pairs && (v_rows || pairs);  // rows_pairs reads any Dv
    Tile16 q16, kp, vp, p16;
    if (pairs) q16 = Tile16(scratch, p.bq, d16), p16 = Tile16(scratch, p.bq, p.bk);
    if (staged_pairs) kp = Tile16(scratch, d16 / 2, 2 * p.bk), vp = Tile16(scratch, p.bk / 2, 2 * p.dvp);
    // Rows past nrows up to the next 16 take part in the pairs' products: zeros in q16 and p16.
    const index_t rows16 = pairs ? (nrows + 15) / 16 * 16 : nrows;
    for (index_t r = 0; r < rows16; ++r) {
      const bool valid = r < nrows;
      const Row row = row_of(w, rho0 + (valid ? r : 0));
      if constexpr (bf16) {
        if (pairs) {
          for (index_t d = 0; d < d16; ++d) q16(r, d) = valid && d < p.D ? bits16(q(b, row.h, row.i, d)) : 0;
          for (index_t j = 0; j < p.bk; ++j) p16(r, j) = 0;
        }
      }
      if (!pairs)
        for (index_t d = 0; d < p.D; ++d) qs(r, d) = widen(q(b, row.h, row.i, d)) * scale;
      for (index_t d = 0; d < p.dvp; ++d) os(r, d) = T(0);
      if (valid) st(r) = SoftmaxState<T>::identity();
    }
    for (index_t j = 0; j < p.bk; ++j)
      for (index_t d = p.Dv; d < p.dvp; ++d) vs(j, d) = T(0);
    AttentionTile<T> tile{qs.data(), kt.data(), vs.data(), ss.data(), os.data(), st.data(), keys.data(),
                          nrows,     0,         p.bk,      p.D,       p.dvp};
    tile.ldv = p.dvp;
    tile.softcap = so.softcap;
    tile.inv_softcap = so.inv_softcap;
    tile.score_rows = per_row ? score_rows.data() : nullptr;
    tile.ldkt = packed != nullptr ? p.packed_ld : p.bk;
    if constexpr (!same) tile.format = storage16_of<S>;
    if constexpr (!Partial && is_half_type<typename Base::Out>) tile.output16_only = !this->has_lse;
    if (pairs) tile.q16 = q16.data(), tile.p16 = p16.data(), tile.d16 = d16, tile.dv = p.Dv, tile.score_scale = scale;
    if (staged_pairs) tile.v_pairs = vp.data(), tile.k_pairs = kp.data(), tile.ldk_pairs = p.bk;
    // A tile ends where the keys' contiguous run does (a page of a paged cache).
    const auto tile_end = [&](index_t t0) {
      index_t end = t0 + p.bk < w.ke ? t0 + p.bk : w.ke;
      const index_t k_end = contiguous_keys_end(k, b, t0), v_end = contiguous_keys_end(v, b, t0);
      if (k_end < end) end = k_end;
      if (v_end < end) end = v_end;
      return end;
    };
    // Points the tile at key j's row of K or V in place: rows (of T) or rows16 (16-bit).
    const auto in_place = [&](const auto& kv, index_t j, const T*& rows, const std::uint16_t*& rows16) {
      if constexpr (same) rows = &kv(b, hk, j, 0);
      else rows16 = reinterpret_cast<const std::uint16_t*>(&kv(b, hk, j, 0));
    };
    for (index_t t0 = w.kb; t0 < w.ke; t0 += tile.nk) {
      const index_t end = tile_end(t0);
      tile.nk = end - t0;
      if (this->tile_hidden(w, t0, tile.nk)) continue;
      if (staged_pairs) {
        if constexpr (bf16) stage_pairs(b, hk, t0, tile.nk, packed_pairs, value_pairs, kp, vp, tile);
      } else if (packed != nullptr) {
        tile.kt = packed + t0;
      } else if (k_in_place) {
        in_place(k, t0, tile.k, tile.k16);
        tile.ldk = index_t(k.stride(2));
      } else {
        for (index_t j = 0; j < tile.nk; ++j)
          for (index_t d = 0; d < p.D; ++d) kt(d, j) = widen(k(b, hk, t0 + j, d));
      }
      if (!staged_pairs) {  // (bf16 pairs staged: V with K above)
        if (v_in_place) {
          in_place(v, t0, tile.v, tile.v16);
          tile.ldv = index_t(v.stride(2));
        } else {
          for (index_t j = 0; j < tile.nk; ++j)
            for (index_t d = 0; d < p.Dv; ++d) vs(j, d) = widen(v(b, hk, t0 + j, d));
        }
      }
      for (index_t r = 0; r < nrows; ++r) {
        const Row row = row_of(w, rho0 + r);
        keys(r) = this->keys_of(w, row.i).in_tile(t0, tile.nk);
        if (per_row) score_rows(r) = score_row(this->at(w, row), t0);
      }
      // The next tile's rows read in place: the products ask for them while they run.
      tile.nk_next = (k_in_place || v_in_place) && end < w.ke ? tile_end(end) - end : 0;
      if (tile.nk_next > 0) {
        if (k_in_place) in_place(k, end, tile.k_next, tile.k16_next);
        if (v_in_place) in_place(v, end, tile.v_next, tile.v16_next);
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
