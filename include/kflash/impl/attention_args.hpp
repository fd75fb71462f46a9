// attention()'s argument checks: the options, the Views' shapes for dense, varlen and paged calls,
// and the option Views turned into what the kernels read (strided arrays, index Views). Every
// failure throws std::invalid_argument naming the argument and its extents or value.
#pragma once

#include <kflash/attention_options.hpp>
#include <kflash/impl/errors.hpp>
#include <kflash/impl/spec/attention_spec.hpp>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kflash::impl {

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

/// Checks attention()'s View types: q, k, v and o of one storage type S (float, double, or 16-bit:
/// kflash::bhalf_t, kflash::half_t), lse of S's arithmetic type (float for 16-bit); rank 4 (rank 3
/// with lse rank 2 when varlen); o and lse writable where Written. Takes16 false: the call takes
/// float or double only. ArithOut: o may also hold S's arithmetic type (a stream's chunk results).
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, bool Written = true, bool Takes16 = true,
          bool ArithOut = false>
void static_check_attention_views() {
  static_check_view<ExecSpace, QV, false, Takes16>();
  static_check_view<ExecSpace, KV, false, Takes16>();
  static_check_view<ExecSpace, VV, false, Takes16>();
  static_check_view<ExecSpace, OV, Written, Takes16>();
  static_check_view<ExecSpace, LV, Written>();
  using S = std::remove_cv_t<typename QV::value_type>;
  using OS = typename OV::non_const_value_type;
  static_assert(std::is_same<std::remove_cv_t<typename KV::value_type>, S>::value &&
                    std::is_same<std::remove_cv_t<typename VV::value_type>, S>::value &&
                    (std::is_same<OS, S>::value || (ArithOut && std::is_same<OS, arith_t<S>>::value)),
                "kflash::attention: q, k, v and o must have the same value type");
  static_assert(std::is_same<typename LV::non_const_value_type, arith_t<S>>::value,
                "kflash::attention: lse must have the value type of o, or float where o holds kflash::bhalf_t or "
                "kflash::half_t");
}

/// q, k, v, o and lse named with their extents for the messages of a failed check, described only
/// then: built on every call, the strings took about a quarter of a small call's time.
template <class QV, class KV, class VV, class OV, class LV>
struct ShapeNames {
  const QV& q;
  const KV& k;
  const VV& v;
  const OV& o;
  const LV& lse;
  std::string shapes() const {
    return " (" + describe("q", q) + ", " + describe("k", k) + ", " + describe("v", v) + ")";
  }
};

template <class QV, class KV, class VV, class OV, class LV>
ShapeNames<QV, KV, VV, OV, LV> shape_names(const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse) {
  return {q, k, v, o, lse};
}

/// Checks the shapes of q, k, v, o, lse given as (B, H, N, D) in `e` (each View's extents mapped to
/// that order by the caller) and fills p's shapes; `names` (ShapeNames) describes the Views for
/// messages.
template <class Names>
void check_shapes(AttentionPlan& p, const std::size_t (&q)[4], const std::size_t (&k)[4], const std::size_t (&v)[4],
                  const std::size_t (&o)[4], const std::size_t (&lse)[3], bool has_lse, const Names& names,
                  const char* o_expected, const char* lse_expected) {
  auto fail = [&](const std::string& what) { throw_invalid_argument("attention", what); };
  p.B = q[0], p.Hq = q[1], p.Nq = q[2], p.D = q[3];
  p.Hk = k[1], p.Nk = k[2], p.Dv = v[3];
  if (k[0] != q[0] || v[0] != q[0]) fail("q, k and v must have the same batch extent B" + names.shapes());
  if (index_t(v[1]) != p.Hk) fail("k and v must have the same number of heads Hk" + names.shapes());
  if (p.Hk == 0 || p.Hq % p.Hk != 0)
    fail("the query heads Hq must be a multiple of the key/value heads Hk" + names.shapes());
  if (index_t(k[3]) != p.D) fail("q and k must have the same head dimension D" + names.shapes());
  if (index_t(v[2]) != p.Nk) fail("k and v must have the same number of keys Nk" + names.shapes());
  if (p.D < 1 || p.Dv < 1) fail("head dimensions D and Dv must be at least 1" + names.shapes());
  if (index_t(o[0]) != p.B || index_t(o[1]) != p.Hq || index_t(o[2]) != p.Nq || index_t(o[3]) != p.Dv)
    fail("argument '" + describe("o", names.o) + "' must have extents " + o_expected + names.shapes());
  if (has_lse && (index_t(lse[0]) != p.B || index_t(lse[1]) != p.Hq || index_t(lse[2]) != p.Nq))
    fail("argument '" + describe("lse", names.lse) + "' must have extents " + lse_expected + names.shapes());
}

