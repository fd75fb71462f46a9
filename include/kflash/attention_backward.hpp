// attention_backward (GUIDE §8): the gradients of sum <dout, o> for o = attention(q, k, v, options)
// with respect to q, k and v, from the forward's o and lse, deterministic.
#pragma once

#include <kflash/attention.hpp>
#include <kflash/impl/spec/attention_backward_spec.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace kflash {

/// The gradients attention_backward computes beyond dq, dk and dv, each off while empty (a plain
/// struct of Views, as AttentionOptions):
struct AttentionGrads {
  /// (Hq), of q's value type (float where q is 16-bit): the gradient of options.sinks (which must be
  /// set).
  OptionView dsinks;
  /// options.bias's shape (B or 1, Hq or 1, Nq, Nk), of q's value type (float where q is 16-bit): the
  /// gradient of options.bias (which must be set), summed over the extents the bias broadcasts.
  OptionView dbias;
};

namespace impl {

/// An output option of AttentionGrads as an unmanaged View of rank R over its strides; throws
/// std::invalid_argument unless it is writable, of value type T, readable by ExecSpace and shaped
/// like `like` (the option it is the gradient of).
template <int R, class ExecSpace, class T>
auto grad_view(const char* fn, const OptionView& grad, const char* name, const OptionView& like,
               const char* like_name) {
  using View = Kokkos::View<std::conditional_t<R == 1, T*, T****>, Kokkos::LayoutStride,
                            typename ExecSpace::memory_space, Kokkos::MemoryUnmanaged>;
  if (grad.empty()) return View();
  const std::string got = describe(name, grad);
  if (like.empty()) throw_invalid_argument(fn, got + " is set, but " + like_name + " is not");
  if (!grad.holds<T>())
    throw_invalid_argument(fn, got + " must hold the value type of q, k and v (float where they hold 16-bit values)");
  if (!grad.writable()) throw_invalid_argument(fn, got + " is written: it must not hold const values");
  if (!grad.accessible_from<ExecSpace>())
    throw_invalid_argument(fn, got + " is in a memory space that " + ExecSpace::name() + " cannot write");
  bool same = grad.rank() == R && like.rank() == R;
  for (int d = 0; d < R; ++d) same = same && grad.extent(d) == like.extent(d);
  if (!same) throw_invalid_argument(fn, got + " must have the shape of " + describe(like_name, like));
  Kokkos::LayoutStride layout;
  for (int d = 0; d < R; ++d) layout.dimension[d] = grad.extent(d), layout.stride[d] = std::size_t(grad.stride(d));
  return View(static_cast<T*>(const_cast<void*>(grad.data())), layout);
}

/// The gradient Views as the kernels read them: varlen's packed (total, H, D) Views as (b, h, i, d)
/// rows of the sequences' offsets, dense Views as they are.
template <class View, class Mem>
auto backward_rows(const View& view, const Kokkos::View<const index_t*, Mem>& start, index_t B, index_t N) {
  if constexpr (view_rank<View> == 3) return PackedRows<View, Mem>{{}, view, start, B, N};
  else return view;
}

/// to(...) = from(...) converted (widened, or rounded once to nearest even), rank 3 or 4.
template <class ExecSpace, class From, class To>
void copy_converted(const ExecSpace& exec, const From& from, const To& to) {
  using S = typename To::non_const_value_type;
  if constexpr (view_rank<From> == 3) {
    Kokkos::parallel_for(
        "kflash::attention_backward convert",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>(exec, {0, 0, 0},
                                                          {from.extent(0), from.extent(1), from.extent(2)}),
        KOKKOS_LAMBDA(std::size_t a, std::size_t b, std::size_t c) {
          to(a, b, c) = store_as<S>(widen(from(a, b, c)));
        });
  } else {
    Kokkos::parallel_for(
        "kflash::attention_backward convert",
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>>(
            exec, {0, 0, 0, 0}, {from.extent(0), from.extent(1), from.extent(2), from.extent(3)}),
        KOKKOS_LAMBDA(std::size_t a, std::size_t b, std::size_t c, std::size_t d) {
          to(a, b, c, d) = store_as<S>(widen(from(a, b, c, d)));
        });
  }
}

/// A LayoutRight View of float in ExecSpace's memory of view's extents (rank 3 or 4), holding its
/// values widened where `copy`.
template <class ExecSpace, class View>
auto widened_copy(const ExecSpace& exec, const View& view, const char* label, bool copy = true) {
  constexpr int R = view_rank<View>;
  using Data = std::conditional_t<R == 3, float***, float****>;
  Kokkos::View<Data, Kokkos::LayoutRight, typename ExecSpace::memory_space> out(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string("kflash::attention_backward ") + label),
      view.extent(0), view.extent(1), view.extent(2), R == 4 ? view.extent(3) : KOKKOS_INVALID_INDEX);
  if (copy) copy_converted(exec, view, out);
  return out;
}

