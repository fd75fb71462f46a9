// The host schedule of attention_backward's dq, dk and dv (FlashAttention 2's tiles, without its
// atomics): the keys of each K/V head are dealt, block by block, to a fixed number of groups (a
// function of the shapes alone); one thread per group takes its blocks in order and, for each,
// every block of query rows of the head's group that sees it: scores and dP by the compiled tile
// products, P and dS in their place (by the compiled backward_tile for the built-in options, pair
// by pair through the tile layer's pair_grad for the user's functors and block masks), then
// dv += P^T dout, dk += dS^T q and the group's partial dq += dS k. A last pass sums each dq over the
// groups in order. Each sum has one order whatever the number of threads: bit-identical results.
#pragma once

#include <cstdint>
#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/attention_backward.hpp>
#include <kflash/impl/workspace.hpp>
#include <type_traits>
#include <utility>

namespace kflash::impl::host {

/// Where the host schedule keeps what it shares, in one workspace: its operands, packed once per
/// call and zero-padded (rows to whole blocks, columns to attention_pad): per K/V head, K by rows
/// (ldk x dp) and, block by block of keys, K and V transposed (dp x block, dvp x block); per query
/// head, Q and dout by rows (ldq x dp, ldq x dvp); and each key group's partial dq (groups x B x Hq
/// x ldq x dp). Offsets in bytes; extra memory O((groups + 1) N (D + Dv)).
struct BackwardPacks {
  static constexpr index_t block = HostTraits::backward_block;
  index_t dp, dvp, ldq, ldk, groups;
  std::size_t ks = 0, kt, vt, qs, dos, dq, bytes;

  template <class T, class MemorySpace>
  static BackwardPacks of(const AttentionPlan& p) {
    using Scratch = CachedWorkspace<MemorySpace>;
    constexpr index_t pad = HostTraits::attention_pad;
    BackwardPacks w;
    w.dp = (p.D + pad - 1) / pad * pad, w.dvp = (p.Dv + pad - 1) / pad * pad;
    w.ldq = (p.Nq + block - 1) / block * block, w.ldk = (p.Nk + block - 1) / block * block;
    // Enough groups for backward_items work items, at most one per block of keys.
    const index_t heads = p.B * p.Hk > 0 ? p.B * p.Hk : 1, blocks = w.ldk / block;
    w.groups = (HostTraits::backward_items + heads - 1) / heads;
    w.groups = w.groups < blocks ? w.groups : (blocks > 0 ? blocks : 1);
    const auto values = [](index_t n) { return Scratch::aligned(sizeof(T) * std::size_t(n)); };
    const index_t keys = p.B * p.Hk * w.ldk, rows = p.B * p.Hq * w.ldq;
    w.kt = w.ks + values(keys * w.dp);
    w.vt = w.kt + values(keys * w.dp);
    w.qs = w.vt + values(keys * w.dvp);
    w.dos = w.qs + values(rows * w.dp);
    w.dq = w.dos + values(rows * w.dvp);
    w.bytes = w.dq + values(w.groups * rows * w.dp);
    return w;
  }
};

/// Packs x(b, h, n, c) (n < the sequence's queries or keys, c < w; else 0) of every head into out:
/// by rows (out[(bh ld + n) wp + c]) or, with `transposed`, block by block of n, each block
/// transposed (out[((bh ld + n0) wp + c) block + n - n0], n0 = n's block). One item per block of
/// rows of a head.
template <class View, class Seq, class T>
struct PackOperand {
  static constexpr index_t block = HostTraits::backward_block;
  View x;
  Seq seq;
  T* out;
  index_t H, ld, w, wp;
  bool keys, transposed;

