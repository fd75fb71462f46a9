// Exact scaled-dot-product attention on the online (m, l, O) recurrence, and the merge of partial
// attention results.
#pragma once

#include <kflash/attention_options.hpp>
#include <kflash/attention_state.hpp>
#include <kflash/impl/attention_args.hpp>

#include <string>
#include <type_traits>

namespace kflash {

namespace impl {

/// attention() for any View ranks: checks them and the options, builds the call's plan, terms and
/// sequences (dense, varlen or paged), and hands them to run(p, terms, seq, q, k, v, o, lse,
/// has_lse) with the Views as the kernels read them, unless the call has no query row. fn: the call
/// its messages name (attention_backward checks its forward arguments here too, with Written false:
/// o and lse are its inputs, and may hold const values). ArithOut true: o may hold the arithmetic
/// type of 16-bit q, k, v (AttentionStream's chunk results, merged in float).
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class ScoreMod, class MaskMod, class Run,
          class Written = std::true_type, class ArithOut = std::false_type>
void attention_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                    const AttentionOptions& opt, const LV& lse, bool has_lse, const ScoreMod& score_mod,
                    const MaskMod& mask_mod, const Run& run, const char* fn = "attention", Written = {},
                    ArithOut = {}) {
  (void)exec;
  using T = arith_t<typename OV::non_const_value_type>;  // the options' and lse's value type
  using Mem = typename ExecSpace::memory_space;
  const CallScope<ExecSpace> call(fn);
  const bool varlen = !opt.cu_seqlens_q.empty() || !opt.cu_seqlens_k.empty();
  const bool paged = !opt.block_table.empty() || !opt.cache_seqlens.empty();
  if (varlen && paged)
    throw_invalid_argument(fn, "options.cu_seqlens_q/k (varlen) and options.block_table (paged KV) together are "
                               "not supported");
  const int rank = varlen ? 3 : 4;
  require_rank(fn, "q", q, rank, rank);
  require_rank(fn, "k", k, rank, rank);
  require_rank(fn, "v", v, rank, rank);
  require_rank(fn, "o", o, rank, rank);
  if (has_lse) require_rank(fn, "lse", lse, rank - 1, rank - 1);
  require_disjoint(fn, "o", o, "q", q);
  require_disjoint(fn, "o", o, "k", k);
  require_disjoint(fn, "o", o, "v", v);
  if (has_lse) {
    require_disjoint(fn, "lse", lse, "q", q);
    require_disjoint(fn, "lse", lse, "k", k);
    require_disjoint(fn, "lse", lse, "v", v);
    require_disjoint(fn, "lse", lse, "o", o);
    require_disjoint_from_options(fn, "lse", lse, opt);
  }
  require_disjoint_from_options(fn, "o", o, opt);
  static_check_attention_views<ExecSpace, QV, KV, VV, OV, LV, Written::value, true, ArithOut::value>();
  const auto names = shape_names(q, k, v, o, lse);
  if constexpr (view_rank<QV> == 3 && view_rank<KV> == 3 && view_rank<VV> == 3 && view_rank<OV> == 3 &&
                view_rank<LV> == 2) {
    if (!varlen) return;  // require_rank threw
    // Packed sequences, checked as one batch of total_q queries and total_k keys, then split.
    AttentionPlan p;
    std::size_t eq[4], ek[4], ev[4], eo[4], el[3];
    extents_of(q, eq, {-1, 1, 0, 2}), extents_of(k, ek, {-1, 1, 0, 2}), extents_of(v, ev, {-1, 1, 0, 2});
    extents_of(o, eo, {-1, 1, 0, 2}), extents_of(lse, el, {-1, 0, 1});
    check_shapes(p, eq, ek, ev, eo, el, has_lse, names, "(total_q, Hq, Dv)", "(Hq, total_q)");
    check_options(opt, p);
    if (opt.cu_seqlens_q.empty() || opt.cu_seqlens_k.empty())
      throw_invalid_argument(fn, std::string("varlen needs both options.cu_seqlens_q and options.cu_seqlens_k; ") +
                                     (opt.cu_seqlens_q.empty() ? "options.cu_seqlens_q" : "options.cu_seqlens_k") +
                                     " must be set");
    Sequences<Mem> seq;
    seq.cu_q = offsets_option<Mem>(opt.cu_seqlens_q, "options.cu_seqlens_q", p.Nq, seq.Nq);
    seq.cu_k = offsets_option<Mem>(opt.cu_seqlens_k, "options.cu_seqlens_k", p.Nk, seq.Nk);
    if (seq.cu_q.extent(0) != seq.cu_k.extent(0))
      throw_invalid_argument(fn, describe("options.cu_seqlens_q", opt.cu_seqlens_q) + " and " +
                                     describe("options.cu_seqlens_k", opt.cu_seqlens_k) +
                                     " must have the same length B + 1");
    p.B = index_t(seq.cu_q.extent(0)) - 1, p.Nq = seq.Nq, p.Nk = seq.Nk;
    p.ragged = true;
    const auto terms = attention_terms<ExecSpace, T>(opt, p, score_mod, mask_mod);
    if (p.B * p.Hq * p.Nq == 0) return;
    run(p, terms, seq, PackedRows<QV, Mem>{{}, q, seq.cu_q, p.B, p.Nq}, PackedRows<KV, Mem>{{}, k, seq.cu_k, p.B, p.Nk},
        PackedRows<VV, Mem>{{}, v, seq.cu_k, p.B, p.Nk}, PackedRows<OV, Mem>{{}, o, seq.cu_q, p.B, p.Nq},
        PackedLse<LV, Mem>{{}, lse, seq.cu_q}, has_lse);
  } else if constexpr (view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                       view_rank<LV> == 3) {
    if (varlen) return;  // require_rank threw
    if (!paged) {
      const AttentionPlan p = attention_args<ExecSpace>(q, k, v, o, opt, lse, has_lse);
      const auto terms = attention_terms<ExecSpace, T>(opt, p, score_mod, mask_mod);
      if (p.B * p.Hq * p.Nq == 0) return;
      Sequences<Mem> seq;
      seq.Nq = p.Nq, seq.Nk = p.Nk;
      run(p, terms, seq, q, k, v, o, lse, has_lse);
      return;
    }
    // Paged caches (num_pages, page_size, Hk, D), checked as a batch of one sequence per page.
    AttentionPlan p;
    std::size_t eq[4], ek[4], ev[4], eo[4], el[3];
    extents_of(q, eq, {0, 1, 2, 3}), extents_of(o, eo, {0, 1, 2, 3}), extents_of(lse, el, {0, 1, 2});
    extents_of(k, ek, {0, 2, 1, 3}), extents_of(v, ev, {0, 2, 1, 3});
    const index_t pages = index_t(k.extent(0)), page_size = index_t(k.extent(1));
    if (index_t(v.extent(0)) != pages || index_t(v.extent(1)) != page_size || v.extent(2) != k.extent(2) ||
        k.extent(3) != q.extent(3))
      throw_invalid_argument(fn, "the caches k and v must be shaped (num_pages, page_size, Hk, D) and (num_pages, "
                                 "page_size, Hk, Dv), with q's D" + names.shapes());
    ek[0] = ev[0] = eq[0];  // the batch comes from q
    check_shapes(p, eq, ek, ev, eo, el, has_lse, names, "(B, Hq, Nq, Dv)", "(B, Hq, Nq)");
    check_options(opt, p);
    if (page_size < 16)
      throw_invalid_argument(fn, "paged KV needs a page_size of at least 16, got " + describe("k", k));
    if (opt.block_table.empty() || opt.cache_seqlens.empty())
      throw_invalid_argument(fn, "paged KV needs both options.block_table and options.cache_seqlens");
    if (opt.block_table.rank() != 2)
      throw_invalid_argument(fn, describe("options.block_table", opt.block_table) + " must be shaped (B, max_pages)");
    const index_t max_pages = index_t(opt.block_table.extent(1));
    const std::vector<std::int64_t> table = index_option(
        opt.block_table, "options.block_table", {p.B, max_pages}, "(B, max_pages) = (" + std::to_string(p.B) + ", max_pages)");
    const std::vector<std::int64_t> lengths = index_option(opt.cache_seqlens, "options.cache_seqlens", {p.B},
                                                           "(B) = (" + std::to_string(p.B) + ")");
    p.Nk = 0;
    for (index_t b = 0; b < p.B; ++b) {
      const std::int64_t n = lengths[std::size_t(b)];
      if (n < 0 || n > max_pages * page_size)
        throw_invalid_argument(fn, "options.cache_seqlens(" + std::to_string(b) + ") = " + std::to_string(n) +
                                       " must be in [0, max_pages * page_size] = [0, " +
                                       std::to_string(max_pages * page_size) + "]");
      for (index_t j = 0; j < (n + page_size - 1) / page_size; ++j) {
        const std::int64_t e = table[std::size_t(b * max_pages + j)];
        if (e < 0 || e >= pages)
          throw_invalid_argument(fn, "options.block_table(" + std::to_string(b) + ", " + std::to_string(j) +
                                         ") = " + std::to_string(e) + " is not a page of the caches [0, " +
                                         std::to_string(pages) + ")" + names.shapes());
      }
      if (n > p.Nk) p.Nk = n;
    }
    p.ragged = true;
    p.key_run = page_size;
    Sequences<Mem> seq;
    seq.Nq = p.Nq, seq.Nk = p.Nk;
    seq.seqlens_k = Kokkos::subview(index_view<Mem>(lengths, 1, p.B, "kflash::cache_seqlens"), 0, Kokkos::ALL);
    const auto terms = attention_terms<ExecSpace, T>(opt, p, score_mod, mask_mod);
    if (p.B * p.Hq * p.Nq == 0) return;
    const auto block_table = index_view<Mem>(table, p.B, max_pages, "kflash::block_table");
    run(p, terms, seq, q, PagedKeys<KV, Mem>{{}, k, block_table, page_size}, PagedKeys<VV, Mem>{{}, v, block_table, page_size},
        o, lse, has_lse);
  }
}

/// attention() through the spec's schedule for the execution space.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class ScoreMod, class MaskMod>
void attention_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                    const AttentionOptions& opt, const LV& lse, bool has_lse, const ScoreMod& score_mod,
                    const MaskMod& mask_mod) {
  attention_impl(exec, q, k, v, o, opt, lse, has_lse, score_mod, mask_mod,
                 [&](const AttentionPlan& p, const auto& terms, const auto& seq, const auto& qa, const auto& ka,
                     const auto& va, const auto& oa, const auto& la, bool with_lse) {
                   dispatch_attention(exec, p, terms, seq, qa, ka, va, oa, la, with_lse);
                 });
}

