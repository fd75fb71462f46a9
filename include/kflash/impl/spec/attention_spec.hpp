// Picks attention's schedule for an execution space: on spaces whose traits have host kernels, the
// host schedule (host/host_attention.hpp); elsewhere the traits' schedule for the call's storage and
// Dv: the warp-product schedule of 16-bit storage (schedule/warp_attention.hpp), the team schedule
// (schedule/team_attention.hpp), else the per-row schedule
// (schedule/attention_kernel.hpp). Split-K/V calls run partial results, then their merge.
#pragma once

#include <kflash/impl/host/host_attention.hpp>
#include <kflash/impl/schedule/attention_kernel.hpp>
#include <kflash/impl/schedule/block_mask.hpp>
#include <kflash/impl/schedule/merge_attention.hpp>
#include <kflash/impl/schedule/team_attention.hpp>
#include <kflash/impl/schedule/warp_attention.hpp>
#include <kflash/impl/workspace.hpp>

#include <type_traits>

namespace kflash::impl {

/// The kernel of a schedule: Shape = void for the per-row schedules, else a WarpAttentionShape or a
/// TeamAttentionShape.
template <class Traits, class Shape, class ExecSpace, class Stage, class QV, class KV, class VV, class OV, class LV,
          bool Partial>
using AttentionKernelOf = std::conditional_t<
    is_warp_shape<Shape>, WarpAttentionKernel<ExecSpace, Shape, Stage, QV, KV, VV, OV, LV, Partial>,
    std::conditional_t<
        !std::is_void<Shape>::value, TeamAttentionKernel<ExecSpace, Shape, Stage, QV, KV, VV, OV, LV, Partial>,
        std::conditional_t<Traits::host_kernels,
                           host::HostAttentionKernel<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial>,
                           AttentionKernel<ExecSpace, Stage, QV, KV, VV, OV, LV, Partial>>>>;

/// What a call adds to q, k, v: the scale, the score stage, the sinks and the block mask.
template <class T, class Stage>
struct AttentionTerms {
  T scale;
  Stage stage;
  Strided<T> sinks;
  BlockMask block_mask;
};

/// Launches the kernel of Shape on a planned call: into o and lse, or, with Partial, into split
/// K/V's partial results, one part per key split. packed: K packed by PackKeys or PackKeyPairs, for
/// the host kernel.
template <bool Partial, class Traits, class Shape, class ExecSpace, class Terms, class Seq, class QV, class KV,
          class VV, class OV, class LV>
void launch_attention(const ExecSpace& exec, const AttentionPlan& p, const Terms& terms, const Seq& seq, const QV& q,
                      const KV& k, const VV& v, const OV& o, const LV& lse, bool has_lse,
                      const host::PackedKV<arith_t<typename OV::non_const_value_type>>& packed) {
  using Kernel = AttentionKernelOf<Traits, Shape, ExecSpace, decltype(terms.stage), QV, KV, VV, OV, LV, Partial>;
  Kernel kernel{{q, k, v, o, lse, has_lse, p, terms.scale, terms.stage, terms.sinks, terms.block_mask, 0, seq}};
  if constexpr (Traits::host_kernels && std::is_void<Shape>::value) kernel.packed_kv = packed;
  if constexpr (!std::is_void<Shape>::value) kernel.chunked_kv = rows_in_chunks(k, p.D) && rows_in_chunks(v, p.Dv);
  const std::size_t league = std::size_t(p.B * p.Hk * p.nqb * p.nsplits);
  const std::size_t bytes = Kernel::scratch_bytes(p);
  kernel.scratch_level = bytes <= std::size_t(Kokkos::TeamPolicy<ExecSpace>::scratch_size_max(0)) ? 0 : 1;
  const char* label = Partial ? "kflash::attention split_kv" : "kflash::attention";
  // Teams of unequal work (sequences of their own lengths, causal or windowed rows, tiles a block
  // mask skips) are handed out as threads free up: in a static split, one thread could get all the
  // long rows of a causal head.
  const bool uneven = p.ragged || p.window_left >= 0 || p.window_right >= 0 || terms.block_mask.blocks.on();
  if (uneven) {
    using Dynamic = Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
    Kokkos::parallel_for(label,
                         Dynamic(exec, int(league), int(p.team_size), 1)
                             .set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes)),
                         kernel);
    return;
  }
  Kokkos::parallel_for(label,
                       Kokkos::TeamPolicy<ExecSpace>(exec, int(league), int(p.team_size), 1)
                           .set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes)),
                       kernel);
}

/// Where a planned call keeps what its kernels share, in one workspace: K packed for the host
/// kernels (plan's packed_ld > 0: D x packed_ld values of T per K/V head, or with pairs
/// pair_dims(D) x packed_ld 16-bit values of K and then, value_pairs values further, dvp x
/// packed_ld of V), then split K/V's partial lse and O (nsplits > 1). Offsets and size in bytes
/// (value_pairs: in 16-bit values); bytes = 0 when the call needs none.
template <class T, class MemorySpace>
struct AttentionWorkspace {
  std::size_t packed = 0, value_pairs = 0, lse = 0, o = 0, bytes = 0;

  AttentionWorkspace(const AttentionPlan& p, bool pairs) {
    using Scratch = CachedWorkspace<MemorySpace>;
    if (pairs) value_pairs = std::size_t(p.B * p.Hk * host::pair_dims(p.D) * p.packed_ld);
    const std::size_t packed_values = pairs ? value_pairs + std::size_t(p.B * p.Hk * p.dvp * p.packed_ld)
                                            : std::size_t(p.B * p.Hk * p.D * p.packed_ld);
    lse = Scratch::aligned((pairs ? 2 : sizeof(T)) * packed_values);
    const std::size_t lse_count = p.nsplits > 1 ? std::size_t(p.nsplits * p.B * p.Hq * p.Nq) : 0;
    o = lse + Scratch::aligned(sizeof(T) * lse_count);
    bytes = o + sizeof(T) * lse_count * std::size_t(p.Dv);
  }
};