template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class DOV, class DQV, class DKV,
          class DVV, class ScoreMod, class MaskMod>
void attention_backward_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse,
                             const DOV& dout, const DQV& dq, const DKV& dk, const DVV& dv,
                             const AttentionOptions& opt, const AttentionGrads& grads, const ScoreMod& score_mod,
                             const MaskMod& mask_mod) {
  using S = typename OV::non_const_value_type;  // the storage
  using T = arith_t<S>;                         // the arithmetic, lse's and the options' type
  static_assert(std::is_same<ScoreMod, NoScoreMod>::value || has_score_derivative<ScoreMod, T>::value,
                "kflash::attention_backward: a score_mod works backward only with a member "
                "KOKKOS_FUNCTION T derivative(T score, b, h, i, j) const (d score_mod / d score)");
  static_check_view<ExecSpace, DOV, false, true>();
  static_check_view<ExecSpace, DQV, true, true>();
  static_check_view<ExecSpace, DKV, true, true>();
  static_check_view<ExecSpace, DVV, true, true>();
  static_check_same_type<OV, DOV>();
  static_check_same_type<OV, DQV>();
  static_check_same_type<OV, DKV>();
  static_check_same_type<OV, DVV>();
  const char* fn = "attention_backward";
  const CallScope<ExecSpace> call(fn);
  if (!opt.block_table.empty() || !opt.cache_seqlens.empty())
    throw_invalid_argument(fn, "paged K/V (options.block_table, options.cache_seqlens) is for inference only: it has "
                               "no backward");
  require_same_shape(fn, "o", o, "dout", dout);
  require_same_shape(fn, "q", q, "dq", dq);
  require_same_shape(fn, "k", k, "dk", dk);
  require_same_shape(fn, "v", v, "dv", dv);
  const auto outputs_apart_from = [&](const char* name, const auto& in) {
    require_disjoint(fn, "dq", dq, name, in);
    require_disjoint(fn, "dk", dk, name, in);
    require_disjoint(fn, "dv", dv, name, in);
  };
  outputs_apart_from("q", q), outputs_apart_from("k", k), outputs_apart_from("v", v);
  outputs_apart_from("o", o), outputs_apart_from("lse", lse), outputs_apart_from("dout", dout);
  require_disjoint(fn, "dk", dk, "dq", dq);
  require_disjoint(fn, "dv", dv, "dq", dq);
  require_disjoint(fn, "dv", dv, "dk", dk);
  require_disjoint_from_options(fn, "dq", dq, opt);
  require_disjoint_from_options(fn, "dk", dk, opt);
  require_disjoint_from_options(fn, "dv", dv, opt);
  OptionGrads<T, typename ExecSpace::memory_space> option_grads;
  option_grads.dsinks = grad_view<1, ExecSpace, T>(fn, grads.dsinks, "grads.dsinks", opt.sinks, "options.sinks");
  option_grads.dbias = grad_view<4, ExecSpace, T>(fn, grads.dbias, "grads.dbias", opt.bias, "options.bias");
  const std::pair<const char*, const OptionView*> written[] = {{"grads.dsinks", &grads.dsinks},
                                                               {"grads.dbias", &grads.dbias}};
  for (const auto& g : written) {
    if (g.second->empty()) continue;
    const auto apart = [&](const char* name, const auto& in) {
      if (bytes_overlap(g.second->data(), footprint_bytes(*g.second), in.data(), footprint_bytes(in)))
        throw_aliased(fn, describe(g.first, *g.second), describe(name, in));
    };
    apart("q", q), apart("k", k), apart("v", v), apart("o", o), apart("lse", lse), apart("dout", dout);
    apart("dq", dq), apart("dk", dk), apart("dv", dv);
    require_disjoint_from_options(fn, g.first, *g.second, opt);
  }
  if (!grads.dsinks.empty() && !grads.dbias.empty() &&
      bytes_overlap(grads.dsinks.data(), footprint_bytes(grads.dsinks), grads.dbias.data(),
                    footprint_bytes(grads.dbias)))
    throw_aliased(fn, describe("grads.dsinks", grads.dsinks), describe("grads.dbias", grads.dbias));
  constexpr bool ranks_match = view_rank<DOV> == view_rank<OV> && view_rank<DQV> == view_rank<QV> &&
                               view_rank<DKV> == view_rank<KV> && view_rank<DVV> == view_rank<VV>;
  constexpr bool ranks_known = view_rank<QV> >= 3 && view_rank<QV> <= 4 && view_rank<KV> == view_rank<QV> &&
                               view_rank<VV> == view_rank<QV> && view_rank<OV> == view_rank<QV>;
  if constexpr (is_half_type<S>) {
    // 16-bit storage: the inputs widened to float copies (O(N (D + Dv)) memory), the float gradients,
    // each rounded once into dq, dk and dv. The checks above ran on the caller's Views (aliasing);
    // the float call checks the shapes and options, naming the same extents.
    if constexpr (ranks_match && ranks_known) {
      const auto q32 = widened_copy(exec, q, "q"), k32 = widened_copy(exec, k, "k"), v32 = widened_copy(exec, v, "v");
      const auto o32 = widened_copy(exec, o, "o"), dout32 = widened_copy(exec, dout, "dout");
      const auto dq32 = widened_copy(exec, dq, "dq", false), dk32 = widened_copy(exec, dk, "dk", false);
      const auto dv32 = widened_copy(exec, dv, "dv", false);
      attention_backward_impl(exec, q32, k32, v32, o32, lse, dout32, dq32, dk32, dv32, opt, grads, score_mod, mask_mod);
      copy_converted(exec, dq32, dq), copy_converted(exec, dk32, dk), copy_converted(exec, dv32, dv);
      exec.fence();  // the copies must outlive the kernels
    } else {
      attention_impl(exec, q, k, v, o, opt, lse, true, score_mod, mask_mod, [](const auto&...) {}, fn,
                     std::false_type());  // throws for the ranks
    }
  } else if constexpr (ranks_match) {  // (else require_same_shape threw)
    bool ran = false;
    // The forward's checks (shapes, options) name their call "attention": a backward call's name them
    // attention_backward.
    try {
      attention_impl(
          exec, q, k, v, o, opt, lse, true, score_mod, mask_mod,
          [&](const AttentionPlan& p, const auto& terms, const auto& seq, const auto& qa, const auto& ka, const auto& va,
              const auto& oa, const auto& la, bool) {
            ran = true;
            dispatch_attention_backward(exec, p, terms, seq, qa, ka, va, oa, la,
                                        backward_rows(dout, seq.cu_q, p.B, p.Nq),
                                        backward_rows(dq, seq.cu_q, p.B, p.Nq), backward_rows(dk, seq.cu_k, p.B, p.Nk),
                                        backward_rows(dv, seq.cu_k, p.B, p.Nk), option_grads);
          },
          fn, std::false_type());
    } catch (const std::invalid_argument& e) {
      const std::string forward = "kflash::attention: ", message = e.what();
      if (message.rfind(forward, 0) != 0) throw;
      throw std::invalid_argument("kflash::attention_backward: " + message.substr(forward.size()));
    }
    if (!ran) {  // no query row: nothing receives a gradient
      zero_fill(exec, dk);
      zero_fill(exec, dv);
      if (option_grads.dsinks.data()) Kokkos::deep_copy(exec, option_grads.dsinks, T(0));
      if (option_grads.dbias.data()) zero_fill(exec, option_grads.dbias);
      exec.fence();
    }
  }
}

}  // namespace impl