/// attention() through the team schedule of the given TeamAttentionShape on any execution space,
/// whatever the traits choose: the tests run the device schedule on host teams with it.
template <class Shape, class ExecSpace, class QV, class KV, class VV, class OV, class LV, class ScoreMod = NoScoreMod,
          class MaskMod = NoMaskMod>
void attention_with_shape(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                          const AttentionOptions& opt, const LV& lse, const ScoreMod& score_mod = {},
                          const MaskMod& mask_mod = {}) {
  attention_impl(exec, q, k, v, o, opt, lse, true, score_mod, mask_mod,
                 [&](const AttentionPlan& p, const auto& terms, const auto& seq, const auto& qa, const auto& ka,
                     const auto& va, const auto& oa, const auto& la, bool with_lse) {
                   if (p.Dv > Shape::DV)
                     throw_invalid_argument("attention", "Dv = " + std::to_string(p.Dv) +
                                                             " exceeds the team shape's " + std::to_string(Shape::DV));
                   run_attention_with_shape<Shape>(exec, p, terms, seq, qa, ka, va, oa, la, with_lse);
                 });
}

}  // namespace impl

/// o = softmax(scale * q k^T) v per batch and query head, computed tile by tile with the online
/// (m, l, O) recurrence: the Nq x Nk score matrix never exists.
///   q (B, Hq, Nq, D), k (B, Hk, Nk, D), v (B, Hk, Nk, Dv), o (B, Hq, Nq, Dv); Hq a multiple of Hk
///   (query head h reads K/V head h / (Hq / Hk): GQA, MQA for Hk = 1). Views of any layout: memory
///   held as (B, N, H, D) is passed as LayoutStride Views. lse (B, Hq, Nq) receives the log-sum-exp
///   of each row's scaled scores. Bad shapes throw std::invalid_argument.
/// q, k, v, o hold float, double, or 16-bit values (kflash::bhalf_t, kflash::half_t: scores, states
/// and P V in float, each output rounded once); lse, options.alibi_slopes, options.sinks and
/// options.bias then hold float.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options, const LV& lse) {
  impl::attention_impl(exec, q, k, v, o, options, lse, true, NoScoreMod(), NoMaskMod());
}

