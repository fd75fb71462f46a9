// Row access to rank-1 and rank-2 Views, and the plan of a row operation: how its rows are cut
// into work items.
#pragma once

#include <kflash/impl/traits.hpp>

#include <cstddef>
#include <cstdint>

namespace kflash::impl {

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

/// Whether every row of n elements along view's last extent starts on a chunk_bytes boundary and is
/// contiguous, n elements being whole chunks: its rows can then be read chunk by chunk.
template <class View>
bool rows_in_chunks(const View& view, index_t n) {
  using T = typename View::value_type;
  constexpr int R = view_rank<View>;
  if (chunk_bytes % sizeof(T) != 0 || std::size_t(n) * sizeof(T) % chunk_bytes != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(view.data()) % chunk_bytes != 0) return false;
  if (view.extent(R - 1) > 1 && view.stride(R - 1) != 1) return false;
  for (int r = 0; r + 1 < R; ++r)
    if (view.extent(r) > 1 && view.stride(r) * sizeof(T) % chunk_bytes != 0) return false;
  return true;
}

/// How a set of rows is cut into work items: each row into `chunks` chunks of `chunk_len`.
struct RowPlan {
  index_t rows = 0;
  index_t cols = 0;
  index_t chunks = 1;
  index_t chunk_len = 0;
  index_t rows_per_item = 1;  // whole rows per work item (host, unit-stride rows)
};

/// The plan of rows x cols under Traits. Device spaces keep whole rows that a team holds in
/// registers; longer rows, and rows too few to give every team work, are split into chunks.
/// Host spaces group several short rows per work item.
template <class T, class Traits, class ExecSpace>
RowPlan plan_rows(const ExecSpace& exec, index_t rows, index_t cols) {
  RowPlan p;
  p.rows = rows;
  p.cols = cols;
  p.chunk_len = cols;
  index_t team_cols = 0;  // the longest chunk a device team holds
  if constexpr (!Traits::host_kernels) {
    team_cols = index_t(Traits::template team_regs<T>) * Traits::template max_team_size<T>;
    if (cols <= team_cols) return p;
  }
  const index_t teams_available = index_t(exec.concurrency()) / (Traits::vector_length * Traits::row_team_size);
  const index_t wanted = Traits::items_per_thread * (teams_available > 0 ? teams_available : 1);
  if constexpr (Traits::host_kernels) {
    if (rows >= wanted) {
      index_t by_size = (Traits::item_elements + cols - 1) / (cols > 0 ? cols : 1);
      if (by_size < Traits::item_rows) by_size = Traits::item_rows;
      const index_t by_count = rows / wanted;
      p.rows_per_item = by_size < by_count ? by_size : by_count;
      // Whole groups of short_group rows where there is more than one: the host kernels take rows of
      // up to a vector's values that many at a time, and a partial group as one row after another.
      if (p.rows_per_item > Traits::short_group) p.rows_per_item -= p.rows_per_item % Traits::short_group;
    }
  }
  if (rows == 0 || rows >= wanted || cols < 2 * Traits::min_chunk) return p;
  index_t chunks = (wanted + rows - 1) / rows;
  const index_t max_chunks = cols / Traits::min_chunk;
  if (chunks > max_chunks) chunks = max_chunks;
  if (team_cols > 0 && chunks < (cols + team_cols - 1) / team_cols) chunks = (cols + team_cols - 1) / team_cols;
  p.chunk_len = (cols + chunks - 1) / chunks;
  if constexpr (!Traits::host_kernels && chunk_bytes % sizeof(T) == 0) {
    // Whole 16-byte chunks per item: the device row schedules read aligned rows by them.
    constexpr index_t W = chunk_bytes / sizeof(T);
    p.chunk_len = (p.chunk_len + W - 1) / W * W;
  }
  p.chunks = (cols + p.chunk_len - 1) / p.chunk_len;
  return p;
}

/// logsumexp's output seen as rows: out(r) for rank 1, out() for rank 0.
template <class View, int Rank = view_rank<View>>
struct LseOut {
  View v;
  KOKKOS_INLINE_FUNCTION decltype(auto) operator()(index_t r, index_t) const { return v(r); }
  KOKKOS_INLINE_FUNCTION auto row(index_t r) const { return v.data() + r * index_t(v.stride(0)); }
  index_t row_stride() const { return index_t(v.stride(0)); }
};
template <class View>
struct LseOut<View, 0> {
  View v;
  KOKKOS_INLINE_FUNCTION decltype(auto) operator()(index_t, index_t) const { return v(); }
  KOKKOS_INLINE_FUNCTION auto row(index_t) const { return v.data(); }
  index_t row_stride() const { return 0; }
};

}  // namespace kflash::impl