  void operator()(index_t item) const {
    const index_t per_head = ld / block, bh = item / per_head, n0 = item % per_head * block;
    const index_t b = bh / H, h = bh % H, count = keys ? seq.nk(b) : seq.nq(b);
    T* o = out + (bh * ld + n0) * wp;
    for (index_t n = 0; n < block; ++n)
      for (index_t c = 0; c < wp; ++c) {
        const T value = n0 + n < count && c < w ? T(x(b, h, n0 + n, c)) : T(0);
        (transposed ? o[c * block + n] : o[n * wp + c]) = value;
      }
  }
};

template <class ExecSpace, class Pairs, class DQV, class DKV, class DVV>
struct HostAttentionBackward {
  using T = typename Pairs::T;
  using Stage = std::decay_t<decltype(std::declval<Pairs>().terms.stage)>;
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using scratch_space = typename ExecSpace::scratch_memory_space;
  using Values = Kokkos::View<T*, scratch_space, Kokkos::MemoryUnmanaged>;
  using Rows = Kokkos::View<RowAt*, scratch_space, Kokkos::MemoryUnmanaged>;
  using Ranges = Kokkos::View<KeyRange*, scratch_space, Kokkos::MemoryUnmanaged>;
  using ScoreRows = Kokkos::View<TileScoreRow<T>*, scratch_space, Kokkos::MemoryUnmanaged>;
  static constexpr index_t block = HostTraits::backward_block;
  static constexpr index_t pad = HostTraits::attention_pad;
  static constexpr index_t align = 64 / index_t(sizeof(T));  // tiles start on cache lines
  static constexpr bool user_functors = Stage::user_score || Stage::user_mask;

  Pairs pairs;
  DQV dq;
  DKV dk;
  DVV dv;
  BackwardPacks w;
  const T *ks_, *kt_, *vt_, *qs_, *dos_;  // the packed operands
  T* dq_;                                 // the groups' partial dq
  index_t dp, dvp, nkb;                   // D and Dv padded; blocks of keys per head
  int scratch_level = 0;

  HostAttentionBackward(const Pairs& pairs_, const DQV& dq_out, const DKV& dk_, const DVV& dv_, const BackwardPacks& w_,
                        char* workspace)
      : pairs(pairs_), dq(dq_out), dk(dk_), dv(dv_), w(w_) {
    ks_ = reinterpret_cast<const T*>(workspace + w.ks), kt_ = reinterpret_cast<const T*>(workspace + w.kt);
    vt_ = reinterpret_cast<const T*>(workspace + w.vt), qs_ = reinterpret_cast<const T*>(workspace + w.qs);
    dos_ = reinterpret_cast<const T*>(workspace + w.dos), dq_ = reinterpret_cast<T*>(workspace + w.dq);
    dp = w.dp, dvp = w.dvp, nkb = w.ldk / block;
  }
  static index_t round_up(index_t n) { return (n + pad - 1) / pad * pad; }

  /// The tiles of a work item in its scratch, in values: a block of keys' dk and dv, and a block
  /// pair's scores and dP.
  index_t tile_values() const { return block * (dp + dvp) + 2 * block * block + align; }
  std::size_t scratch_bytes() const {
    return Values::shmem_size(tile_values()) + Rows::shmem_size(block) + 2 * Ranges::shmem_size(block) +
           ScoreRows::shmem_size(block) + Values::shmem_size(2 * block);
  }

  /// The packed operands of query head h and K/V head hk of batch b: Q, dout by rows from query row
  /// i0; K by rows from key j0; K and V transposed, the block of key j0.
  const T* q_rows(index_t b, index_t h, index_t i0) const { return qs_ + ((b * pairs.p.Hq + h) * w.ldq + i0) * dp; }
  const T* dout_rows(index_t b, index_t h, index_t i0) const {
    return dos_ + ((b * pairs.p.Hq + h) * w.ldq + i0) * dvp;
  }
  /// Key group g's partial dq of query head h of batch b from row i0.
  T* dq_rows(index_t g, index_t b, index_t h, index_t i0) const {
    return dq_ + (((g * pairs.p.B + b) * pairs.p.Hq + h) * w.ldq + i0) * dp;
  }
  const T* k_rows(index_t b, index_t hk, index_t j0) const { return ks_ + ((b * pairs.p.Hk + hk) * w.ldk + j0) * dp; }
  const T* k_block(index_t b, index_t hk, index_t j0) const { return kt_ + ((b * pairs.p.Hk + hk) * w.ldk + j0) * dp; }
  const T* v_block(index_t b, index_t hk, index_t j0) const { return vt_ + ((b * pairs.p.Hk + hk) * w.ldk + j0) * dvp; }

