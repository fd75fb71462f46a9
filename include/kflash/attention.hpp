// Exact scaled-dot-product attention on the online (m, l, O) recurrence, and the merge of partial
// attention results.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/errors.hpp>
#include <kflash/impl/spec/attention_spec.hpp>
#include <kflash/option_view.hpp>

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>
#include <type_traits>

namespace kflash {

/// Which schedule attention() runs.
enum class AttentionSchedule {
  automatic,  ///< chosen from the shapes: split_kv when there are too few query blocks to fill the machine
  prefill,    ///< a team per block of query rows, K/V tiles streamed through team scratch memory
  split_kv    ///< the keys split across teams too; partial (O, lse) merged as by merge_attention()
};

/// Options of attention(). A plain struct: set the members you need.
struct AttentionOptions {
  /// Scores are scale * q . k; 0 means 1 / sqrt(D).
  double scale = 0;
  /// Causal mask aligned bottom-right (as FlashAttention 2.1+): query i sees keys j <= i + Nk - Nq.
  /// A query that sees no key (Nq > Nk) gets O = 0 and lse = -inf. The same as window_right = 0.
  bool causal = false;
  /// Sliding window, aligned bottom-right like causal: query i sees keys j with
  /// i + Nk - Nq - window_left <= j <= i + Nk - Nq + window_right; -1 leaves that side unbounded.
  int window_left = -1;
  int window_right = -1;
  /// Logit softcap (0: off): a score s = scale * q . k becomes softcap * tanh(s / softcap), before
  /// ALiBi, bias and the masks.
  double softcap = 0;
  /// ALiBi slopes, shaped (Hq) or (B, Hq): query i's score for key j gets -slope * |i + Nk - Nq - j|.
  OptionView alibi_slopes;
  /// Attention sinks, shaped (Hq): one logit per query head that joins each row's denominator as a
  /// key without a value (not scaled or modified); lse includes it. -inf: no sink for that head.
  OptionView sinks;
  /// An additive bias, shaped (B or 1, Hq or 1, Nq, Nk) (1: broadcast), added after ALiBi.
  OptionView bias;
  /// A boolean mask, shaped like bias: false hides the pair (probability exactly 0).
  OptionView mask;
  /// Varlen (packed sequences of their own lengths): with cu_seqlens_q and cu_seqlens_k set, q, k, v
  /// and o are rank-3 Views (total_q, Hq, D), (total_k, Hk, D), (total_k, Hk, Dv), (total_q, Hq, Dv)
  /// and lse is (Hq, total_q). Sequence b has the queries [cu_seqlens_q(b), cu_seqlens_q(b + 1)) and
  /// the keys [cu_seqlens_k(b), cu_seqlens_k(b + 1)); both are (B + 1) std::int32_t or std::int64_t
  /// Views, non-decreasing from 0 to total_q and total_k. Causal, windows and ALiBi align per
  /// sequence; i and j are indices within the sequence (bias and mask: (B or 1, Hq or 1, longest
  /// Nq, longest Nk)).
  OptionView cu_seqlens_q;
  OptionView cu_seqlens_k;
  /// Paged KV cache: with block_table set, k and v are caches (num_pages, page_size, Hk, D) and
  /// (num_pages, page_size, Hk, Dv), page_size >= 16. Sequence b's keys are the first
  /// cache_seqlens(b) slots of the pages block_table(b, 0), block_table(b, 1), ... in order; slots
  /// and table entries past them are never read. block_table (B, max_pages) and cache_seqlens (B) are
  /// std::int32_t or std::int64_t Views. q, o and lse are as in dense attention (Nq queries per
  /// sequence), aligned bottom-right to each sequence's cache_seqlens(b) keys.
  OptionView block_table;
  OptionView cache_seqlens;
  /// A block mask for a user mask_mod (a hint for speed, like FlexAttention's BlockMask): a bool
  /// View shaped (B or 1, Hq or 1, ceil(Nq / block_mask_q), ceil(Nk / block_mask_k)) whose entry
  /// (b, h, qb, kb) is false only if no pair of query rows [qb block_mask_q, (qb + 1) block_mask_q)
  /// and keys [kb block_mask_k, (kb + 1) block_mask_k) is visible. kflash skips the tiles that such
  /// blocks cover; in the other tiles mask_mod decides every pair. make_block_mask() builds an exact
  /// one from a mask_mod. (A block marked false that holds visible pairs makes the result depend on
  /// the schedule's tiles.)
  OptionView block_mask;
  int block_mask_q = 128;
  int block_mask_k = 128;
  /// The schedule; automatic unless forced for testing or tuning.
  AttentionSchedule schedule = AttentionSchedule::automatic;
  /// For split_kv: the number of key splits (0: chosen from the shapes).
  int num_splits = 0;
};

namespace impl {

/// Checks the options that do not depend on the shapes, and records them in p.
inline void check_options(const AttentionOptions& opt, AttentionPlan& p) {
  const char* fn = "attention";
  if (!std::isfinite(opt.scale)) throw_invalid_argument(fn, "options.scale must be finite, got " + std::to_string(opt.scale));
  if (opt.num_splits < 0)
    throw_invalid_argument(fn, "options.num_splits must be >= 0, got " + std::to_string(opt.num_splits));
  if (opt.window_left < -1 || opt.window_right < -1)
    throw_invalid_argument(fn, "options.window_left and window_right must be >= -1 (-1: unbounded), got " +
                                   std::to_string(opt.window_left) + " and " + std::to_string(opt.window_right));
  if (!(opt.softcap >= 0) || !std::isfinite(opt.softcap))
    throw_invalid_argument(fn, "options.softcap must be finite and >= 0 (0: off), got " + std::to_string(opt.softcap));
  p.window_left = opt.window_left;
  p.window_right = opt.causal ? 0 : opt.window_right;
  if (opt.schedule == AttentionSchedule::prefill) p.fixed_splits = 1;
  if (opt.schedule == AttentionSchedule::split_kv) {
    p.fixed_splits = opt.num_splits;
    p.min_splits = 2;
  }
}

/// Checks attention()'s View types: one value type, rank 4 (rank 3 with lse rank 2 when varlen).
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
void static_check_attention_views() {
  static_check_view<ExecSpace, QV, false>();
  static_check_view<ExecSpace, KV, false>();
  static_check_view<ExecSpace, VV, false>();
  static_check_view<ExecSpace, OV, true>();
  static_check_view<ExecSpace, LV, true>();
  using T = typename OV::non_const_value_type;
  static_assert(std::is_same<std::remove_cv_t<typename QV::value_type>, T>::value &&
                    std::is_same<std::remove_cv_t<typename KV::value_type>, T>::value &&
                    std::is_same<std::remove_cv_t<typename VV::value_type>, T>::value &&
                    std::is_same<typename LV::non_const_value_type, T>::value,
                "kflash::attention: q, k, v, o and lse must have the same value type");
}

/// Checks the shapes of q, k, v, o, lse given as (B, H, N, D) in `e` (each View's extents mapped to
/// that order by the caller) and fills p's shapes; `shapes` describes the Views for messages.
inline void check_shapes(AttentionPlan& p, const std::size_t (&q)[4], const std::size_t (&k)[4],
                         const std::size_t (&v)[4], const std::size_t (&o)[4], const std::size_t (&lse)[3],
                         bool has_lse, const std::string& shapes, const std::string& o_name,
                         const std::string& lse_name, const char* o_expected, const char* lse_expected) {
  auto fail = [&](const std::string& what) { throw_invalid_argument("attention", what); };
  p.B = q[0], p.Hq = q[1], p.Nq = q[2], p.D = q[3];
  p.Hk = k[1], p.Nk = k[2], p.Dv = v[3];
  if (k[0] != q[0] || v[0] != q[0]) fail("q, k and v must have the same batch extent B" + shapes);
  if (index_t(v[1]) != p.Hk) fail("k and v must have the same number of heads Hk" + shapes);
  if (p.Hk == 0 || p.Hq % p.Hk != 0) fail("the query heads Hq must be a multiple of the key/value heads Hk" + shapes);
  if (index_t(k[3]) != p.D) fail("q and k must have the same head dimension D" + shapes);
  if (index_t(v[2]) != p.Nk) fail("k and v must have the same number of keys Nk" + shapes);
  if (p.D < 1 || p.Dv < 1) fail("head dimensions D and Dv must be at least 1" + shapes);
  if (index_t(o[0]) != p.B || index_t(o[1]) != p.Hq || index_t(o[2]) != p.Nq || index_t(o[3]) != p.Dv)
    fail("argument '" + o_name + "' must have extents " + o_expected + shapes);
  if (has_lse && (index_t(lse[0]) != p.B || index_t(lse[1]) != p.Hq || index_t(lse[2]) != p.Nq))
    fail("argument '" + lse_name + "' must have extents " + lse_expected + shapes);
}

template <class V, int R>
void extents_of(const V& v, std::size_t (&e)[R], std::initializer_list<int> order) {
  int i = 0;
  for (int d : order) e[i++] = d < 0 ? 1 : v.extent(d);
}

/// Checks dense attention()'s arguments and returns the call's shapes and options; throws
/// std::invalid_argument naming the argument and the extents.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
AttentionPlan attention_args(const QV& q, const KV& k, const VV& v, const OV& o, const AttentionOptions& opt,
                             const LV& lse, bool has_lse) {
  static_check_attention_views<ExecSpace, QV, KV, VV, OV, LV>();
  static_assert(view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                    view_rank<LV> == 3,
                "kflash::attention: q, k, v, o must be rank-4 Views and lse a rank-3 View");
  const std::string shapes = " (" + describe("q", q) + ", " + describe("k", k) + ", " + describe("v", v) + ")";
  AttentionPlan p;
  std::size_t eq[4], ek[4], ev[4], eo[4], el[3];
  extents_of(q, eq, {0, 1, 2, 3}), extents_of(k, ek, {0, 1, 2, 3}), extents_of(v, ev, {0, 1, 2, 3});
  extents_of(o, eo, {0, 1, 2, 3}), extents_of(lse, el, {0, 1, 2});
  check_shapes(p, eq, ek, ev, eo, el, has_lse, shapes, describe("o", o), describe("lse", lse), "(B, Hq, Nq, Dv)",
               "(B, Hq, Nq)");
  check_options(opt, p);
  return p;
}

template <class T>
T attention_scale(const AttentionOptions& opt, index_t D) {
  return static_cast<T>(opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(D)));
}

/// "(e0, e1, ...)" of an OptionView, named.
inline std::string describe(const char* name, const OptionView& v) {
  std::size_t extents[4];
  for (int i = 0; i < 4; ++i) extents[i] = v.extent(i);
  return describe_extents(name, v.rank(), extents);
}

/// Option `name` (an OptionView of V) as a strided array over `want` (rank extents), where the first
/// `broadcast` extents may also be 1 (then read with stride 0); throws std::invalid_argument naming
/// the option, its extents and `expected` otherwise. An empty option gives a null array.
template <class ExecSpace, class V>
Strided<V> option_array(const OptionView& ov, const char* name, std::initializer_list<index_t> want, int broadcast,
                        const std::string& expected) {
  Strided<V> a;
  if (ov.empty()) return a;
  const char* fn = "attention";
  const std::string got = describe(name, ov);
  if (!ov.holds<V>())
    throw_invalid_argument(fn, got + " holds " + ov.value_name() + " values, expected " +
                                   (std::is_same<V, bool>::value ? "bool" : "the value type of q, k and v"));
  if (!ov.accessible_from<ExecSpace>())
    throw_invalid_argument(fn, got + " is in a memory space that " + ExecSpace::name() + " cannot read");
  bool ok = ov.rank() == int(want.size());
  index_t strides[4] = {0, 0, 0, 0};
  int d = 0;
  for (index_t e : want) {
    if (!ok) break;
    const index_t have = index_t(ov.extent(d));
    if (have == e) strides[d] = ov.stride(d);
    else if (!(d < broadcast && have == 1)) ok = false;
    ++d;
  }
  if (!ok) throw_invalid_argument(fn, got + " must be shaped " + expected);
  a.data = static_cast<const V*>(ov.data());
  a.s0 = strides[0], a.s1 = strides[1], a.s2 = strides[2], a.s3 = strides[3];
  return a;
}

/// The scale, score stage and sinks of a call with plan p, from its options and user functors;
/// throws std::invalid_argument for options that do not fit the call's shapes.
template <class ExecSpace, class T, class ScoreMod, class MaskMod>
AttentionTerms<T, ScoreStage<T, ScoreMod, MaskMod>> attention_terms(const AttentionOptions& opt,
                                                                     const AttentionPlan& p, const ScoreMod& score_mod,
                                                                     const MaskMod& mask_mod) {
  const std::string B = std::to_string(p.B), Hq = std::to_string(p.Hq), Nq = std::to_string(p.Nq),
                    Nk = std::to_string(p.Nk);
  ScoreOptions<T> so;
  if (opt.softcap != 0) {
    so.softcap = T(opt.softcap);
    so.inv_softcap = T(1.0 / opt.softcap);
  }
  if (!opt.alibi_slopes.empty()) {
    const std::string expected = "(Hq) = (" + Hq + ") or (B, Hq) = (" + B + ", " + Hq + ")";
    if (opt.alibi_slopes.rank() == 1) {  // (Hq): broadcast over batches
      const Strided<T> h = option_array<ExecSpace, T>(opt.alibi_slopes, "options.alibi_slopes", {p.Hq}, 0, expected);
      so.alibi.data = h.data;
      so.alibi.s1 = h.s0;
    } else {
      so.alibi = option_array<ExecSpace, T>(opt.alibi_slopes, "options.alibi_slopes", {p.B, p.Hq}, 0, expected);
    }
  }
  const std::string pairs = "(B or 1, Hq or 1, Nq, Nk) = (" + B + " or 1, " + Hq + " or 1, " + Nq + ", " + Nk + ")";
  so.bias = option_array<ExecSpace, T>(opt.bias, "options.bias", {p.B, p.Hq, p.Nq, p.Nk}, 2, pairs);
  so.mask = option_array<ExecSpace, bool>(opt.mask, "options.mask", {p.B, p.Hq, p.Nq, p.Nk}, 2, pairs);
  const Strided<T> sinks = option_array<ExecSpace, T>(opt.sinks, "options.sinks", {p.Hq}, 0, "(Hq) = (" + Hq + ")");
  BlockMask block_mask;
  if (!opt.block_mask.empty()) {
    if (opt.block_mask_q < 1 || opt.block_mask_k < 1)
      throw_invalid_argument("attention", "options.block_mask_q and block_mask_k must be >= 1, got " +
                                              std::to_string(opt.block_mask_q) + " and " +
                                              std::to_string(opt.block_mask_k));
    const index_t nbq = (p.Nq + opt.block_mask_q - 1) / opt.block_mask_q,
                  nbk = (p.Nk + opt.block_mask_k - 1) / opt.block_mask_k;
    block_mask.blocks = option_array<ExecSpace, bool>(
        opt.block_mask, "options.block_mask", {p.B, p.Hq, nbq, nbk}, 2,
        "(B or 1, Hq or 1, ceil(Nq / block_mask_q), ceil(Nk / block_mask_k)) = (" + B + " or 1, " + Hq + " or 1, " +
            std::to_string(nbq) + ", " + std::to_string(nbk) + ")");
    block_mask.rows = opt.block_mask_q, block_mask.keys = opt.block_mask_k;
  }
  return {attention_scale<T>(opt, p.D), ScoreStage<T, ScoreMod, MaskMod>(so, score_mod, mask_mod), sinks,
          block_mask};
}

/// The integers of index option `name` (a View of std::int32_t or std::int64_t shaped `want`),
/// copied to the host; throws std::invalid_argument naming the option and `expected` otherwise.
inline std::vector<std::int64_t> index_option(const OptionView& ov, const char* name,
                                              std::initializer_list<index_t> want, const std::string& expected) {
  const std::string got = describe(name, ov);
  if (!ov.holds_integers())
    throw_invalid_argument("attention", got + " holds " + ov.value_name() +
                                            " values, expected std::int32_t or std::int64_t");
  bool ok = ov.rank() == int(want.size());
  int d = 0;
  for (index_t e : want) ok = ok && index_t(ov.extent(d++)) == e;
  if (!ok) throw_invalid_argument("attention", got + " must be shaped " + expected);
  return ov.host_integers();
}

/// Host integers as an index View (rows x cols, row-major) in Mem.
template <class Mem>
Kokkos::View<index_t**, Kokkos::LayoutRight, Mem> index_view(const std::vector<std::int64_t>& h, index_t rows,
                                                              index_t cols, const char* label) {
  const Kokkos::View<index_t**, Kokkos::LayoutRight, Mem> d(Kokkos::ViewAllocateWithoutInitializing(label),
                                                           static_cast<std::size_t>(rows),
                                                           static_cast<std::size_t>(cols));
  Kokkos::deep_copy(d, Kokkos::View<const index_t**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                    Kokkos::MemoryUnmanaged>(h.data(), rows, cols));
  return d;
}

/// Offsets option `name` (B + 1 entries from 0 to `total`, non-decreasing) in Mem; the longest
/// sequence goes to `longest`.
template <class Mem>
Kokkos::View<const index_t*, Mem> offsets_option(const OptionView& ov, const char* name, index_t total,
                                                 index_t& longest) {
  const std::string got = describe(name, ov);
  if (ov.rank() != 1 || ov.extent(0) < 1)
    throw_invalid_argument("attention", got + " must be shaped (B + 1), B >= 0");
  const std::vector<std::int64_t> cu = index_option(ov, name, {index_t(ov.extent(0))}, "(B + 1)");
  longest = 0;
  if (cu.front() != 0) throw_invalid_argument("attention", got + " must start at 0, got " + std::to_string(cu.front()));
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
    if (cu[b + 1] < cu[b])
      throw_invalid_argument("attention", got + " must be non-decreasing, got " + std::to_string(cu[b]) + " then " +
                                              std::to_string(cu[b + 1]) + " at " + std::to_string(b));
    if (cu[b + 1] - cu[b] > longest) longest = cu[b + 1] - cu[b];
  }
  if (cu.back() != total)
    throw_invalid_argument("attention", got + " must end at the packed total " + std::to_string(total) + ", got " +
                                            std::to_string(cu.back()));
  return Kokkos::subview(index_view<Mem>(cu, 1, index_t(cu.size()), name), 0, Kokkos::ALL);
}

