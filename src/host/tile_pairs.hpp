// The host kernels' attention tile on bf16 operands: its two products on K and V staged in pairs
// (pair_gemm.hpp) or on their rows read in place (pair_rows.hpp).
#pragma once

#include "pair_gemm.hpp"
#include "pair_rows.hpp"

#include <cstdint>

#include <kflash/impl/host/host_kernels.hpp>

namespace kflash::impl::host::internal {

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
/// An attention tile's products on bf16 pairs (AttentionTile's q16) with the products of P
/// (BlockPairs<DotPairs>, AmxPairs) on K and V staged in pairs, or with rows_nt and rows_pairs on
/// K's and V's rows in place (k16, v16), within a Session (P's) the caller holds around the tile:
///   scores: s = (q16 K^T) score_scale, for the rows rounded up to 16 (the scale applied as the
///           products are stored); given row_max (room for HostTraits::block_q_bf16 rows of 16
///           lanes), returns whether it also took the lane-wise maxima of each row's scores there
///           as they were stored: products on staged pairs whose tile has no keys past nk (the
///           rows read in place and AMX's tiles take none);
///   weights: P's rows [r0, r0 + g) = the weights left in s rounded to bf16 (zeros from key nk to
///           the next step of pair_keys), called for each group of rows as its tile step ends
///           (its weights still in L1); or store_weights and pad_weights for a row whose weights
///           are rounded as they are computed (s keeping its scores);
///   update: o += P V.
template <class P>
struct TilePairs {
  /// Keys of a tile's product in bf16 pairs are counted in steps of this many (AMX's depth: 16 pairs).
  static constexpr index_t pair_keys = 32;
  using Session = typename P::Session;
  static_assert(HostTraits::attention_pad % pair_keys == 0 && HostTraits::block_k_bf16 % pair_keys == 0,
                "kflash: the tiles' keys and padding must be whole steps of the bf16 pairs' products");

  static index_t rows16(const AttentionTile<float>& t) { return (t.rows + 15) / 16 * 16; }
  static index_t keys_in_steps(const AttentionTile<float>& t) { return (t.nk + pair_keys - 1) / pair_keys * pair_keys; }

  KFLASH_IMPL_BF16_TARGET static bool scores(const AttentionTile<float>& t, float* row_max) {
    if (t.k16 != nullptr && LaneRowsNt::takes(t.rows, t.D)) {  // K's rows in place, a few query rows
      LaneRowsNt::apply(t.q16, t.d16, t.k16, t.ldk, t.s, t.bk, t.rows, t.nk, t.D, t.score_scale, t.k16_next, t.nk_next);
      return false;
    }
    if (t.k16 != nullptr) {  // K's rows in place
      rows_nt<HostTraits::dot_block, HostTraits::dot_block>(t.q16, t.d16, t.k16, t.ldk, t.s, t.bk, t.rows, t.nk, t.D,
                                                            t.score_scale, t.k16_next, t.nk_next);
      return false;
    }
    const index_t m = rows16(t);
    if constexpr (P::row_maxima) {
      if (row_max != nullptr && t.nk == t.bk && m <= HostTraits::block_q_bf16) {
        for (index_t i = 0; i < m * 16; ++i) row_max[i] = -infinity<float>();
        P::gemm(t.q16, t.d16, t.k_pairs, 2 * t.ldk_pairs, t.s, t.bk, m, t.bk, t.d16 / 2, false, t.score_scale, row_max);
        return true;
      }
    }
    // The keys up to the next step of 32 only: a causal block's last tile ends at its last visible key.
    P::gemm(t.q16, t.d16, t.k_pairs, 2 * t.ldk_pairs, t.s, t.bk, m, keys_in_steps(t), t.d16 / 2, false, t.score_scale);
    return false;
  }

  KFLASH_IMPL_BF16_TARGET static void weights(const AttentionTile<float>& t, index_t r0, index_t g) {
    for (index_t r = r0; r < r0 + g; ++r) {
      narrow_bf16(t.s + r * t.bk, weights_row(t, r), t.nk);
      pad_weights(t, r);
    }
  }

  /// P's row r, where store_weights writes a row's weights as they are computed (pad_weights then
  /// adds its zeros): n weights w rounded to bf16 at p, a key of that row.
  static std::uint16_t* weights_row(const AttentionTile<float>& t, index_t r) { return t.p16 + r * t.bk; }
  KFLASH_IMPL_BF16_TARGET static void store_weights(std::uint16_t* p, const float* w, index_t n) {
    narrow_bf16(w, p, n);
  }

  /// P's row r: zeros from key nk to the next step of pair_keys.
  static void pad_weights(const AttentionTile<float>& t, index_t r) {
    const index_t nk = keys_in_steps(t);
    std::uint16_t* p = weights_row(t, r);
    for (index_t j = t.nk; j < nk; ++j) p[j] = 0;
  }

  KFLASH_IMPL_BF16_TARGET static void update(const AttentionTile<float>& t) {
    if (t.v16 != nullptr) {  // V's rows in place
      rows_pairs(t.p16, t.bk, t.v16, t.ldv, t.o, t.dvp, t.rows, t.dvp, t.dv, t.nk, t.v16_next, t.nk_next);
      return;
    }
    const index_t nk = keys_in_steps(t);
    P::gemm(t.p16, t.bk, t.v_pairs, 2 * t.dvp, t.o, t.dvp, rows16(t), t.dvp, nk / 2, true);
  }
};
#endif

}  // namespace kflash::impl::host::internal
