// Attention's tile step, the one place a tile of scores becomes state: after the backend's product
// S = Q K^T (q pre-scaled), the score stage turns each raw score into the final one (softcap, ALiBi,
// bias, the user's score_mod) and removes the pairs the masks hide (their score becomes -inf, so
// their weight is exactly 0); the tile's (m, l) and weights follow (tile_state.hpp); the row's state
// absorbs the tile's, and O is updated through OutputFactors (attention_state.hpp).
// Causal and window masks have one representation: the range of keys each query row sees, which
// also tells the schedules which tiles to skip. The mask View and mask_mod act pair by pair.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/tile/tile_state.hpp>

#include <type_traits>

namespace kflash {

/// attention()'s user functors when none is given: scores and pairs pass unchanged.
struct NoScoreMod {};
struct NoMaskMod {};

}  // namespace kflash

namespace kflash::impl {

/// Keys [begin, end) that a query row sees.
struct KeyRange {
  index_t begin = 0;
  index_t end = 0;
  KOKKOS_INLINE_FUNCTION bool contains(index_t j) const { return begin <= j && j < end; }
  /// The same range within a tile of nk keys from t0, as indices in the tile.
  KOKKOS_INLINE_FUNCTION KeyRange in_tile(index_t t0, index_t nk) const {
    KeyRange r;
    r.begin = begin - t0 < 0 ? 0 : (begin - t0 < nk ? begin - t0 : nk);
    r.end = end - t0 < r.begin ? r.begin : (end - t0 < nk ? end - t0 : nk);
    return r;
  }
};

/// Which keys each query row of a sequence of Nk keys sees: row i's diagonal key is c = i + shift
/// (bottom-right alignment of Nq queries: shift = Nk - Nq), and it sees the keys j with
/// c - left <= j <= c + right (left, right = -1: unbounded on that side; causal is right = 0).
struct KeyMask {
  index_t Nk = 0, shift = 0;
  index_t left = -1, right = -1;
  KOKKOS_INLINE_FUNCTION KeyRange keys_of(index_t i) const {
    const index_t c = i + shift;
    KeyRange r;
    r.begin = left < 0 ? 0 : c - left;
    r.end = right < 0 ? Nk : c + right + 1;
    r.begin = r.begin < 0 ? 0 : (r.begin < Nk ? r.begin : Nk);
    r.end = r.end < r.begin ? r.begin : (r.end < Nk ? r.end : Nk);
    return r;
  }
  /// The keys any of the query rows [i0, i1] sees (their ranges move right with i).
  KOKKOS_INLINE_FUNCTION KeyRange keys_of_rows(index_t i0, index_t i1) const {
    KeyRange r{keys_of(i0).begin, keys_of(i1).end};
    if (r.end < r.begin) r.end = r.begin;
    return r;
  }
  /// The keys any of the rows [rho0, rho0 + nr) of a head group sees, where row rho is query row
  /// rho % nq of the group's head rho / nq (all of a head's keys where the rows span two heads).
  KOKKOS_INLINE_FUNCTION KeyRange keys_of_group_rows(index_t nq, index_t rho0, index_t nr) const {
    const bool one_head = rho0 / nq == (rho0 + nr - 1) / nq;
    return keys_of_rows(one_head ? rho0 % nq : 0, one_head ? (rho0 + nr - 1) % nq : nq - 1);
  }
};

/// The score stage for key j of a row that sees `keys`.
template <class T>
KOKKOS_INLINE_FUNCTION T score_stage(T score, const KeyRange& keys, index_t j) {
  return keys.contains(j) ? score : -infinity<T>();
}

/// Where a query row is: batch b, query head h, row i of its sequence, whose diagonal key is c
/// (KeyMask's i + shift).
struct RowAt {
  index_t b, h, i, c;
};

/// A read-only array of up to 4 indices through element strides; a stride of 0 broadcasts its index.
template <class V>
struct Strided {
  const V* data = nullptr;
  index_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  KOKKOS_INLINE_FUNCTION bool on() const { return data != nullptr; }
  /// Where element (a, b, c, d) is.
  KOKKOS_INLINE_FUNCTION const V* at(index_t a, index_t b = 0, index_t c = 0, index_t d = 0) const {
    return data + (a * s0 + b * s1 + c * s2 + d * s3);
  }
  KOKKOS_INLINE_FUNCTION V operator()(index_t a, index_t b = 0, index_t c = 0, index_t d = 0) const {
    return *at(a, b, c, d);
  }
};

/// Finishes a row's state st, with a sink (a logit without a value) joining its denominator when
/// `with_sink`; returns the factor that turns the row's running O into its output O / l.
template <class T>
KOKKOS_INLINE_FUNCTION T finish_row(SoftmaxState<T>& st, bool with_sink, T sink) {
  T fa = T(1);
  if (with_sink) fa = OutputFactors<T>::merge(st, SoftmaxState<T>::of(sink)).fa;
  return fa * SoftmaxNormalizer<T>(st).inv_sum;
}

/// The built-in score modifiers (each off unless set): softcap, ALiBi slopes by (b, h), an additive
/// bias and a mask View (true: the pair is visible) by (b, h, i, j).
template <class T>
struct ScoreOptions {
  T softcap = T(0);
  T inv_softcap = T(0);
  Strided<T> alibi;
  Strided<T> bias;
  Strided<bool> mask;
  bool any() const { return softcap != T(0) || alibi.on() || bias.on() || mask.on(); }
};

/// The score stage beyond the key ranges: the built-in modifiers, then the user's score_mod and
/// mask_mod, in the order the README documents. `active` is false when every part is off, and the
/// kernels then leave the scores as they are.
template <class T, class ScoreMod = NoScoreMod, class MaskMod = NoMaskMod>
struct ScoreStage {
  static constexpr bool user_score = !std::is_same<ScoreMod, NoScoreMod>::value;
  static constexpr bool user_mask = !std::is_same<MaskMod, NoMaskMod>::value;
  ScoreOptions<T> opt;
  ScoreMod score_mod;
  MaskMod mask_mod;
  bool active = false;