/// attention() for any View ranks: checks them and the options, builds the call's plan, terms and
/// sequences (dense, varlen or paged), and hands them to run(p, terms, seq, q, k, v, o, lse,
/// has_lse) with the Views as the kernels read them.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class ScoreMod, class MaskMod,
          class Run>
void attention_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                    const AttentionOptions& opt, const LV& lse, bool has_lse, const ScoreMod& score_mod,
                    const MaskMod& mask_mod, const Run& run) {
  (void)exec;
  using T = typename OV::non_const_value_type;
  using Mem = typename ExecSpace::memory_space;
  const char* fn = "attention";
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
  static_check_attention_views<ExecSpace, QV, KV, VV, OV, LV>();
  const std::string shapes = " (" + describe("q", q) + ", " + describe("k", k) + ", " + describe("v", v) + ")";
  if constexpr (view_rank<QV> == 3 && view_rank<KV> == 3 && view_rank<VV> == 3 && view_rank<OV> == 3 &&
                view_rank<LV> == 2) {
    if (!varlen) return;  // require_rank threw
    // Packed sequences, checked as one batch of total_q queries and total_k keys, then split.
    AttentionPlan p;
    std::size_t eq[4], ek[4], ev[4], eo[4], el[3];
    extents_of(q, eq, {-1, 1, 0, 2}), extents_of(k, ek, {-1, 1, 0, 2}), extents_of(v, ev, {-1, 1, 0, 2});
    extents_of(o, eo, {-1, 1, 0, 2}), extents_of(lse, el, {-1, 0, 1});
    check_shapes(p, eq, ek, ev, eo, el, has_lse, shapes, describe("o", o), describe("lse", lse),
                 "(total_q, Hq, Dv)", "(Hq, total_q)");
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
                                 "page_size, Hk, Dv), with q's D" + shapes);
    ek[0] = ev[0] = eq[0];  // the batch comes from q
    check_shapes(p, eq, ek, ev, eo, el, has_lse, shapes, describe("o", o), describe("lse", lse), "(B, Hq, Nq, Dv)",
                 "(B, Hq, Nq)");
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
                                         std::to_string(pages) + ")" + shapes);
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
  using T = typename OV::non_const_value_type;
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
/// saw no key) contributes nothing. o must not alias o_parts.
template <class ExecSpace, class OP, class LP, class OV, class LV>
void merge_attention(const ExecSpace& exec, const OP& o_parts, const LP& lse_parts, const OV& o,
                     const LV& lse) {
  using namespace impl;
  const char* fn = "merge_attention";
  static_check_view<ExecSpace, OP, false>();
  static_check_view<ExecSpace, LP, false>();
  static_check_view<ExecSpace, OV, true>();
  static_check_view<ExecSpace, LV, true>();
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
    run_merge(exec, o_parts, lse_parts, o, lse, true);
  }
}

/// The same, on the default execution space of o's View.
template <class QV, class KV, class VV, class OV,
          std::enable_if_t<Kokkos::is_view<QV>::value, int> = 0>
void attention(const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options = AttentionOptions()) {
  attention(typename OV::execution_space(), q, k, v, o, options);
}
template <class QV, class KV, class VV, class OV, class LV,
          std::enable_if_t<Kokkos::is_view<QV>::value, int> = 0>
void attention(const QV& q, const KV& k, const VV& v, const OV& o, const AttentionOptions& options,
               const LV& lse) {
  attention(typename OV::execution_space(), q, k, v, o, options, lse);
}
template <class OP, class LP, class OV, class LV>
void merge_attention(const OP& o_parts, const LP& lse_parts, const OV& o, const LV& lse) {
  merge_attention(typename OV::execution_space(), o_parts, lse_parts, o, lse);
}

}  // namespace kflash