template <class V, int R>
void extents_of(const V& v, std::size_t (&e)[R], std::initializer_list<int> order) {
  int i = 0;
  for (int d : order) e[i++] = d < 0 ? 1 : v.extent(d);
}

/// Checks dense attention()'s arguments and returns the call's shapes and options; throws
/// std::invalid_argument naming the argument and the extents. (Their View types: attention_impl's
/// static_check_attention_views.)
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
AttentionPlan attention_args(const QV& q, const KV& k, const VV& v, const OV& o, const AttentionOptions& opt,
                             const LV& lse, bool has_lse) {
  static_assert(view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                    view_rank<LV> == 3,
                "kflash::attention: q, k, v, o must be rank-4 Views and lse a rank-3 View");
  AttentionPlan p;
  std::size_t eq[4], ek[4], ev[4], eo[4], el[3];
  extents_of(q, eq, {0, 1, 2, 3}), extents_of(k, ek, {0, 1, 2, 3}), extents_of(v, ev, {0, 1, 2, 3});
  extents_of(o, eo, {0, 1, 2, 3}), extents_of(lse, el, {0, 1, 2});
  check_shapes(p, eq, ek, ev, eo, el, has_lse, shape_names(q, k, v, o, lse), "(B, Hq, Nq, Dv)", "(B, Hq, Nq)");
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

/// The bytes an OptionView's values span (as footprint_bytes of a View).
inline std::size_t footprint_bytes(const OptionView& v) { return v.footprint_bytes(); }

/// Throws unless the output `out` and every option array of `opt` occupy disjoint memory (an output
/// over the varlen offsets or the block table would rewrite them while the call reads them).
template <class Out>
void require_disjoint_from_options(const char* fn, const char* out_name, const Out& out, const AttentionOptions& opt) {
  const std::pair<const char*, const OptionView*> options[] = {
      {"options.alibi_slopes", &opt.alibi_slopes}, {"options.sinks", &opt.sinks},
      {"options.bias", &opt.bias},                 {"options.mask", &opt.mask},
      {"options.cu_seqlens_q", &opt.cu_seqlens_q}, {"options.cu_seqlens_k", &opt.cu_seqlens_k},
      {"options.block_table", &opt.block_table},   {"options.cache_seqlens", &opt.cache_seqlens},
      {"options.block_mask", &opt.block_mask}};
  for (const auto& named : options)
    if (bytes_overlap(out.data(), footprint_bytes(out), named.second->data(), named.second->footprint_bytes()))
      throw_aliased(fn, describe(out_name, out), describe(named.first, *named.second));
}

/// Option `name` (an OptionView of V) as a strided array over `want` (rank extents), where the first
/// `broadcast` extents may also be 1 (then read with stride 0); throws std::invalid_argument naming
/// the option, its extents and the shape expected() describes otherwise (built only then). An
/// empty option gives a null array.
template <class ExecSpace, class V, class Expected>
Strided<V> option_array(const OptionView& ov, const char* name, std::initializer_list<index_t> want, int broadcast,
                        const Expected& expected) {
  Strided<V> a;
  if (ov.empty()) return a;
  const char* fn = "attention";
  const std::string got = describe(name, ov);
  if (!ov.holds<V>())
    throw_invalid_argument(
        fn, got + " holds " + ov.value_name() + " values, expected " +
                (std::is_same<V, bool>::value ? std::string("bool")
                 : std::is_same<V, float>::value
                     ? std::string("float (the value type of q, k and v, or float where they hold 16-bit values)")
                     : std::string("double (the value type of q, k and v)")));
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
  if (!ok) throw_invalid_argument(fn, got + " must be shaped " + expected());
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
  // The shapes expected of the options, described only for the message of one that does not fit.
  const auto heads = [&p] { return "(Hq) = (" + std::to_string(p.Hq) + ")"; };
  const auto heads_or_batches = [&p] {
    return "(Hq) = (" + std::to_string(p.Hq) + ") or (B, Hq) = (" + std::to_string(p.B) + ", " +
           std::to_string(p.Hq) + ")";
  };
  // A broadcast extent's value: "2 or 1", or "1" where the extent is 1 already.
  const auto or_one = [](index_t e) { return e == 1 ? std::string("1") : std::to_string(e) + " or 1"; };
  const auto pairs = [&] {
    return "(B or 1, Hq or 1, Nq, Nk) = (" + or_one(p.B) + ", " + or_one(p.Hq) + ", " + std::to_string(p.Nq) + ", " +
           std::to_string(p.Nk) + ")";
  };
  ScoreOptions<T> so;
  if (opt.softcap != 0) {
    so.softcap = T(opt.softcap);
    so.inv_softcap = T(1.0 / opt.softcap);
  }
  if (!opt.alibi_slopes.empty()) {
    if (opt.alibi_slopes.rank() == 1) {  // (Hq): broadcast over batches
      const Strided<T> h =
          option_array<ExecSpace, T>(opt.alibi_slopes, "options.alibi_slopes", {p.Hq}, 0, heads_or_batches);
      so.alibi.data = h.data;
      so.alibi.s1 = h.s0;
    } else {
      so.alibi = option_array<ExecSpace, T>(opt.alibi_slopes, "options.alibi_slopes", {p.B, p.Hq}, 0, heads_or_batches);
    }
  }
  so.bias = option_array<ExecSpace, T>(opt.bias, "options.bias", {p.B, p.Hq, p.Nq, p.Nk}, 2, pairs);
  so.mask = option_array<ExecSpace, bool>(opt.mask, "options.mask", {p.B, p.Hq, p.Nq, p.Nk}, 2, pairs);
  const Strided<T> sinks = option_array<ExecSpace, T>(opt.sinks, "options.sinks", {p.Hq}, 0, heads);
  BlockMask block_mask;
  if (!opt.block_mask.empty()) {
    if (opt.block_mask_q < 1 || opt.block_mask_k < 1)
      throw_invalid_argument("attention", "options.block_mask_q and block_mask_k must be >= 1, got " +
                                              std::to_string(opt.block_mask_q) + " and " +
                                              std::to_string(opt.block_mask_k));
    const index_t nbq = (p.Nq + opt.block_mask_q - 1) / opt.block_mask_q,
                  nbk = (p.Nk + opt.block_mask_k - 1) / opt.block_mask_k;
    block_mask.blocks = option_array<ExecSpace, bool>(
        opt.block_mask, "options.block_mask", {p.B, p.Hq, nbq, nbk}, 2, [&] {
          return "(B or 1, Hq or 1, ceil(Nq / block_mask_q), ceil(Nk / block_mask_k)) = (" + or_one(p.B) + ", " +
                 or_one(p.Hq) + ", " + std::to_string(nbq) + ", " + std::to_string(nbk) + ")";
        });
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

}  // namespace kflash::impl
