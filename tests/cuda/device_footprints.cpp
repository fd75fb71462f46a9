// Prints, without a device and without initializing Kokkos, the Kokkos version it was built with
// and the launch footprint of each device schedule that the static gates (tests/cuda/static_gates.py)
// judge: threads and scratch bytes per team, one line each:
//   <kernel family> <template arguments naming the shape> threads=<n> scratch=<bytes>
// Attention's team and warp shapes are printed at D = DV, the head dimension they are sized for (the
// backward's two kernels, dq and dk/dv, share each of their shapes' footprint); the row kernels'
// teams are those the device traits launch (the team tier's smallest team), the lane tier's scratch
// at its longest row; the merge's team with its full chunk of parts.
#include <kflash/impl/schedule/merge_attention.hpp>
#include <kflash/impl/schedule/team_attention.hpp>
#include <kflash/impl/schedule/team_backward_tiles.hpp>
#include <kflash/impl/schedule/warp_attention.hpp>
#include <kflash/impl/traits.hpp>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <type_traits>

namespace {

using Traits = kflash::impl::DeviceTraits;
using Exec = Kokkos::DefaultExecutionSpace;

template <class T>
const char* type_name() {
  return sizeof(T) == 4 ? "float" : "double";
}

/// The team shapes attention takes (where the traits give no warp shape).
template <class T, int DV, bool Narrow>
void print_attention() {
  if constexpr (!std::is_void<typename Traits::template warp_shape<T, DV, Narrow>>::value) return;
  using Shape = typename Traits::template team_shape<T, DV, Narrow>;
  using Scratch = kflash::impl::TeamAttentionScratch<Exec, Shape>;
  std::printf("TeamAttentionKernel TeamAttentionShape<%s, %d, %d, %d, %d, %d, %d> threads=%d scratch=%zu\n",
              type_name<T>(), Shape::BQ, Shape::BK, Shape::TM, Shape::TN, Shape::DV, Shape::blocks,
              Shape::team_size, Scratch::bytes(DV));
}

/// The warp-product schedule's shapes, by storage: float, bf16 for kflash::bhalf_t, fp16 for kflash::half_t.
template <class S, int DV>
void print_warp_attention() {
  using Shape = typename Traits::template warp_shape<S, DV, false>;
  using Scratch = kflash::impl::WarpAttentionScratch<Shape>;
  std::printf("WarpAttentionKernel WarpAttentionShape<%s, %d, %d, %d, %d, %s> threads=%d scratch=%zu\n",
              std::is_same<S, float>::value ? "float" : std::is_same<S, kflash::bhalf_t>::value ? "bf16" : "fp16",
              Shape::warps, Shape::BK, Shape::DV, Shape::blocks, Shape::prefetch ? "true" : "false",
              Shape::team_size, Scratch::bytes(DV));
}

template <class T, int DV>
void print_backward() {
  using Shape = typename Traits::template backward_shape<T, DV>;
  const std::size_t bytes = kflash::impl::TeamBackwardScratch<Shape>::bytes();
  for (const char* kernel : {"TeamBackwardDq", "TeamBackwardDkv"})
    std::printf("%s TeamAttentionShape<%s, %d, %d, %d, %d, %d, %d> threads=%d scratch=%zu\n", kernel, type_name<T>(),
                Shape::BQ, Shape::BK, Shape::TM, Shape::TN, Shape::DV, Shape::blocks, Shape::team_size, bytes);
}

template <class T>
void print_all() {
  print_backward<T, Traits::team_dv_small>();
  print_backward<T, Traits::team_dv_large>();
  print_attention<T, Traits::team_dv_small, false>();
  print_attention<T, Traits::team_dv_large, false>();
  print_attention<T, Traits::team_dv_small, true>();
  print_attention<T, Traits::team_dv_large, true>();
  using Buffer = Kokkos::View<T*, Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;  // LaneRowKernel's
  std::printf("RowKernel %s threads=%d scratch=0\n", type_name<T>(), Traits::row_team_size * Traits::vector_length);
  std::printf("LaneRowKernel %s threads=%d scratch=%zu\n", type_name<T>(), Traits::lane_team_size * Traits::vector_length,
              Traits::lane_team_size * Buffer::shmem_size(Traits::lane_cols));
  std::printf("TeamRowKernel %s threads=%d scratch=0\n", type_name<T>(), Traits::min_team_size);
  using Mem = Exec::memory_space;
  using Merge = kflash::impl::MergeKernel<Exec, Kokkos::View<T*****, Mem>, Kokkos::View<T****, Mem>,
                                         Kokkos::View<T****, Mem>, Kokkos::View<T***, Mem>, kflash::impl::Sequences<Mem>>;
  const kflash::impl::MergePlan merge = kflash::impl::plan_merge<Traits>(1, Traits::merge_chunk, 128, 1);
  std::printf("MergeKernel %s threads=%d scratch=%zu\n", type_name<T>(), merge.team_size, Merge::scratch_bytes(merge));
}

}  // namespace

int main() {
  std::printf("KOKKOS_VERSION %d\n", KOKKOS_VERSION);  // the expected failures may depend on it
  print_all<float>();
  print_all<double>();
  for (auto print : {print_warp_attention<float, Traits::team_dv_small>,
                     print_warp_attention<float, Traits::team_dv_large>,
                     print_warp_attention<kflash::bhalf_t, Traits::team_dv_small>,
                     print_warp_attention<kflash::bhalf_t, Traits::team_dv_large>,
                     print_warp_attention<kflash::half_t, Traits::team_dv_small>,
                     print_warp_attention<kflash::half_t, Traits::team_dv_large>})
    print();
  return 0;
}