  /// A block of query rows: where its rows are, the keys each sees (and those in the current tile),
  /// their score stage in the tile, their forward lse and D.
  struct QueryBlock {
    RowAt* at;
    KeyRange* keys;
    KeyRange* tile_keys;
    TileScoreRow<T>* score_rows;
    T* lse;
    T* delta;
    index_t rows;
  };

  /// The team's tiles (from a cache line) and its QueryBlock's arrays, in its scratch.
  T* tiles(const member_type& team, QueryBlock& qb) const {
    const auto& scratch = team.team_scratch(scratch_level);
    T* base = Values(scratch, tile_values()).data();
    qb.at = Rows(scratch, block).data();
    qb.keys = Ranges(scratch, block).data();
    qb.tile_keys = Ranges(scratch, block).data();
    qb.score_rows = ScoreRows(scratch, block).data();
    qb.lse = Values(scratch, 2 * block).data();
    qb.delta = qb.lse + block;
    qb.rows = 0;
    const auto misaligned = index_t(reinterpret_cast<std::uintptr_t>(base) / sizeof(T) % align);
    return base + (misaligned == 0 ? 0 : align - misaligned);
  }

  /// Fills qb for rows [i0, i0 + block) of query head h of batch b (those the sequence has).
  void load_rows(QueryBlock& qb, index_t b, index_t h, index_t i0, const KeyMask& mask) const {
    const index_t nq = pairs.seq.nq(b);
    qb.rows = nq - i0 < block ? nq - i0 : block;
    for (index_t r = 0; r < qb.rows; ++r) {
      const index_t i = i0 + r;
      qb.at[r] = RowAt{b, h, i, i + mask.shift};
      qb.keys[r] = mask.keys_of(i);
      qb.lse[r] = T(pairs.lse(b, h, i));
      qb.delta[r] = pairs.delta(b, h, i);
    }
  }

  /// Whether any row of the block sees a key of [j0, j0 + nk).
  static bool sees_any(const QueryBlock& qb, index_t j0, index_t nk) {
    for (index_t r = 0; r < qb.rows; ++r)
      if (qb.keys[r].begin < j0 + nk && qb.keys[r].end > j0) return true;
    return false;
  }

  /// The pairs of a block of query rows (qs, dos by rows) and keys [j0, j0 + nk) (kt, vt: their
  /// block transposed): scores and dP by the tile products into s and dps (block x block, rows of
  /// keys), then P and dS (times the scale) in their place, 0 for the pairs a row does not see.
  void pair_block(const T* qs, const T* dos, const T* kt, const T* vt, T* s, T* dps, QueryBlock& qb, index_t j0,
                  index_t nk) const {
    const AttentionPlan& p = pairs.p;
    const index_t kp = round_up(nk);
    tile_product(TileProduct<T>{qs, dp, kt, block, s, block, qb.rows, kp, p.D});
    tile_product(TileProduct<T>{dos, dvp, vt, block, dps, block, qb.rows, kp, p.Dv});
    const T scale = pairs.terms.scale;
    const Stage& stage = pairs.terms.stage;
    for (index_t r = 0; r < qb.rows; ++r) qb.tile_keys[r] = qb.keys[r].in_tile(j0, nk);
    if constexpr (!user_functors) {
      if (!pairs.terms.block_mask.blocks.on()) {  // the built-in stage: in the compiled kernel
        const ScoreOptions<T>& so = stage.opt;
        const bool per_row = stage.active && (so.alibi.on() || so.bias.on() || so.mask.on());
        if (per_row)
          for (index_t r = 0; r < qb.rows; ++r) qb.score_rows[r] = tile_score_row(so, qb.at[r], j0, true);
        BackwardTile<T> tile{s, dps, block, qb.rows, nk, qb.tile_keys, qb.lse, qb.delta, scale};
        if (stage.active) tile.softcap = so.softcap, tile.inv_softcap = so.inv_softcap;
        tile.score_rows = per_row ? qb.score_rows : nullptr;
        backward_tile(tile);
        return;
      }
    }
    // The user's functors or a block mask: pair by pair through the tile layer.
    for (index_t r = 0; r < qb.rows; ++r) {
      const RowAt& at = qb.at[r];
      const KeyRange keys = qb.tile_keys[r];
      for (index_t jj = 0; jj < nk; ++jj) {
        T& sv = s[r * block + jj];
        T& dv_ = dps[r * block + jj];
        if (!keys.contains(jj) || pairs.block_hidden(at.b, at.h, at.i, j0 + jj)) {
          sv = T(0), dv_ = T(0);
          continue;
        }
        const PairGrad<T> g = pair_grad(stage, scale * sv, at, j0 + jj, qb.lse[r], dv_, qb.delta[r]);
        sv = g.visible ? g.p : T(0);
        dv_ = g.visible ? g.draw * scale : T(0);
      }
    }
  }