/// The same with user functors compiled into the kernel, on every backend (KOKKOS_FUNCTION call
/// operators, or KOKKOS_LAMBDA):
///   score_mod(score, b, h, i, j) -> score   after softcap, ALiBi and bias;
///   mask_mod(b, h, i, j) -> bool            false hides the pair, like options.mask;
/// b the batch, h the query head, i and j the query row and key within the sequence (indices of type
/// std::int64_t). Pass kflash::NoScoreMod() or kflash::NoMaskMod() for either one left out.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class ScoreMod, class MaskMod,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options, const LV& lse, const ScoreMod& score_mod, const MaskMod& mask_mod) {
  impl::attention_impl(exec, q, k, v, o, options, lse, true, score_mod, mask_mod);
}

template <class ExecSpace, class QV, class KV, class VV, class OV,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options = AttentionOptions()) {
  using T = impl::arith_t<typename OV::non_const_value_type>;
  using NoLse = std::conditional_t<impl::view_rank<OV> == 3, Kokkos::View<T**, typename OV::memory_space>,
                                   Kokkos::View<T***, typename OV::memory_space>>;
  impl::attention_impl(exec, q, k, v, o, options, NoLse(), false, NoScoreMod(), NoMaskMod());
}

/// The exact block mask of a mask_mod (see AttentionOptions::block_mask) for B batches, Hq heads, Nq
/// queries and Nk keys (for varlen and paged calls, the longest sequences), in blocks of block_q
/// rows x block_k keys: entry (b, h, qb, kb) is true where mask_mod(b, h, i, j) is true for some
/// pair of the block. mask_mod runs on exec, once per pair at most.
template <class ExecSpace, class MaskMod, std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
Kokkos::View<bool****, Kokkos::LayoutRight, typename ExecSpace::memory_space> make_block_mask(
    const ExecSpace& exec, const MaskMod& mask_mod, std::int64_t B, std::int64_t Hq, std::int64_t Nq, std::int64_t Nk,
    int block_q = 128, int block_k = 128) {
  using View = Kokkos::View<bool****, Kokkos::LayoutRight, typename ExecSpace::memory_space>;
  const impl::CallScope<ExecSpace> call("make_block_mask");
  if (B < 0 || Hq < 0 || Nq < 0 || Nk < 0 || block_q < 1 || block_k < 1)
    impl::throw_invalid_argument("make_block_mask", "B, Hq, Nq, Nk must be >= 0 and the block sizes >= 1, got (" +
                                                        std::to_string(B) + ", " + std::to_string(Hq) + ", " +
                                                        std::to_string(Nq) + ", " + std::to_string(Nk) + ") and " +
                                                        std::to_string(block_q) + " x " + std::to_string(block_k));
  const std::int64_t nbq = (Nq + block_q - 1) / block_q, nbk = (Nk + block_k - 1) / block_k;
  const View blocks("kflash::block_mask", std::size_t(B), std::size_t(Hq), std::size_t(nbq), std::size_t(nbk));
  Kokkos::parallel_for("kflash::make_block_mask", Kokkos::RangePolicy<ExecSpace>(exec, 0, B * Hq * nbq * nbk),
                       impl::BlockMaskKernel<MaskMod, View>{mask_mod, blocks, Nq, Nk, block_q, block_k});
  return blocks;
}

