// attention_backward's schedule (GUIDE §8, FlashAttention 2's algorithm): D =
// rowsum(dout ⊙ o) per query row first; then dq by the thread that owns each
// query row, and dk and dv by the thread that owns each key (summing over the
// query heads of its group), each recomputing its pairs' P from the forward's
// lse through the tile layer's pair_grad (the portable schedule; host spaces
// take the tiles of host/host_attention_backward.hpp). No atomics: each
// gradient element is written by one thread in a fixed order, so the gradients
// are bit-identical run to run and for any number of threads. Extra memory: D,
// one value per query row. The options' gradients (sinks, bias) by the thread
// that owns each of their entries, the same way.
#pragma once

#include <kflash/impl/schedule/attention_plan.hpp>

namespace kflash::impl {

/// What every backward kernel reads: the plan, the forward's terms, the
/// sequences, q, k, v, dout and the forward's lse, and D.
template <class Terms, class Seq, class QV, class KV, class VV, class DOV, class LV, class DV>
struct BackwardPairs {
  using T = std::remove_cv_t<typename DOV::value_type>;
  AttentionPlan p;
  Terms terms;
  Seq seq;
  QV q;
  KV k;
  VV v;
  DOV dout;
  LV lse;
  DV delta;

  /// The key mask of batch b's sequences (bottom-right aligned, as the
  /// forward's).
  KOKKOS_INLINE_FUNCTION KeyMask mask_of(index_t b) const {
    const index_t nq = seq.nq(b), nk = seq.nk(b);
    return KeyMask{nk, p.at_offset ? p.query_offset : nk - nq, p.window_left, p.window_right};
  }
  /// Whether the block mask hides the pair (i, j) of query head h.
  KOKKOS_INLINE_FUNCTION bool block_hidden(index_t b, index_t h, index_t i, index_t j) const {
    const BlockMask &bm = terms.block_mask;
    return bm.blocks.on() && !bm.blocks(b, h, i / bm.rows, j / bm.keys);
  }
  /// The PairGrad of query row (b, h, i) at `at` with key j of K/V head hk.
  KOKKOS_INLINE_FUNCTION PairGrad<T> pair(index_t b, index_t h, index_t hk, index_t i, const RowAt &at,
                                          index_t j) const {
    T dot = T(0), dp = T(0);
    for (index_t d = 0; d < p.D; ++d) dot += q(b, h, i, d) * k(b, hk, j, d);
    for (index_t d = 0; d < p.Dv; ++d) dp += dout(b, h, i, d) * v(b, hk, j, d);
    return pair_grad(terms.stage, terms.scale * dot, at, j, T(lse(b, h, i)), dp, delta(b, h, i));
  }
};

/// D(b, h, i) = sum_d dout(b, h, i, d) o(b, h, i, d), by query row.
template <class Seq, class DOV, class OV, class DV>
struct BackwardDeltaKernel {
  Seq seq;
  DOV dout;
  OV o;
  DV delta;
  index_t Hq, Nq, Dv;
  KOKKOS_INLINE_FUNCTION void operator()(index_t item) const {
    const index_t i = item % Nq, h = item / Nq % Hq, b = item / (Nq * Hq);
    if (i >= seq.nq(b)) return;
    typename DV::non_const_value_type sum = 0;
    for (index_t d = 0; d < Dv; ++d) sum += dout(b, h, i, d) * o(b, h, i, d);
    delta(b, h, i) = sum;
  }
};

/// dq(b, h, i, :) = sum over the row's visible keys j of draw_ij * scale * k_j,
/// by query row.
template <class Pairs, class DQV>
struct BackwardDqKernel {
  Pairs pairs;
  DQV dq;
  KOKKOS_INLINE_FUNCTION void operator()(index_t item) const {
    const AttentionPlan &p = pairs.p;
    const index_t i = item % p.Nq, h = item / p.Nq % p.Hq, b = item / (p.Nq * p.Hq);
    if (i >= pairs.seq.nq(b)) return;
    const index_t hk = h / p.group;
    const KeyMask mask = pairs.mask_of(b);
    const KeyRange keys = mask.keys_of(i);
    const RowAt at{b, h, i, i + mask.shift};
    for (index_t d = 0; d < p.D; ++d) dq(b, h, i, d) = 0;
    for (index_t j = keys.begin; j < keys.end; ++j) {
      if (pairs.block_hidden(b, h, i, j)) continue;
      const auto g = pairs.pair(b, h, hk, i, at, j);
      if (!g.visible) continue;
      const auto f = g.draw * pairs.terms.scale;
      for (index_t d = 0; d < p.D; ++d) dq(b, h, i, d) += f * pairs.k(b, hk, j, d);
    }
  }
};

/// dk(b, hk, j, :) = sum of draw_ij * scale * q_i and dv(b, hk, j, :) = sum of
/// p_ij * dout_i over the query rows i of every query head of K/V head hk's
/// group that see key j, by key.
template <class Pairs, class DKV, class DVV>
struct BackwardDkvKernel {
  Pairs pairs;
  DKV dk;
  DVV dv;
  KOKKOS_INLINE_FUNCTION void operator()(index_t item) const {
    const AttentionPlan &p = pairs.p;
    const index_t j = item % p.Nk, hk = item / p.Nk % p.Hk, b = item / (p.Nk * p.Hk);
    if (j >= pairs.seq.nk(b)) return;
    for (index_t d = 0; d < p.D; ++d) dk(b, hk, j, d) = 0;
    for (index_t d = 0; d < p.Dv; ++d) dv(b, hk, j, d) = 0;
    const KeyMask mask = pairs.mask_of(b);
    const index_t nq = pairs.seq.nq(b);
    for (index_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
      for (index_t i = 0; i < nq; ++i) {
        if (!mask.keys_of(i).contains(j) || pairs.block_hidden(b, h, i, j)) continue;
        const auto g = pairs.pair(b, h, hk, i, RowAt{b, h, i, i + mask.shift}, j);
        if (!g.visible) continue;
        const auto f = g.draw * pairs.terms.scale;
        for (index_t d = 0; d < p.D; ++d) dk(b, hk, j, d) += f * pairs.q(b, h, i, d);
        for (index_t d = 0; d < p.Dv; ++d) dv(b, hk, j, d) += g.p * pairs.dout(b, h, i, d);
      }
    }
  }
};

/// The gradients of the options that have one, as unmanaged Views (null where
/// not asked for): dsinks (Hq) and dbias in the bias's own shape (B or 1, Hq or
/// 1, Nq, Nk).
template <class T, class Mem>
struct OptionGrads {
  Kokkos::View<T *, Kokkos::LayoutStride, Mem, Kokkos::MemoryUnmanaged> dsinks;
  Kokkos::View<T ****, Kokkos::LayoutStride, Mem, Kokkos::MemoryUnmanaged> dbias;
};

/// dsinks(h) = -sum over the rows (b, i) of query head h of exp(sink_h - lse)
/// D: a sink's probability takes its share of every row's output away (its
/// value is 0). By query head.
template <class Pairs, class DS>
struct BackwardDsinksKernel {
  Pairs pairs;
  DS dsinks;
  KOKKOS_INLINE_FUNCTION void operator()(index_t h) const {
    const auto sink = pairs.terms.sinks(h);
    typename Pairs::T sum = 0;
    for (index_t b = 0; b < pairs.p.B; ++b)
      for (index_t i = 0; i < pairs.seq.nq(b); ++i) {
        const typename Pairs::T lse = pairs.lse(b, h, i);
        if (lse != -infinity<typename Pairs::T>()) sum -= exp(sink - lse) * pairs.delta(b, h, i);  // else no mass
      }
    dsinks(h) = sum;
  }
};

/// dbias(bb, hb, i, j) = sum of the pair's dmod over the batches and query
/// heads the entry is broadcast to (one, or all where the bias's extent is 1),
/// in order. By bias entry.
template <class Pairs, class DB>
struct BackwardDbiasKernel {
  Pairs pairs;
  DB dbias;
  KOKKOS_INLINE_FUNCTION void operator()(index_t n) const {
    const AttentionPlan &p = pairs.p;
    const index_t nk_ = dbias.extent(3), nq_ = dbias.extent(2), eh = dbias.extent(1);
    const index_t j = n % nk_, i = n / nk_ % nq_, hb = n / (nk_ * nq_) % eh, bb = n / (nk_ * nq_ * eh);
    const bool all_b = dbias.extent(0) == 1, all_h = eh == 1;
    typename Pairs::T sum = 0;
    for (index_t b = all_b ? 0 : bb; b < (all_b ? p.B : bb + 1); ++b) {
      if (i >= pairs.seq.nq(b) || j >= pairs.seq.nk(b)) continue;
      const KeyMask mask = pairs.mask_of(b);
      if (!mask.keys_of(i).contains(j)) continue;
      for (index_t h = all_h ? 0 : hb; h < (all_h ? p.Hq : hb + 1); ++h) {
        if (pairs.block_hidden(b, h, i, j)) continue;
        const auto g = pairs.pair(b, h, h / p.group, i, RowAt{b, h, i, i + mask.shift}, j);
        if (g.visible) sum += g.dmod;
      }
    }
    dbias(bb, hb, i, j) = sum;
  }
};

/// Sets every element of a View of rank 3 or 4, any layout, to 0 (Kokkos 3.4
/// cannot fill a LayoutStride View).
template <class View>
struct ZeroKernel {
  View v;
  KOKKOS_INLINE_FUNCTION void operator()(index_t n) const {
    const index_t last = v.extent(view_rank<View> - 1);
    const index_t d = n % last, rest = n / last;
    if constexpr (view_rank<View> == 4) {
      v(rest / v.extent(2) / v.extent(1), rest / v.extent(2) % v.extent(1), rest % v.extent(2), d) = 0;
    } else {
      v(rest / v.extent(1), rest % v.extent(1), d) = 0;
    }
  }
};

template <class ExecSpace, class View>
void zero_fill(const ExecSpace &exec, const View &v) {
  Kokkos::parallel_for("kflash::attention_backward zero",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(exec, 0, index_t(v.size())),
                       ZeroKernel<View>{v});
}

/// The Pairs of a checked call whose shapes are in p (the forward's plan before
/// scheduling), on Views as the kernels read them (dense, or varlen's packed
/// rows), with D computed (its View held by the Pairs: fence before they go).
template <class ExecSpace, class Terms, class Seq, class QV, class KV, class VV, class OV, class LV, class DOV>
auto backward_pairs(const ExecSpace &exec, AttentionPlan p, const Terms &terms, const Seq &seq, const QV &q,
                    const KV &k, const VV &v, const OV &o, const LV &lse, const DOV &dout) {
  using T = typename OV::non_const_value_type;
  using DV = Kokkos::View<T ***, Kokkos::LayoutRight, typename ExecSpace::memory_space>;
  p.group = p.Hq / p.Hk;
  const DV delta(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::attention_backward D"), p.B, p.Hq,
                 p.Nq);
  Kokkos::parallel_for("kflash::attention_backward D",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(exec, 0, p.B * p.Hq * p.Nq),
                       BackwardDeltaKernel<Seq, DOV, OV, DV>{seq, dout, o, delta, p.Hq, p.Nq, p.Dv});
  return BackwardPairs<Terms, Seq, QV, KV, VV, DOV, LV, DV>{p, terms, seq, q, k, v, dout, lse, delta};
}

/// dq by query row, then dk and dv by key: the portable schedule.
template <class ExecSpace, class Pairs, class DQV, class DKV, class DVV>
void run_backward_by_rows(const ExecSpace &exec, const Pairs &pairs, const DQV &dq, const DKV &dk, const DVV &dv) {
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;
  const AttentionPlan &p = pairs.p;
  Kokkos::parallel_for("kflash::attention_backward dq", Range(exec, 0, p.B * p.Hq * p.Nq),
                       BackwardDqKernel<Pairs, DQV>{pairs, dq});
  Kokkos::parallel_for("kflash::attention_backward dk dv", Range(exec, 0, p.B * p.Hk * p.Nk),
                       BackwardDkvKernel<Pairs, DKV, DVV>{pairs, dk, dv});
}

/// The options' gradients grads asks for (dsinks, dbias).
template <class ExecSpace, class Pairs, class Grads>
void run_option_grads(const ExecSpace &exec, const Pairs &pairs, const Grads &grads) {
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;
  if (grads.dsinks.data())
    Kokkos::parallel_for("kflash::attention_backward dsinks", Range(exec, 0, pairs.p.Hq),
                         BackwardDsinksKernel<Pairs, decltype(grads.dsinks)>{pairs, grads.dsinks});
  if (grads.dbias.data())
    Kokkos::parallel_for("kflash::attention_backward dbias", Range(exec, 0, index_t(grads.dbias.size())),
                         BackwardDbiasKernel<Pairs, decltype(grads.dbias)>{pairs, grads.dbias});
}

}  // namespace kflash::impl