  ScoreStage(const ScoreOptions<T>& o, const ScoreMod& s, const MaskMod& m)
      : opt(o), score_mod(s), mask_mod(m), active(user_score || user_mask || o.any()) {}

  /// The score of pair (row, key j) from its raw score scale * q . k; -inf where a mask hides it.
  KOKKOS_INLINE_FUNCTION T operator()(T raw, const RowAt& row, index_t j) const {
    return user_and_masks(modified(raw, row, j), row, j, true);
  }
  /// The built-in modifiers: softcap, ALiBi, bias.
  KOKKOS_INLINE_FUNCTION T modified(T raw, const RowAt& row, index_t j) const {
    T s = raw;
    if (opt.softcap != T(0)) s = opt.softcap * impl::tanh(s * opt.inv_softcap);
    return modified_after_softcap(s, row, j);
  }
  /// The score of pair (row, key j) as operator() gives it, and its derivatives for
  /// attention_backward's chain rule: `cap_slope` = d modified / d raw (softcap's 1 - tanh^2; ALiBi
  /// and bias add constants) and `mod_slope` = d score / d modified (the user's
  /// score_mod.derivative(modified, b, h, i, j)), where `modified` is the score after softcap, ALiBi
  /// and bias.
  KOKKOS_INLINE_FUNCTION T score_and_slopes(T raw, const RowAt& row, index_t j, T& cap_slope, T& mod_slope) const {
    cap_slope = mod_slope = T(1);
    T s = raw;
    if (opt.softcap != T(0)) {
      const T t = impl::tanh(s * opt.inv_softcap);
      s = opt.softcap * t;
      cap_slope = T(1) - t * t;
    }
    s = modified_after_softcap(s, row, j);
    if constexpr (user_score) mod_slope = score_mod.derivative(s, row.b, row.h, row.i, j);
    return user_and_masks(s, row, j, true);
  }
  /// ALiBi and bias, the modifiers after softcap.
  KOKKOS_INLINE_FUNCTION T modified_after_softcap(T s, const RowAt& row, index_t j) const {
    if (opt.alibi.on()) {
      const index_t d = row.c - j;
      s -= opt.alibi(row.b, row.h) * T(d < 0 ? -d : d);
    }
    if (opt.bias.on()) s += opt.bias(row.b, row.h, row.i, j);
    return s;
  }
  /// The rest: the user's score_mod, the mask View (unless mask_view is false: applied already) and
  /// mask_mod.
  KOKKOS_INLINE_FUNCTION T user_and_masks(T s, const RowAt& row, index_t j, bool mask_view) const {
    if constexpr (user_score) s = score_mod(s, row.b, row.h, row.i, j);
    bool visible = !mask_view || !opt.mask.on() || opt.mask(row.b, row.h, row.i, j);
    if constexpr (user_mask) visible = visible && mask_mod(row.b, row.h, row.i, j);
    return visible ? s : -infinity<T>();
  }
};

/// The whole score stage for key j of a tile starting at key t0, of a row at `row` that sees the
/// tile's keys `keys` (indices in the tile).
template <class Stage, class T>
KOKKOS_INLINE_FUNCTION T staged_score(const Stage& stage, T raw, const RowAt& row, const KeyRange& keys, index_t j,
                                      index_t t0) {
  if (!keys.contains(j)) return -infinity<T>();
  return stage.active ? stage(raw, row, t0 + j) : raw;
}

/// Whether a user score_mod F of T scores has the member attention_backward needs:
///   T derivative(T score, b, h, i, j) const   (d score_mod / d score at score).
template <class F, class T, class = void>
struct has_score_derivative : std::false_type {};
template <class F, class T>
struct has_score_derivative<F, T,
                            std::void_t<decltype(std::declval<const F&>().derivative(
                                std::declval<T>(), index_t(), index_t(), index_t(), index_t()))>>
    : std::true_type {};

/// One pair's share of attention's gradients (FlashAttention 2's backward step): its probability p
/// = exp(s - lse) under the row's forward lse; dS = p (dP - D) carried back through the user's
/// score_mod to the modified score (dmod: what a bias receives), and through softcap to the raw
/// score scale * q . k (draw). A pair the masks hide is not visible: it takes no part (not even 0
/// times a NaN of its q, k or v).
template <class T>
struct PairGrad {
  bool visible;
  T p;
  T dmod;
  T draw;
};

/// The PairGrad of the pair (row, key j) whose raw score is raw, for a row of forward lse `lse`,
/// dP = dout_i . v_j and D = dout_i . o_i. A row without visible keys has lse = -inf and no visible
/// pair (or only its sink): nothing flows back; a NaN anywhere gives NaN.
template <class Stage, class T>
KOKKOS_INLINE_FUNCTION PairGrad<T> pair_grad(const Stage& stage, T raw, const RowAt& row, index_t j, T lse, T dp,
                                             T delta) {
  T cap_slope = T(1), mod_slope = T(1);
  const T s = stage.active ? stage.score_and_slopes(raw, row, j, cap_slope, mod_slope) : raw;
  if (s == -infinity<T>()) return {false, T(0), T(0), T(0)};
  const T p = exp(s - lse);
  const T dmod = p * (dp - delta) * mod_slope;
  return {true, p, dmod, dmod * cap_slope};
}

/// The rows of a tile for tile_steps, each read through score(k) (an accessor j -> score j of row
/// k) and written through store(k): rows of scores in memory, row k from p + k * ld...
template <class T>
struct StridedRows {
  T* p;
  index_t ld;
  KOKKOS_INLINE_FUNCTION Load<T> score(index_t k) const { return Load<T>{p + k * ld}; }
  KOKKOS_INLINE_FUNCTION Store<T> store(index_t k) const { return Store<T>{p + k * ld}; }
};
/// ... or one row's accessors.
template <class Score, class Store>
struct OneRow {
  const Score& s;
  const Store& w;
  KOKKOS_INLINE_FUNCTION const Score& score(index_t) const { return s; }
  KOKKOS_INLINE_FUNCTION const Store& store(index_t) const { return w; }
};

/// The step of rows k < g (g <= G) over one tile whose nk scores per row are in (rows.score(k)):
/// the score stage (rows.store(k) puts the masked scores back), each tile row's maximum, then its
/// state by Lanes against the row's new maximum (the larger of the two) with its weights handed to
/// rows.store(k), and the merge into the row's state row[k]. Weights against the new maximum are
/// final (the merge's factor fb for them is 1): only the row's l and O are rescaled. f[k] gets the
/// factors that update row k's O. Each part runs for all g rows before the next, and the lanes of
/// G rows are reduced together (Lanes::max_lanes, Lanes::sum_trees: rows_at_once rows in one tree).
template <class Lanes, class T, int G, class Rows>
KOKKOS_INLINE_FUNCTION void tile_steps(SoftmaxState<T>* row, const KeyRange* keys, index_t nk, index_t g,
                                       const Rows& rows, OutputFactors<T>* f) {
  typename Lanes::Block lanes[G];
  T rest[G], lane_max[G];
  for (int k = 0; k < G; ++k) {
    if (k >= g) {  // rows past g reduce empty lanes
      Lanes::fill(lanes[k], -infinity<T>());
      rest[k] = -infinity<T>();  // never read; set so that no compiler sees it uninitialized
      continue;
    }
    const auto& score = rows.score(k);
    const KeyRange& kr = keys[k];
    if (kr.begin > 0 || kr.end < nk) {  // some pairs hidden
      const auto& store = rows.store(k);
      for (index_t j = 0; j < nk; ++j) store(j, score_stage(score(j), kr, j));
    }
    rest[k] = tile_max_lanes<Lanes, T>(index_t(0), nk, score, lanes[k]);
  }
  Lanes::max_lanes(lanes, lane_max);
  TileSums<Lanes, T> sums[G];
  T ref[G];
  for (int k = 0; k < g; ++k) {
    const T m = rest[k] > lane_max[k] ? rest[k] : lane_max[k];
    ref[k] = m > row[k].max ? m : row[k].max;
    sums[k].add_weights(ref[k], index_t(0), nk, rows.score(k), rows.store(k));
  }
  for (int k = 0; k < G; ++k) lanes[k] = sums[k].lanes;  // rows past g: zeros
  T roots[G];
  Lanes::sum_trees(lanes, roots);
  for (int k = 0; k < g; ++k) f[k] = OutputFactors<T>::merge(row[k], sums[k].state(ref[k], roots[k]));
}

/// tile_steps for one row whose nk scores score(j) are in (store(j, s) writes them back); returns
/// the factors that update the row's O.
template <class Lanes, class T, class Score, class Store>
KOKKOS_INLINE_FUNCTION OutputFactors<T> tile_step(SoftmaxState<T>& row, const KeyRange& keys, index_t nk,
                                                  const Score& score, const Store& store) {
  OutputFactors<T> f;
  tile_steps<Lanes, T, 1>(&row, &keys, nk, 1, OneRow<Score, Store>{score, store}, &f);
  return f;
}

}  // namespace kflash::impl