/// The gradients of sum <dout, o> for o = attention(exec, q, k, v, o, options, lse) with respect to
/// q, k and v (FlashAttention 2's algorithm: P recomputed from the forward's lse, dS = P (dP - D),
/// D = rowsum(dout * o)):
///   dq shaped like q, dk like k, dv like v, dout like o; o and lse as the forward wrote them.
/// Every forward option works backward (causal, windows, softcap through tanh's derivative, ALiBi,
/// sinks, bias, mask, block_mask, varlen, GQA/MQA with dk and dv summed over each group, Dv != D),
/// Views of any layout. Paged K/V is inference-only and throws std::invalid_argument. Rows without
/// a visible key give nothing; a masked pair gives exactly 0; NaN propagates. Deterministic: no
/// atomics, the same gradients run to run and for any number of threads. Returns when they are written.
/// 16-bit q, k, v, o, dout, dq, dk, dv (kflash::bhalf_t, kflash::half_t; lse, the options and grads
/// float): computed in float on widened copies of the inputs, each gradient rounded once.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class DOV, class DQV, class DKV,
          class DVV, std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention_backward(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse,
                        const DOV& dout, const DQV& dq, const DKV& dk, const DVV& dv,
                        const AttentionOptions& options = {}) {
  impl::attention_backward_impl(exec, q, k, v, o, lse, dout, dq, dk, dv, options, AttentionGrads(), NoScoreMod(),
                                NoMaskMod());
}

