// Where attention's sequences sit, as the kernels see them: every kernel reads q(b, h, i, d),
// k(b, hk, j, d), v(b, hk, j, d) and writes o(b, h, i, d), lse(b, h, i), with i and j indices within
// batch b's sequence. Dense calls pass their Views; varlen calls pass packed Views through
// PackedRows/PackedLse (rows of sequence b start at cu_seqlens[b]); paged calls pass caches through
// PagedKeys (key j of sequence b is slot j % page_size of page block_table(b, j / page_size)).
// Sequences gives each batch's lengths.
#pragma once

#include <kflash/impl/compat.hpp>
#include <kflash/impl/math.hpp>
#include <kflash/impl/schedule/rows.hpp>

#include <cstddef>
#include <cstdint>

namespace kflash::impl {

/// Each batch's query and key lengths: dense (Nq, Nk); varlen from the offsets cu_q, cu_k (B + 1);
/// paged from the key lengths seqlens_k (B). Nq and Nk are the maxima over batches in every case.
template <class Mem>
struct Sequences {
  using Index = Kokkos::View<const index_t*, Mem>;
  Index cu_q, cu_k, seqlens_k;
  index_t Nq = 0, Nk = 0;
  KOKKOS_INLINE_FUNCTION bool ragged() const { return cu_q.data() != nullptr || seqlens_k.data() != nullptr; }
  KOKKOS_INLINE_FUNCTION index_t nq(index_t b) const { return cu_q.data() ? cu_q(b + 1) - cu_q(b) : Nq; }
  KOKKOS_INLINE_FUNCTION index_t nk(index_t b) const {
    return cu_k.data() ? cu_k(b + 1) - cu_k(b) : seqlens_k.data() ? seqlens_k(b) : Nk;
  }
};

/// The value and memory types a kernel asks of the Views it reads, for an adapter over a View.
template <class View>
struct ViewAdapter {
  using value_type = typename View::value_type;
  using non_const_value_type = typename View::non_const_value_type;
  using memory_space = typename View::memory_space;
};

/// A packed (total, H, D) View read as (b, h, i, d): row i of sequence b is row start(b) + i.
template <class View, class Mem>
struct PackedRows : ViewAdapter<View> {
  using typename ViewAdapter<View>::value_type;
  View view;
  Kokkos::View<const index_t*, Mem> start;
  index_t B = 0, N = 0;  // batches, the longest sequence
  KOKKOS_INLINE_FUNCTION value_type& operator()(index_t b, index_t h, index_t i, index_t d) const {
    return view(start(b) + i, h, d);
  }
  KOKKOS_INLINE_FUNCTION std::size_t extent(int r) const {
    return r == 0 ? std::size_t(B) : r == 1 ? view.extent(1) : r == 2 ? std::size_t(N) : view.extent(2);
  }
  /// Strides of the (b, h, i, d) view where one exists (h, i and d; b has none).
  KOKKOS_INLINE_FUNCTION std::size_t stride(int r) const {
    return r == 1 ? view.stride(1) : r == 2 ? view.stride(0) : r == 3 ? view.stride(2) : 0;
  }
};

/// A packed lse (H, total) View read as (b, h, i).
template <class View, class Mem>
struct PackedLse : ViewAdapter<View> {
  using typename ViewAdapter<View>::value_type;
  View view;
  Kokkos::View<const index_t*, Mem> start;
  KOKKOS_INLINE_FUNCTION value_type& operator()(index_t b, index_t h, index_t i) const {
    return view(h, start(b) + i);
  }
};

/// A paged cache (num_pages, page_size, Hk, D) read as (b, hk, j, d) through block_table (B, pages).
template <class View, class Mem>
struct PagedKeys : ViewAdapter<View> {
  using typename ViewAdapter<View>::value_type;
  View cache;
  Kokkos::View<const index_t**, Kokkos::LayoutRight, Mem> block_table;
  index_t page_size = 1;
  KOKKOS_INLINE_FUNCTION value_type& operator()(index_t b, index_t hk, index_t j, index_t d) const {
    return cache(block_table(b, j / page_size), j % page_size, hk, d);
  }
  /// Strides of the (b, hk, j, d) view within a page (j across slots, d).
  KOKKOS_INLINE_FUNCTION std::size_t stride(int r) const {
    return r == 1 ? cache.stride(2) : r == 2 ? cache.stride(1) : r == 3 ? cache.stride(3) : 0;
  }
};

/// The end of the run of keys from key j of batch b that sit stride(2) apart in memory: a page's
/// end for paged caches; no end otherwise.
template <class KV>
KOKKOS_INLINE_FUNCTION index_t contiguous_keys_end(const KV&, index_t, index_t) {
  return index_t(1) << 62;
}
template <class View, class Mem>
KOKKOS_INLINE_FUNCTION index_t contiguous_keys_end(const PagedKeys<View, Mem>& k, index_t, index_t j) {
  return (j / k.page_size + 1) * k.page_size;
}

/// rows_in_chunks (rows.hpp) for the keys or values a kernel reads through an adapter: those of the
/// View under it.
template <class View, class Mem>
bool rows_in_chunks(const PackedRows<View, Mem>& rows, index_t n) {
  return rows_in_chunks(rows.view, n);
}
template <class View, class Mem>
bool rows_in_chunks(const PagedKeys<View, Mem>& keys, index_t n) {
  return rows_in_chunks(keys.cache, n);
}

}  // namespace kflash::impl
