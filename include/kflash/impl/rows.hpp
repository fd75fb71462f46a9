// Row access to rank-1 and rank-2 Views, and the per-execution-space schedule traits.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstdint>

namespace kflash::impl {

using index_t = std::int64_t;

/// The row operations: softmax, log_softmax and logsumexp.
enum class RowOp { softmax, log_softmax, logsumexp };

/// A rank-1 View seen as one row, a rank-2 View as rows over its last extent (any layout).
template <class View, int Rank = view_rank<View>>
struct Rows;

template <class View>
struct Rows<View, 1> {
  View v;
  KOKKOS_INLINE_FUNCTION decltype(auto) operator()(index_t, index_t c) const { return v(c); }
  index_t rows() const { return 1; }  // an empty View is one empty row: logsumexp -inf
  index_t cols() const { return static_cast<index_t>(v.extent(0)); }
  /// Whether row r's elements are contiguous from row(r).
  bool unit_stride() const { return v.extent(0) <= 1 || v.stride(0) == 1; }
  KOKKOS_INLINE_FUNCTION auto row(index_t) const { return v.data(); }
  index_t row_stride() const { return 0; }
};

template <class View>
struct Rows<View, 2> {
  View v;
  KOKKOS_INLINE_FUNCTION decltype(auto) operator()(index_t r, index_t c) const { return v(r, c); }
  index_t rows() const { return static_cast<index_t>(v.extent(0)); }
  index_t cols() const { return static_cast<index_t>(v.extent(1)); }
  bool unit_stride() const { return v.extent(1) <= 1 || v.stride(1) == 1; }
  KOKKOS_INLINE_FUNCTION auto row(index_t r) const { return v.data() + r * index_t(v.stride(0)); }
  index_t row_stride() const { return index_t(v.stride(0)); }
};

/// Schedule parameters of the row kernels for one execution space. Host spaces run a team of one
/// thread per row (or row chunk); device spaces a team of vector lanes per row.
template <class ExecSpace>
struct RowTraits {
  static constexpr bool is_host =
      Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;
  /// Vector length of a team (1 on host).
  static constexpr int vector_length = is_host ? 1 : 32;
  /// Threads (of vector_length lanes each) per team on devices.
  static constexpr int device_team_size = 8;
  /// A row is split into chunks for several teams only when chunks can be at least this long.
  static constexpr index_t min_chunk = is_host ? (index_t(1) << 15) : (index_t(1) << 13);
  /// Elements per tile: a tile's maximum is found first, then its exponentials are summed.
  static constexpr index_t tile = is_host ? 512 : 4 * vector_length;
  /// Work items (teams) wanted per unit of concurrency before rows are split.
  static constexpr index_t items_per_thread = 4;
  /// Host work items of whole rows hold several short rows, about this many elements.
  static constexpr index_t item_elements = index_t(1) << 14;
  /// ... and at least this many rows, where there are enough for every thread: the host kernels
  /// run the write pass of one long row beside the state pass of the next.
  static constexpr index_t item_rows = 8;
  /// Devices (team_rows.hpp): rows of up to lane_cols elements over a thread's vector lanes,
  /// lane_team_size rows a team; longer rows a team each, of at least min_team_size threads (a
  /// multiple of team_multiple, at most max_team_size) holding team_regs<T> elements each in
  /// registers; rows longer than that are split across teams.
  static constexpr index_t lane_cols = 512;
  static constexpr int lane_team_size = 8;
  static constexpr int min_team_size = 64;
  static constexpr int team_multiple = 32;
  static constexpr int max_team_size = 1024;
  template <class T>
  static constexpr int team_regs = sizeof(T) == 4 ? 32 : 16;
};

/// The three phases a row kernel runs in:
///  whole:   reduce a whole row to its state, then write the row's outputs;
///  partial: reduce one chunk of a row to a state in the workspace;
///  finish:  merge a row's chunk states, then write one chunk's outputs.
enum class RowPhase { whole, partial, finish };

/// How a set of rows is cut into work items: each row into `chunks` chunks of `chunk_len`.
struct RowPlan {
  index_t rows = 0;
  index_t cols = 0;
  index_t chunks = 1;
  index_t chunk_len = 0;
  index_t rows_per_item = 1;  // whole rows per work item (host, unit-stride rows)
};

template <class T, class ExecSpace>
RowPlan plan_rows(const ExecSpace& exec, index_t rows, index_t cols) {
  using traits = RowTraits<ExecSpace>;
  RowPlan p;
  p.rows = rows;
  p.cols = cols;
  p.chunk_len = cols;
  // Devices keep whole rows that a team can hold in registers; longer rows are split into chunks
  // that a team holds.
  const index_t team_cols = index_t(traits::template team_regs<T>) * traits::max_team_size;
  if (!traits::is_host && cols <= team_cols) return p;
  const index_t teams_available =
      traits::is_host ? index_t(exec.concurrency())
                      : index_t(exec.concurrency()) / (traits::vector_length * traits::device_team_size);
  const index_t wanted = traits::items_per_thread * (teams_available > 0 ? teams_available : 1);
  if (rows >= wanted && traits::is_host) {
    index_t by_size = (traits::item_elements + cols - 1) / (cols > 0 ? cols : 1);
    if (by_size < traits::item_rows) by_size = traits::item_rows;
    const index_t by_count = rows / wanted;
    p.rows_per_item = by_size < by_count ? by_size : by_count;
  }
  if (rows == 0 || rows >= wanted || cols < 2 * traits::min_chunk) return p;
  index_t chunks = (wanted + rows - 1) / rows;
  const index_t max_chunks = cols / traits::min_chunk;
  if (chunks > max_chunks) chunks = max_chunks;
  if (!traits::is_host && chunks < (cols + team_cols - 1) / team_cols) chunks = (cols + team_cols - 1) / team_cols;
  p.chunk_len = (cols + chunks - 1) / chunks;
  p.chunks = (cols + p.chunk_len - 1) / p.chunk_len;
  return p;
}

template <class ExecSpace>
Kokkos::TeamPolicy<ExecSpace> row_team_policy(const ExecSpace& exec, index_t league) {
  using traits = RowTraits<ExecSpace>;
  const int team_size = traits::is_host ? 1 : traits::device_team_size;
  return Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(league), team_size,
                                       traits::vector_length);
}

}  // namespace kflash::impl