  /// Key group g of K/V head hk of batch b: dk and dv of its blocks of keys, and its partial dq of
  /// the head's group of query heads.
  void operator()(const member_type& team) const {
    const AttentionPlan& p = pairs.p;
    const index_t G = w.groups, g = team.league_rank() % G, hk = team.league_rank() / G % p.Hk,
                  b = team.league_rank() / (G * p.Hk);
    const index_t nk_b = pairs.seq.nk(b), nq = pairs.seq.nq(b);
    const index_t h0 = hk * p.group, h1 = h0 + p.group;
    for (index_t h = h0; h < h1; ++h) {
      T* part = dq_rows(g, b, h, 0);
      for (index_t n = 0; n < nq * dp; ++n) part[n] = T(0);
    }
    QueryBlock qb;
    T* dks = tiles(team, qb);    // block x dp
    T* dvs = dks + block * dp;   // block x dvp
    T* s = dvs + block * dvp;    // block x block: scores, then P
    T* dps = s + block * block;  // block x block: dP, then dS
    const KeyMask mask = pairs.mask_of(b);
    for (index_t j0 = g * block; j0 < nk_b; j0 += G * block) {
      const index_t nk = nk_b - j0 < block ? nk_b - j0 : block;
      const T* kt = k_block(b, hk, j0);
      const T* vt = v_block(b, hk, j0);
      const T* ks = k_rows(b, hk, j0);
      for (index_t n = 0; n < block * dp; ++n) dks[n] = T(0);
      for (index_t n = 0; n < block * dvp; ++n) dvs[n] = T(0);
      for (index_t h = h0; h < h1; ++h)
        for (index_t i0 = 0; i0 < nq; i0 += block) {
          load_rows(qb, b, h, i0, mask);
          if (!sees_any(qb, j0, nk)) continue;
          const T* qs = q_rows(b, h, i0);
          const T* dos = dout_rows(b, h, i0);
          pair_block(qs, dos, kt, vt, s, dps, qb, j0, nk);
          // dq += dS k; dv += P^T dout and dk += dS^T q (P and dS read transposed), asking for the
          // next block's dout and q (the packs are far larger than the caches).
          tile_product(TileProduct<T>{dps, block, ks, dp, dq_rows(g, b, h, i0), dp, qb.rows, dp, nk, true});
          const bool last = i0 + block >= nq;
          const index_t hn = last ? h + 1 : h, in = last ? 0 : i0 + block;
          const index_t ahead = hn < h1 ? (nq - in < block ? nq - in : block) : 0;
          tile_product(
              TileProduct<T>{s, block, dos, dvp, dvs, dvp, nk, dvp, qb.rows, true, true, dout_rows(b, hn, in), ahead});
          tile_product(
              TileProduct<T>{dps, block, qs, dp, dks, dp, nk, dp, qb.rows, true, true, q_rows(b, hn, in), ahead});
        }
      for (index_t jj = 0; jj < nk; ++jj) {
        for (index_t d = 0; d < p.D; ++d) dk(b, hk, j0 + jj, d) = dks[jj * dp + d];
        for (index_t d = 0; d < p.Dv; ++d) dv(b, hk, j0 + jj, d) = dvs[jj * dvp + d];
      }
    }
  }
};

/// dq(b, h, i, :) = the sum of the key groups' partial dq in group order, by query row.
template <class Seq, class DQV, class T>
struct SumPartialDq {
  Seq seq;
  DQV dq;
  const T* parts;
  index_t B, Hq, Nq, ldq, dp, D, groups;

