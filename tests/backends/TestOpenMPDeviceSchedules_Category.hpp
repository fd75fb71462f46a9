// Compiles the test bodies for the OpenMP backend with the device schedules: ScheduleTraits of
// Kokkos::OpenMP are replaced by device traits sized for teams of two host threads, so every kernel
// takes the code that runs on GPUs (team rows and lanes, split rows, team and per-row attention,
// team barriers, scratch reuse, nested reductions) instead of the compiled host kernels.
#pragma once
#include <kflash/impl/traits.hpp>

namespace kflash::impl {

struct HostTeamDeviceTraits : DeviceTraits {
  static constexpr bool is_host = true;  // the data is in host memory
  static constexpr int vector_length = 1;
  static constexpr int row_team_size = 2;
  static constexpr index_t tile = 16;
  static constexpr index_t lane_cols = 64;
  static constexpr int lane_team_size = 2;
  static constexpr int min_team_size = 1;
  static constexpr int team_multiple = 1;
  template <class T>
  static constexpr int max_team_size = 2;
  template <class T>
  static constexpr int team_regs = 64;
  static constexpr index_t block_q = 2;
  static constexpr index_t block_k = 8;
  /// Teams of 2 threads, 4 register blocks each; Dv up to 16 and 32 (larger: the per-row schedule).
  template <class T, int DV, bool Narrow>
  using team_shape = std::conditional_t<Narrow, TeamAttentionShape<T, 4, 8, 1, 4, DV, 4>,
                                        TeamAttentionShape<T, 8, 8, 2, 4, DV, 4>>;
  static constexpr int team_dv_small = 16, team_dv_large = 32;
  /// 16-bit and fp32 storage: one warp a team, its 32 lanes 16 to each of the 2 threads; as
  /// DeviceTraits, fp32's tiles are not prefetched at the larger output width.
  template <class S, int DV, bool Narrow>
  using warp_shape =
      std::conditional_t<(is_half_type<S> || std::is_same<S, float>::value) && !Narrow,
                         WarpAttentionShape<S, 1, 16, DV, 16, !std::is_same<S, float>::value || DV == 16>, void>;
  /// attention_backward: blocks of 4 rows against 8 keys, teams of 2 threads, 4 register blocks each.
  template <class T, int DV>
  using backward_shape = TeamAttentionShape<T, 4, 8, 2, 2, DV, 4>;
  /// Merges: a column per team, its two threads taking the parts in turn, chunks of 4 parts; two
  /// parts or fewer by one thread.
  static constexpr int merge_team_size = 2;
  static constexpr index_t merge_columns = 1;
  static constexpr index_t merge_min_columns = 1;
  static constexpr index_t merge_chunk = 4;
  static constexpr index_t merge_serial_parts = 2;
};

template <>
struct ScheduleTraits<Kokkos::OpenMP> : HostTeamDeviceTraits {};

}  // namespace kflash::impl

#define TEST_EXECSPACE Kokkos::OpenMP
#define TEST_CATEGORY openmp_device_schedules
// This lane tests the device schedules' structure (barriers, scratch, merges), which size adds
// nothing to past a few teams per row: the cases that are long for the sake of accuracy or of the
// host kernels' streaming run shorter here, or not at all (the Serial, OpenMP and Cuda lanes run them).
#define KFLASH_TEST_DEVICE_SCHEDULES_ON_HOST 1
