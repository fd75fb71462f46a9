// Exact scaled-dot-product attention on the online (m, l, O) recurrence, and the merge of partial
// attention results.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/errors.hpp>
#include <kflash/impl/spec/attention_spec.hpp>

#include <cmath>
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
  /// A query that sees no key (Nq > Nk) gets O = 0 and lse = -inf.
  bool causal = false;
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
  p.mask = KeyMask{p.Nq, p.Nk, opt.causal};
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
  return p;
}

template <class T>
T attention_scale(const AttentionOptions& opt, index_t D) {
  return static_cast<T>(opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(D)));
}

template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
void attention_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                    const AttentionOptions& opt, const LV& lse, bool has_lse) {
  using T = typename OV::non_const_value_type;
  require_rank("attention", "q", q, 4, 4);
  require_rank("attention", "k", k, 4, 4);
  require_rank("attention", "v", v, 4, 4);
  require_rank("attention", "o", o, 4, 4);
  if (has_lse) require_rank("attention", "lse", lse, 3, 3);
  if constexpr (view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                view_rank<LV> == 3) {
    const AttentionPlan p = attention_args<ExecSpace>(q, k, v, o, opt, lse, has_lse);
    if (p.B * p.Hq * p.Nq == 0) return;
    dispatch_attention(exec, p, attention_scale<T>(opt, p.D), q, k, v, o, lse, has_lse);
  }
}

/// attention() through the team schedule of the given TeamAttentionShape on any execution space,
/// whatever the traits choose: the tests run the device schedule on host teams with it.
template <class Shape, class ExecSpace, class QV, class KV, class VV, class OV, class LV>
void attention_with_shape(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                          const AttentionOptions& opt, const LV& lse) {
  using T = typename OV::non_const_value_type;
  AttentionPlan p = attention_args<ExecSpace>(q, k, v, o, opt, lse, true);
  if (p.Dv > Shape::DV)
    throw_invalid_argument("attention", "Dv = " + std::to_string(p.Dv) + " exceeds the team shape's " +
                                            std::to_string(Shape::DV));
  if (p.B * p.Hq * p.Nq == 0) return;
  run_attention_with_shape<Shape>(exec, p, attention_scale<T>(opt, p.D), q, k, v, o, lse, true);
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
  impl::attention_impl(exec, q, k, v, o, options, lse, true);
}

template <class ExecSpace, class QV, class KV, class VV, class OV,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options = AttentionOptions()) {
  using T = typename OV::non_const_value_type;
  impl::attention_impl(exec, q, k, v, o, options, Kokkos::View<T***, typename OV::memory_space>(), false);
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
