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
  /// The schedule; automatic unless forced for testing or tuning.
  AttentionSchedule schedule = AttentionSchedule::automatic;
  /// For split_kv: the number of key splits (0: chosen from the shapes).
  int num_splits = 0;
};

namespace impl {

/// Checks attention()'s arguments and returns the call's shapes and options (p.B ... p.Dv, the mask,
/// the splits asked for); throws std::invalid_argument naming the argument and the extents.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
AttentionPlan attention_args(const QV& q, const KV& k, const VV& v, const OV& o, const AttentionOptions& opt,
                             const LV& lse, bool has_lse) {
  const char* fn = "attention";
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
  static_assert(view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                    view_rank<LV> == 3,
                "kflash::attention: q, k, v, o must be rank-4 Views and lse a rank-3 View");
  auto fail = [&](const std::string& what) { throw_invalid_argument(fn, what); };
  const std::string shapes = " (" + describe("q", q) + ", " + describe("k", k) + ", " + describe("v", v) + ")";
  AttentionPlan p;
  p.B = q.extent(0), p.Hq = q.extent(1), p.Nq = q.extent(2), p.D = q.extent(3);
  p.Hk = k.extent(1), p.Nk = k.extent(2), p.Dv = v.extent(3);
  p.mask = KeyMask{p.Nq, p.Nk, opt.window_left, opt.causal ? 0 : opt.window_right};
  if (opt.schedule == AttentionSchedule::prefill) p.fixed_splits = 1;
  if (opt.schedule == AttentionSchedule::split_kv) {
    p.fixed_splits = opt.num_splits;
    p.min_splits = 2;
  }
  if (index_t(k.extent(0)) != p.B || index_t(v.extent(0)) != p.B)
    fail("q, k and v must have the same batch extent B" + shapes);
  if (index_t(v.extent(1)) != p.Hk) fail("k and v must have the same number of heads Hk" + shapes);
  if (p.Hk == 0 || p.Hq % p.Hk != 0) fail("the query heads Hq must be a multiple of the key/value heads Hk" + shapes);
  if (index_t(k.extent(3)) != p.D) fail("q and k must have the same head dimension D" + shapes);
  if (index_t(v.extent(2)) != p.Nk) fail("k and v must have the same number of keys Nk" + shapes);
  if (p.D < 1 || p.Dv < 1) fail("head dimensions D and Dv must be at least 1" + shapes);
  if (index_t(o.extent(0)) != p.B || index_t(o.extent(1)) != p.Hq || index_t(o.extent(2)) != p.Nq ||
      index_t(o.extent(3)) != p.Dv)
    fail("argument '" + describe("o", o) + "' must have extents (B, Hq, Nq, Dv)" + shapes);
  if (has_lse &&
      (index_t(lse.extent(0)) != p.B || index_t(lse.extent(1)) != p.Hq || index_t(lse.extent(2)) != p.Nq))
    fail("argument '" + describe("lse", lse) + "' must have extents (B, Hq, Nq)" + shapes);
  if (!std::isfinite(opt.scale)) fail("options.scale must be finite, got " + std::to_string(opt.scale));
  if (opt.num_splits < 0) fail("options.num_splits must be >= 0, got " + std::to_string(opt.num_splits));
  if (opt.window_left < -1 || opt.window_right < -1)
    fail("options.window_left and window_right must be >= -1 (-1: unbounded), got " +
         std::to_string(opt.window_left) + " and " + std::to_string(opt.window_right));
  if (!(opt.softcap >= 0) || !std::isfinite(opt.softcap))
    fail("options.softcap must be finite and >= 0 (0: off), got " + std::to_string(opt.softcap));
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
  so.diagonal = p.Nk - p.Nq;
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
  return {attention_scale<T>(opt, p.D), ScoreStage<T, ScoreMod, MaskMod>(so, score_mod, mask_mod), sinks};
}

template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class ScoreMod, class MaskMod>
void attention_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                    const AttentionOptions& opt, const LV& lse, bool has_lse, const ScoreMod& score_mod,
                    const MaskMod& mask_mod) {
  using T = typename OV::non_const_value_type;
  require_rank("attention", "q", q, 4, 4);
  require_rank("attention", "k", k, 4, 4);
  require_rank("attention", "v", v, 4, 4);
  require_rank("attention", "o", o, 4, 4);
  if (has_lse) require_rank("attention", "lse", lse, 3, 3);
  if constexpr (view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                view_rank<LV> == 3) {
    const AttentionPlan p = attention_args<ExecSpace>(q, k, v, o, opt, lse, has_lse);
    const auto terms = attention_terms<ExecSpace, T>(opt, p, score_mod, mask_mod);
    if (p.B * p.Hq * p.Nq == 0) return;
    dispatch_attention(exec, p, terms, q, k, v, o, lse, has_lse);
  }
}

/// attention() through the team schedule of the given TeamAttentionShape on any execution space,
/// whatever the traits choose: the tests run the device schedule on host teams with it.
template <class Shape, class ExecSpace, class QV, class KV, class VV, class OV, class LV, class ScoreMod = NoScoreMod,
          class MaskMod = NoMaskMod>
void attention_with_shape(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                          const AttentionOptions& opt, const LV& lse, const ScoreMod& score_mod = {},
                          const MaskMod& mask_mod = {}) {
  using T = typename OV::non_const_value_type;
  AttentionPlan p = attention_args<ExecSpace>(q, k, v, o, opt, lse, true);
  if (p.Dv > Shape::DV)
    throw_invalid_argument("attention", "Dv = " + std::to_string(p.Dv) + " exceeds the team shape's " +
                                            std::to_string(Shape::DV));
  const auto terms = attention_terms<ExecSpace, T>(opt, p, score_mod, mask_mod);
  if (p.B * p.Hq * p.Nq == 0) return;
  run_attention_with_shape<Shape>(exec, p, terms, q, k, v, o, lse, true);
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
  impl::attention_impl(exec, q, k, v, o, options, Kokkos::View<T***, typename OV::memory_space>(), false,
                       NoScoreMod(), NoMaskMod());
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