/// Combines attention results over disjoint key sets exactly (split-K/V decoding, KV-cache chunks,
/// ring attention): o_parts (S, B, H, N, Dv) and lse_parts (S, B, H, N), each part normalised over
/// its own keys, give o (B, H, N, Dv) and lse (B, H, N) over all keys. A part with lse = -inf (it
/// saw no key) contributes nothing. o and lse must not overlap o_parts, lse_parts or each other
/// (std::invalid_argument). o_parts and o may hold 16-bit values (lse_parts and lse then float): the
/// sums are float, each output rounded once.
template <class ExecSpace, class OP, class LP, class OV, class LV>
void merge_attention(const ExecSpace& exec, const OP& o_parts, const LP& lse_parts, const OV& o,
                     const LV& lse) {
  using namespace impl;
  const char* fn = "merge_attention";
  const CallScope<ExecSpace> call(fn);
  static_check_view<ExecSpace, OP, false, true>();
  static_check_view<ExecSpace, LP, false>();
  static_check_view<ExecSpace, OV, true, true>();
  static_check_view<ExecSpace, LV, true>();
  using S = typename OV::non_const_value_type;
  static_assert(std::is_same<std::remove_cv_t<typename OP::value_type>, S>::value,
                "kflash::merge_attention: o_parts and o must have the same value type");
  static_assert(std::is_same<std::remove_cv_t<typename LP::value_type>, arith_t<S>>::value &&
                    std::is_same<typename LV::non_const_value_type, arith_t<S>>::value,
                "kflash::merge_attention: lse_parts and lse must have o's value type, or float where o holds "
                "kflash::bhalf_t or kflash::half_t");
  require_rank(fn, "o_parts", o_parts, 5, 5);
  require_rank(fn, "lse_parts", lse_parts, 4, 4);
  require_rank(fn, "o", o, 4, 4);
  require_rank(fn, "lse", lse, 3, 3);
  if constexpr (view_rank<OP> == 5 && view_rank<LP> == 4 && view_rank<OV> == 4 && view_rank<LV> == 3) {
    bool ok = lse_parts.extent(0) == o_parts.extent(0);
    for (int i = 0; i < 4; ++i) ok = ok && o.extent(i) == o_parts.extent(i + 1);
    for (int i = 0; i < 3; ++i) ok = ok && lse.extent(i) == o.extent(i) && lse_parts.extent(i + 1) == o.extent(i);
    if (!ok) {
      throw_invalid_argument(fn, "expected o_parts (S, B, H, N, Dv), lse_parts (S, B, H, N), o (B, H, N, Dv), "
                                 "lse (B, H, N); got " + describe("o_parts", o_parts) + ", " +
                                     describe("lse_parts", lse_parts) + ", " + describe("o", o) + ", " +
                                     describe("lse", lse));
    }
    require_disjoint(fn, "o", o, "o_parts", o_parts);
    require_disjoint(fn, "o", o, "lse_parts", lse_parts);
    require_disjoint(fn, "lse", lse, "o_parts", o_parts);
    require_disjoint(fn, "lse", lse, "lse_parts", lse_parts);
    require_disjoint(fn, "lse", lse, "o", o);
    run_merge(exec, o_parts, lse_parts, o, lse, true);
  }
}

/// The same, on the default execution space of o's View.
template <class QV, class KV, class VV, class OV,
          std::enable_if_t<Kokkos::is_view<QV>::value, int> = 0>
void attention(const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options = AttentionOptions()) {
  attention(impl::default_space<OV>("attention"), q, k, v, o, options);
}
template <class QV, class KV, class VV, class OV, class LV,
          std::enable_if_t<Kokkos::is_view<QV>::value, int> = 0>
void attention(const QV& q, const KV& k, const VV& v, const OV& o, const AttentionOptions& options,
               const LV& lse) {
  attention(impl::default_space<OV>("attention"), q, k, v, o, options, lse);
}
template <class OP, class LP, class OV, class LV>
void merge_attention(const OP& o_parts, const LP& lse_parts, const OV& o, const LV& lse) {
  merge_attention(impl::default_space<OV>("merge_attention"), o_parts, lse_parts, o, lse);
}

}  // namespace kflash
