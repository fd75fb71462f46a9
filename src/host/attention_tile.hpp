// The host kernels' attention tile: the scores by a micro-GEMM, each row's tile step (score stage,
// tile state, merge: include/kflash/impl/tile/attention_step.hpp) on vector lanes, then O = fa O +
// (fb P) V by a micro-GEMM (16-bit K and V rows widened as the products load them); and the plain
// products of the backward's tiles.
#pragma once

#include "gemm.hpp"
#include "half_rows.hpp"
#include "tile_pairs.hpp"
#include "vector_lanes.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/tile/attention_step.hpp>

namespace kflash::impl::host::internal {

/// The built-in score stage on row scores s of a tile, over the keys the row sees: one plain loop
/// per modifier, which the compiler vectorises for the variant's instruction set.
template <class T>
void score_stage_row(T* s, const KeyRange& keys, T softcap, T inv_softcap, const TileScoreRow<T>* row) {
  const index_t jb = keys.begin, je = keys.end;
  if (softcap != T(0))
    for (index_t j = jb; j < je; ++j) s[j] = softcap * impl::tanh(s[j] * inv_softcap);
  if (row == nullptr) return;
  if (row->alibi) {
    const T slope = row->slope;
    const index_t c = row->diagonal;
    if (c - jb < INT32_MAX && je - c < INT32_MAX) {  // distances as 32-bit integers, which convert in vectors
      for (index_t j = jb; j < je; ++j) {
        const std::int32_t d = std::int32_t(c - j);
        s[j] -= slope * T(d < 0 ? -d : d);
      }
    } else {
      for (index_t j = jb; j < je; ++j) s[j] -= slope * T(c > j ? c - j : j - c);
    }
  }
  if (row->bias != nullptr) {
    const T* bias = row->bias;
    const index_t bs = row->bias_stride;
    if (bs == 1) {
      for (index_t j = jb; j < je; ++j) s[j] += bias[j];
    } else {
      for (index_t j = jb; j < je; ++j) s[j] += bias[j * bs];
    }
  }
  if (row->mask != nullptr) {
    const bool* mask = row->mask;
    const index_t ms = row->mask_stride;
    if (ms == 1) {
      for (index_t j = jb; j < je; ++j) s[j] = mask[j] ? s[j] : -infinity<T>();
    } else {
      for (index_t j = jb; j < je; ++j) s[j] = mask[j * ms] ? s[j] : -infinity<T>();
    }
  }
}

/// Calls f with a null pointer of the 16-bit operand type (kflash's Bfloat16 or Float16) of format.
template <class F>
void with_operand16(Storage16 format, F&& f) {
  if (format == Storage16::bf16) f(static_cast<const Bfloat16*>(nullptr));
  else f(static_cast<const Float16*>(nullptr));
}

/// A tile with bf16 pairs reached a variant without bf16 products: the host kernel stages pairs only
/// where bf16_products() holds, which selects the variants that have them. Stops rather than leave
/// the tile's scores or output unwritten.
[[noreturn]] inline void pairs_without_products() {
  std::fputs("kflash: internal error: an attention tile in bf16 pairs reached host kernels without bf16 products\n",
             stderr);
  std::abort();
}

/// Row r's weights terms(j), j < nk (WeightTerms, WeightsAgainst), added into sums and rounded into
/// P's row as each block of them is computed (s keeps the scores).
template <class Lanes, class Pairs, class T, class Terms>
void rounded_weights(const AttentionTile<T>& t, index_t r, const Terms& terms, TileSums<Lanes, T>& sums) {
  constexpr int W = Lanes::width;
  const index_t full = t.nk / W * W;
  const auto row = Pairs::weights_row(t, r);
  for (index_t j = 0; j < full; j += W) {
    T w[W];
    terms.template block<Lanes>(j, w);
    Lanes::add(sums.lanes, w);
    Pairs::store_weights(row + j, w, W);
  }
  if (full == t.nk) return;
  T tail[W];
  for (index_t j = full; j < t.nk; ++j) {
    tail[j - full] = terms(j);
    sums.tail.add_term(tail[j - full]);
  }
  Pairs::store_weights(row + full, tail, t.nk - full);
}

/// Whether rows [r0, r0 + g) of a tile on bf16 pairs may take steps_against_running_max: each has
/// a finite running maximum.
template <class T>
bool against_running_max(const AttentionTile<T>& t, index_t r0, index_t g) {
  for (index_t r = r0; r < r0 + g; ++r)
    if (!is_finite(t.state[r].max)) return false;
  return true;
}

/// The step of rows [r0, r0 + g) (g <= G) of a tile on bf16 pairs in one pass over their scores
/// (the hidden pairs' scores -inf first): weights against each row's running maximum, rounded into
/// P as they are computed (s keeps the scores), and the tile's maximum taken in the same loop. A
/// row whose tile maximum stays at or below its running maximum has exactly the weights and factors
/// tile_steps would give it (its reference is the running maximum either way), without tile_steps'
/// pass of maxima; a row whose maximum rose has its weights computed again against that maximum
/// (tile_steps' reference then), into s, and rounded by Pairs::weights.
template <class Lanes, class Pairs, class T, int G>
void steps_against_running_max(const AttentionTile<T>& t, index_t r0, index_t g, OutputFactors<T>* f) {
  typename Lanes::Block max[G], lanes[G];
  T tail_max[G], lane_max[G], roots[G];
  TileSums<Lanes, T> sums[G];
  for (int k = 0; k < G; ++k) {
    Lanes::fill(max[k], -infinity<T>());
    tail_max[k] = -infinity<T>();
    if (k >= g) continue;  // rows past g reduce empty lanes
    const index_t r = r0 + k;
    T* s = t.s + r * t.bk;
    const KeyRange& kr = t.keys[r];
    if (kr.begin > 0 || kr.end < t.nk)  // some pairs hidden: their scores -inf first, as tile_steps does
      for (index_t j = 0; j < t.nk; ++j) s[j] = score_stage(s[j], kr, j);
    rounded_weights<Lanes, Pairs>(t, r, WeightsAgainst<Lanes, T, Load<T>>{Load<T>{s}, t.state[r].max, &max[k],
                                                                          &tail_max[k]},
                                  sums[k]);
  }
  Lanes::max_lanes(max, lane_max);
  for (int k = 0; k < G; ++k) lanes[k] = sums[k].lanes;  // rows past g: zeros
  Lanes::sum_trees(lanes, roots);
  for (int k = 0; k < g; ++k) {
    const index_t r = r0 + k;
    const T m = lane_max[k] > tail_max[k] ? lane_max[k] : tail_max[k];
    if (m <= t.state[r].max) {
      f[k] = OutputFactors<T>::merge(t.state[r], sums[k].state(t.state[r].max, roots[k]));
      Pairs::pad_weights(t, r);
    } else {  // the maximum rose to m: the weights again, against m (tile_steps' reference)
      TileSums<Lanes, T> again;
      again.add_weights(m, 0, t.nk, Load<T>{t.s + r * t.bk}, Store<T>{t.s + r * t.bk});
      f[k] = OutputFactors<T>::merge(t.state[r], again.state(m));
      Pairs::weights(t, r, 1);
    }
  }
}

/// The step of rows [r0, r0 + g) (g <= G) of a tile on bf16 pairs whose products took their
/// scores' maxima (Pairs::scores: 16 lanes a row at row_max) in one pass: each row's weights against
/// its new maximum, the larger of its running maximum and the tile's, rounded into P as they are
/// computed (s keeps the scores). These are the weights, sums and factors of tile_steps (the same
/// reference, terms and lane trees) without its pass of maxima, and no row is computed twice.
/// Returns false, having changed nothing, where a row has hidden keys (their scores are not -inf in
/// s, nor out of the maxima) or a new maximum that is not finite (tile_steps' special cases).
template <class Lanes, class Pairs, class T, int G>
bool steps_against_tile_max(const AttentionTile<T>& t, index_t r0, index_t g, const T* row_max,
                            OutputFactors<T>* f) {
  constexpr int W = Lanes::width;
  typename Lanes::Block lanes[G];
  T tile_max[G], m[G], roots[G];
  for (int k = 0; k < G; ++k) {
    Lanes::fill(lanes[k], -infinity<T>());
    if (k < g) Lanes::max(lanes[k], Load<T>{row_max + (r0 + k) * W}, 0);
  }
  Lanes::max_lanes(lanes, tile_max);
  for (int k = 0; k < g; ++k) {
    const index_t r = r0 + k;
    m[k] = tile_max[k] > t.state[r].max ? tile_max[k] : t.state[r].max;
    if (t.keys[r].begin > 0 || t.keys[r].end < t.nk || !is_finite(m[k])) return false;
  }
  TileSums<Lanes, T> sums[G];
  for (int k = 0; k < g; ++k) {
    const index_t r = r0 + k;
    rounded_weights<Lanes, Pairs>(t, r, WeightTerms<T, Load<T>>{Load<T>{t.s + r * t.bk}, m[k]}, sums[k]);
    Pairs::pad_weights(t, r);
  }
  for (int k = 0; k < G; ++k) lanes[k] = sums[k].lanes;  // rows past g: zeros
  Lanes::sum_trees(lanes, roots);
  for (int k = 0; k < g; ++k) f[k] = OutputFactors<T>::merge(t.state[r0 + k], sums[k].state(m[k], roots[k]));
  return true;
}

/// The step of each of the tile's rows over its scores in s (its weights left there, final), O
/// rescaled where the row's maximum rose; the weights rounded into p16 for bf16 pairs, where rows
/// take steps_against_tile_max given the products' row_max (not null), else those with a running
/// maximum steps_against_running_max (their weights straight into p16). Lanes: the weights' exp.
template <class Lanes, class Pairs, class T>
void tile_weights(const AttentionTile<T>& t, const T* row_max) {
  constexpr int G = Lanes::rows_at_once;
  for (index_t r0 = 0; r0 < t.rows; r0 += G) {
    const index_t g = t.rows - r0 < G ? t.rows - r0 : G;
    OutputFactors<T> f[G];
    bool weights_rounded = false;
    if constexpr (!std::is_void<Pairs>::value) {
      if (t.q16 != nullptr && row_max != nullptr)
        weights_rounded = steps_against_tile_max<Lanes, Pairs, T, G>(t, r0, g, row_max, f);
      if (t.q16 != nullptr && !weights_rounded && against_running_max(t, r0, g)) {
        steps_against_running_max<Lanes, Pairs, T, G>(t, r0, g, f);
        weights_rounded = true;
      }
    }
    if (!weights_rounded)
      tile_steps<Lanes, T, G>(t.state + r0, t.keys + r0, t.nk, g, StridedRows<T>{t.s + r0 * t.bk, t.bk}, f);
    // The weights are final (tile_steps' fb is 1); O is rescaled where the maximum rose.
    for (index_t k = 0; k < g; ++k) {
      T* o = t.o + (r0 + k) * t.dvp;
      if (f[k].fa != T(1))
        for (index_t d = 0; d < t.dvp; ++d) o[d] = f[k].kept(o[d]);
    }
    if constexpr (!std::is_void<Pairs>::value)
      if (t.q16 != nullptr && !weights_rounded) Pairs::weights(t, r0, g);
  }
}

/// Pairs: the products on bf16 pairs of the tiles that have them (t.q16: TilePairs, tile_pairs.hpp);
/// void in the variants without bf16 products, which are never given such tiles.
template <class T, int VB, class Pairs>
void attention_tile_steps(const AttentionTile<T>& t) {
  constexpr int R = HostTraits::gemm_rows<VB>, NV = HostTraits::gemm_vectors, DB = HostTraits::dot_block;
  static_assert(HostTraits::attention_pad % (NV * VB / int(sizeof(T))) == 0,
                "kflash: the attention tiles' padding must be a multiple of the register block's columns");
  constexpr bool takes16 = std::is_same<T, float>::value;
  constexpr bool takes_pairs = takes16 && !std::is_void<Pairs>::value;
  // The lane-wise maxima of the scores of bf16 pairs, where their products take them (Pairs::scores)
  // and nothing changes the scores after.
  alignas(64) T row_max_room[takes_pairs ? HostTraits::block_q_bf16 * 16 : 1];
  const T* row_max = nullptr;
  if (t.part != TilePart::update) {
    if (t.q16 != nullptr) {  // scores from bf16 pairs, then scaled
      if constexpr (takes_pairs) row_max = Pairs::scores(t, row_max_room) ? row_max_room : nullptr;
      else
        pairs_without_products();
    } else if (t.k != nullptr) {  // scores of the nk keys, from K's rows in place
      gemm_nt<T, VB, DB, DB>(t.q, t.D, t.k, t.ldk, t.s, t.bk, t.rows, t.nk, t.D, t.k_next, t.nk_next);
    } else if (t.k16 != nullptr) {  // the same from 16-bit rows
      if constexpr (takes16)
        with_operand16(t.format, [&](auto format) {
          using B = std::remove_cv_t<std::remove_pointer_t<decltype(format)>>;
          gemm_nt<T, VB, DB, DB, B>(t.q, t.D, reinterpret_cast<const B*>(t.k16), t.ldk, t.s, t.bk, t.rows, t.nk, t.D,
                                    reinterpret_cast<const B*>(t.k16_next), t.nk_next);
        });
    } else {  // scores for nk columns of kt and up to the register block's next (leftovers, never read)
      constexpr index_t C = NV * VB / index_t(sizeof(T));
      gemm<T, R, NV, VB, false>(t.q, t.D, t.kt, t.ldkt, t.s, t.bk, t.rows, (t.nk + C - 1) / C * C, t.D);
    }
    if (t.softcap != T(0) || t.score_rows != nullptr) {
      row_max = nullptr;  // the score stage changes the scores after their maxima were taken
      for (index_t r = 0; r < t.rows; ++r)
        score_stage_row(t.s + r * t.bk, t.keys[r], t.softcap, t.inv_softcap,
                        t.score_rows != nullptr ? t.score_rows + r : nullptr);
    }
    if (t.part == TilePart::scores) return;
  }
  constexpr ExpAccuracy short_exp = output16_accuracy<T, VB>;
  if (short_exp != ExpAccuracy::full && t.output16_only)
    tile_weights<VectorLanes<T, VB, short_exp>, Pairs>(t, row_max);
  else
    tile_weights<VectorLanes<T, VB>, Pairs>(t, row_max);
  if (t.q16 != nullptr) {
    if constexpr (takes_pairs) Pairs::update(t);
    else
      pairs_without_products();
  } else if (t.v16 == nullptr) {
    gemm<T, R, NV, VB, true>(t.s, t.bk, t.v, t.ldv, t.o, t.dvp, t.rows, t.dvp, t.nk, t.v_next, t.nk_next);
  } else if constexpr (takes16) {
    with_operand16(t.format, [&](auto format) {
      using B = std::remove_cv_t<std::remove_pointer_t<decltype(format)>>;
      gemm<T, R, NV, VB, true, NV, R * NV / 2, false, B>(t.s, t.bk, reinterpret_cast<const B*>(t.v16), t.ldv, t.o,
                                                         t.dvp, t.rows, t.dvp, t.nk,
                                                         reinterpret_cast<const B*>(t.v16_next), t.nk_next);
    });
  }
}

/// One attention tile (attention_tile_steps); a tile in bf16 pairs within one Session of its
/// products (the tile configuration loaded once for both products, the tiles released after),
/// unless both products read K's and V's rows in place (TilePairs: rows_nt, rows_pairs), which use
/// none of the products' tiles.
template <class T, int VB, class Pairs = void>
void attention_tile(const AttentionTile<T>& t) {
  if constexpr (!std::is_void<Pairs>::value) {
    if (t.q16 != nullptr && (t.k16 == nullptr || t.v16 == nullptr)) {
      const typename Pairs::Session session;
      attention_tile_steps<T, VB, Pairs>(t);
      return;
    }
  }
  attention_tile_steps<T, VB, Pairs>(t);
}

template <int VB>
void key_pairs(const std::uint16_t* k, index_t ld, index_t n, index_t D, index_t d16, std::uint16_t* out, index_t ldo) {
  for (index_t p = 0; p < d16 / 2; ++p) {
    std::uint16_t* o = out + p * 2 * ldo;
    if (2 * p + 1 < D) {  // both dimensions: key j's 32-bit word p
      for (index_t j = 0; j < n; ++j) {
        std::uint32_t w;
        __builtin_memcpy(&w, k + j * ld + 2 * p, sizeof w);
        __builtin_memcpy(o + 2 * j, &w, sizeof w);
      }
    } else {
      for (index_t j = 0; j < n; ++j) {
        o[2 * j] = 2 * p < D ? k[j * ld + 2 * p] : 0;
        o[2 * j + 1] = 0;
      }
    }
  }
}

template <int VB>
void row_pairs(const std::uint16_t* a, const std::uint16_t* b, index_t n, index_t n_pad, std::uint16_t* out) {
  if (b != nullptr) {
    for (index_t c = 0; c < n; ++c) out[2 * c] = a[c], out[2 * c + 1] = b[c];
  } else {
    for (index_t c = 0; c < n; ++c) out[2 * c] = a[c], out[2 * c + 1] = 0;
  }
  for (index_t c = 2 * n; c < 2 * n_pad; ++c) out[c] = 0;
}

template <class T, int VB>
void tile_product(const TileProduct<T>& t) {
  constexpr int R = HostTraits::gemm_rows<VB>, NV = HostTraits::gemm_vectors;
  static_assert(HostTraits::attention_pad % (NV * VB / int(sizeof(T))) == 0,
                "kflash: the tile products' padding must be a multiple of the register block's columns");
  const auto run = [&](auto accumulate, auto a_transposed) {
    gemm<T, R, NV, VB, decltype(accumulate)::value, NV, R * NV / 2, decltype(a_transposed)::value>(
        t.a, t.lda, t.b, t.ldb, t.c, t.ldc, t.M, t.N, t.K, t.next, t.next_rows);
  };
  using yes = std::true_type;
  using no = std::false_type;
  if (t.accumulate) {
    t.a_transposed ? run(yes(), yes()) : run(yes(), no());
  } else {
    t.a_transposed ? run(no(), yes()) : run(no(), no());
  }
}

template <class T, int VB>
void backward_tile(const BackwardTile<T>& t) {
  for (index_t r = 0; r < t.rows; ++r) {
    T* s = t.s + r * t.ld;
    T* d = t.d + r * t.ld;
    const index_t jb = t.keys[r].begin, je = t.keys[r].end;
    for (index_t j = 0; j < jb; ++j) s[j] = T(0), d[j] = T(0);
    for (index_t j = je; j < t.nk; ++j) s[j] = T(0), d[j] = T(0);
    const T scale = t.scale, lse = t.lse[r], delta = t.delta[r];
    for (index_t j = jb; j < je; ++j) s[j] *= scale;
    // dP - D, times softcap's slope 1 - tanh^2 where it is on (the capped score is softcap tanh).
    if (t.softcap != T(0)) {
      const T cap = t.softcap, inv = t.inv_softcap;
      for (index_t j = jb; j < je; ++j) {
        const T th = impl::tanh(s[j] * inv);
        s[j] = cap * th;
        d[j] = (d[j] - delta) * (T(1) - th * th);
      }
    } else {
      for (index_t j = jb; j < je; ++j) d[j] -= delta;
    }
    if (t.score_rows != nullptr) score_stage_row(s, t.keys[r], T(0), T(0), t.score_rows + r);
    // A masked pair (score -inf) gives exactly 0, whatever its dP.
    for (index_t j = jb; j < je; ++j) {
      const bool hidden = s[j] == -infinity<T>();
      const T p = exp_nonpositive(s[j] - lse);
      s[j] = hidden ? T(0) : p;
      d[j] = hidden ? T(0) : p * d[j] * scale;
    }
  }
}

}  // namespace kflash::impl::host::internal