  void operator()(index_t item) const {
    const index_t i = item % Nq, h = item / Nq % Hq, b = item / (Nq * Hq);
    if (i >= seq.nq(b)) return;
    const std::size_t stride = std::size_t(B * Hq * ldq * dp);
    const T* part = parts + ((b * Hq + h) * ldq + i) * dp;
    for (index_t d = 0; d < D; ++d) {
      T sum = part[d];
      for (index_t g = 1; g < groups; ++g) sum += part[g * stride + d];
      dq(b, h, i, d) = sum;
    }
  }
};

/// dq, dk and dv of a checked call by the host schedule: its operands packed, then the key groups
/// (each work item handed to the next free thread: causal and windowed blocks differ in work), then
/// the sum of their partial dq.
template <class ExecSpace, class Pairs, class DQV, class DKV, class DVV>
void run_host_attention_backward(const ExecSpace& exec, const Pairs& pairs, const DQV& dq, const DKV& dk,
                                 const DVV& dv) {
  using T = typename Pairs::T;
  using mem = typename ExecSpace::memory_space;
  const AttentionPlan& p = pairs.p;
  const BackwardPacks w = BackwardPacks::of<T, mem>(p);
  const CachedWorkspace<mem> workspace(exec, w.bytes, "kflash::attention_backward workspace");
  char* base = workspace.template at<char>(0);
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;
  const auto pack = [&](const auto& x, std::size_t at, index_t H, index_t ld, index_t width, index_t wp, bool keys,
                        bool transposed) {
    using Pack = PackOperand<std::decay_t<decltype(x)>, decltype(pairs.seq), T>;
    Kokkos::parallel_for("kflash::attention_backward pack", Range(exec, 0, p.B * H * (ld / w.block)),
                         Pack{x, pairs.seq, reinterpret_cast<T*>(base + at), H, ld, width, wp, keys, transposed});
  };
  pack(pairs.k, w.ks, p.Hk, w.ldk, p.D, w.dp, true, false);
  pack(pairs.k, w.kt, p.Hk, w.ldk, p.D, w.dp, true, true);
  pack(pairs.v, w.vt, p.Hk, w.ldk, p.Dv, w.dvp, true, true);
  pack(pairs.q, w.qs, p.Hq, w.ldq, p.D, w.dp, false, false);
  pack(pairs.dout, w.dos, p.Hq, w.ldq, p.Dv, w.dvp, false, false);
  using Kernel = HostAttentionBackward<ExecSpace, Pairs, DQV, DKV, DVV>;
  Kernel kernel(pairs, dq, dk, dv, w, base);
  const std::size_t bytes = kernel.scratch_bytes();
  kernel.scratch_level = bytes <= std::size_t(Kokkos::TeamPolicy<ExecSpace>::scratch_size_max(0)) ? 0 : 1;
  using Policy = Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
  Kokkos::parallel_for(
      "kflash::attention_backward dq dk dv",
      Policy(exec, int(p.B * p.Hk * w.groups), 1, 1).set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes)),
      kernel);
  Kokkos::parallel_for("kflash::attention_backward dq sum", Range(exec, 0, p.B * p.Hq * p.Nq),
                       SumPartialDq<decltype(pairs.seq), DQV, T>{pairs.seq, dq, reinterpret_cast<const T*>(base + w.dq),
                                                                 p.B, p.Hq, p.Nq, w.ldq, w.dp, p.D, w.groups});
  exec.fence();  // the workspace must outlive the kernels
}

}  // namespace kflash::impl::host