/// The same, also writing the gradients `grads` asks for (dsinks, dbias).
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class DOV, class DQV, class DKV,
          class DVV, std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention_backward(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse,
                        const DOV& dout, const DQV& dq, const DKV& dk, const DVV& dv, const AttentionOptions& options,
                        const AttentionGrads& grads) {
  impl::attention_backward_impl(exec, q, k, v, o, lse, dout, dq, dk, dv, options, grads, NoScoreMod(), NoMaskMod());
}

/// The same with the forward's user functors; a score_mod needs a member
///   KOKKOS_FUNCTION T derivative(T score, b, h, i, j) const   (d score_mod / d score at score).
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class DOV, class DQV, class DKV,
          class DVV, class ScoreMod, class MaskMod,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention_backward(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse,
                        const DOV& dout, const DQV& dq, const DKV& dk, const DVV& dv, const AttentionOptions& options,
                        const ScoreMod& score_mod, const MaskMod& mask_mod) {
  impl::attention_backward_impl(exec, q, k, v, o, lse, dout, dq, dk, dv, options, AttentionGrads(), score_mod,
                                mask_mod);
}

/// The same with grads.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, class DOV, class DQV, class DKV,
          class DVV, class ScoreMod, class MaskMod,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention_backward(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse,
                        const DOV& dout, const DQV& dq, const DKV& dk, const DVV& dv, const AttentionOptions& options,
                        const AttentionGrads& grads, const ScoreMod& score_mod, const MaskMod& mask_mod) {
  impl::attention_backward_impl(exec, q, k, v, o, lse, dout, dq, dk, dv, options, grads, score_mod, mask_mod);
}

/// The same, on the default execution space of o's View.
template <class QV, class KV, class VV, class OV, class LV, class DOV, class DQV, class DKV, class DVV,
          std::enable_if_t<Kokkos::is_view<QV>::value, int> = 0>
void attention_backward(const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse, const DOV& dout,
                        const DQV& dq, const DKV& dk, const DVV& dv, const AttentionOptions& options = {}) {
  attention_backward(impl::default_space<OV>("attention_backward"), q, k, v, o, lse, dout, dq, dk, dv, options);
}

}  // namespace kflash