/// Runs a planned call with the kernel of Shape: K packed first where the plan asks, then the
/// kernel, then, where the keys are split, the exact merge of the splits' partial results.
template <class Traits, class Shape, class ExecSpace, class Terms, class Seq, class QV, class KV, class VV, class OV,
          class LV>
void run_attention(const ExecSpace& exec, const AttentionPlan& p, const Terms& terms, const Seq& seq, const QV& q,
                   const KV& k, const VV& v, const OV& o, const LV& lse, bool has_lse) {
  using T = arith_t<typename OV::non_const_value_type>;  // K packed and the partial results: float for 16-bit
  using S = std::remove_cv_t<typename KV::value_type>;
  using mem = typename OV::memory_space;
  constexpr bool host_kernel = Traits::host_kernels && std::is_void<Shape>::value;
  // The host kernel's bf16 blocks take K in pairs where the kernels have bf16 products
  // (HostAttentionKernel::bf16).
  constexpr bool bf16 = host_kernel && is_half_type<S> && host::storage16_of<S> == host::Storage16::bf16;
  const bool pairs = bf16 && host::bf16_products();
  const AttentionWorkspace<T, mem> parts(p, pairs);
  host::PackedKV<T> packed;
  if (parts.bytes == 0) {
    launch_attention<false, Traits, Shape>(exec, p, terms, seq, q, k, v, o, lse, has_lse, packed);
    return;
  }
  const CachedWorkspace<mem> scratch(exec, parts.bytes, "kflash::attention workspace");
  if constexpr (host_kernel) {
    if (p.packed_ld > 0) {
      const Kokkos::RangePolicy<ExecSpace> heads(exec, 0, p.B * p.Hk * (p.packed_ld / p.bk));
      if constexpr (bf16) {
        if (pairs) {
          std::uint16_t* key_pairs = scratch.template at<std::uint16_t>(parts.packed);
          std::uint16_t* value_pairs = key_pairs + parts.value_pairs;
          Kokkos::parallel_for("kflash::attention pack_keys", heads,
                               host::PackKeyPairs<KV>{k, key_pairs, p.Hk, p.Nk, p.D, p.packed_ld, p.bk});
          Kokkos::parallel_for("kflash::attention pack_values", heads,
                               host::PackValuePairs<VV>{v, value_pairs, p.Hk, p.Nk, p.Dv, p.dvp, p.packed_ld, p.bk});
          packed.key_pairs = key_pairs, packed.value_pairs = value_pairs;
        }
      }
      if (packed.key_pairs == nullptr) {
        T* packed_keys = scratch.template at<T>(parts.packed);
        Kokkos::parallel_for("kflash::attention pack_keys", heads,
                             host::PackKeys<KV, T>{k, packed_keys, p.Hk, p.Nk, p.D, p.packed_ld, p.bk});
        packed.keys = packed_keys;
      }
    }
  }
  if (p.nsplits == 1) {
    launch_attention<false, Traits, Shape>(exec, p, terms, seq, q, k, v, o, lse, has_lse, packed);
  } else {
    using Parts = Kokkos::View<T*****, Kokkos::LayoutRight, mem, Kokkos::MemoryUnmanaged>;
    using PartsLse = Kokkos::View<T****, Kokkos::LayoutRight, mem, Kokkos::MemoryUnmanaged>;
    const Parts o_parts(scratch.template at<T>(parts.o), p.nsplits, p.B, p.Hq, p.Nq, p.Dv);
    const PartsLse lse_parts(scratch.template at<T>(parts.lse), p.nsplits, p.B, p.Hq, p.Nq);
    launch_attention<true, Traits, Shape>(exec, p, terms, seq, q, k, v, o_parts, lse_parts, true, packed);
    run_merge(exec, o_parts, lse_parts, o, lse, has_lse, seq);
  }
  exec.fence();  // the workspace must outlive the kernels
}

/// Plans and runs a call whose shapes and options are in p, under the space's traits.
template <class ExecSpace, class Terms, class Seq, class QV, class KV, class VV, class OV, class LV>
void dispatch_attention(const ExecSpace& exec, AttentionPlan p, const Terms& terms, const Seq& seq, const QV& q,
                        const KV& k, const VV& v, const OV& o, const LV& lse, bool has_lse) {
  using S = std::remove_cv_t<typename QV::value_type>;  // the storage decides the schedule (o may be wider)
  using Traits = ScheduleTraits<ExecSpace>;
  p = plan_attention<S, Traits>(exec, p);
  with_team_shape<S, Traits>(p, [&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    run_attention<Traits, Shape>(exec, p, terms, seq, q, k, v, o, lse, has_lse);
  });
}

/// The same through the schedule of the given TeamAttentionShape or WarpAttentionShape, whatever the
/// traits choose (the tests run it on host teams).
template <class Shape, class ExecSpace, class Terms, class Seq, class QV, class KV, class VV, class OV, class LV>
void run_attention_with_shape(const ExecSpace& exec, AttentionPlan p, const Terms& terms, const Seq& seq,
                              const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse, bool has_lse) {
  using Traits = ScheduleTraits<ExecSpace>;
  p = plan_splits<Traits>(exec, with_shape<Traits, Shape>(p));
  run_attention<Traits, Shape>(exec, p, terms, seq, q, k, v, o, lse, has_lse);
}

}  // namespace kflash::impl
