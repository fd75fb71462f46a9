// merge_attention's schedule: partial attention results over disjoint key sets merge exactly
// through the monoid, O with the same factors.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/math.hpp>
#include <kflash/impl/schedule/sequences.hpp>

namespace kflash::impl {

/// Merges S partial results over disjoint key sets: o(b, h, i, d) and lse(b, h, i) from
/// o_parts(s, b, h, i, d) and lse_parts(s, b, h, i), with the SoftmaxState merge. A work item is
/// `width` columns of one row (the whole row, or one column where few rows would leave the
/// machine idle: split-K/V decoding); each item merges its row's states itself. Rows past their
/// sequence's length (seq.nq(b), varlen) are left alone.
template <class OP, class LP, class OV, class LV, class Seq>
struct MergeKernel {
  using T = typename OV::non_const_value_type;
  OP o_parts;
  LP lse_parts;
  OV o;
  LV lse;
  bool has_lse;
  index_t S, H, N, Dv, width;
  Seq seq;

  KOKKOS_INLINE_FUNCTION void operator()(index_t item) const {
    const index_t blocks = Dv > 0 ? (Dv + width - 1) / width : 1;
    const index_t d0 = item % blocks * width;
    const index_t d1 = d0 + width < Dv ? d0 + width : Dv;
    const index_t row = item / blocks;
    const index_t i = row % N;
    const index_t h = (row / N) % H;
    const index_t b = row / (N * H);
    if (i >= seq.nq(b)) return;
    for (index_t d = d0; d < d1; ++d) o(b, h, i, d) = T(0);
    SoftmaxState<T> st = SoftmaxState<T>::identity();
    for (index_t s = 0; s < S; ++s) {
      // A part with log-sum-exp x holds (m, l) = (x, 1), whatever its own maximum was.
      const OutputFactors<T> f = OutputFactors<T>::merge(st, SoftmaxState<T>::of(lse_parts(s, b, h, i)));
      for (index_t d = d0; d < d1; ++d) o(b, h, i, d) = f.merged(o(b, h, i, d), o_parts(s, b, h, i, d));
    }
    const T inv = SoftmaxNormalizer<T>(st).inv_sum;
    for (index_t d = d0; d < d1; ++d) o(b, h, i, d) *= inv;
    if (has_lse && d0 == 0) lse(b, h, i) = st.logsumexp();
  }
};

template <class ExecSpace, class OP, class LP, class OV, class LV, class Mem = typename ExecSpace::memory_space>
void run_merge(const ExecSpace& exec, const OP& o_parts, const LP& lse_parts, const OV& o, const LV& lse,
               bool has_lse, Sequences<Mem> seq = {}) {
  const index_t S = o_parts.extent(0), B = o.extent(0), H = o.extent(1), N = o.extent(2),
                Dv = o.extent(3);
  const index_t rows = B * H * N;
  if (rows == 0) return;
  if (!seq.ragged()) seq.Nq = N;
  // Whole rows per item while there are rows for every thread; else a column per item.
  const index_t width = rows >= index_t(exec.concurrency()) && Dv > 0 ? Dv : 1;
  const index_t items = rows * (Dv > 0 ? (Dv + width - 1) / width : 1);
  Kokkos::parallel_for("kflash::merge_attention", Kokkos::RangePolicy<ExecSpace>(exec, 0, items),
                       MergeKernel<OP, LP, OV, LV, Sequences<Mem>>{o_parts, lse_parts, o, lse, has_lse, S, H, N, Dv,
                                                                           width, seq});
}

}  // namespace kflash::impl
