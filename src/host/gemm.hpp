// The host kernels' micro-GEMMs on register blocks of vectors: c (+)= a b with b's rows in vectors
// (broadcast products) and c = a b^T with both read along K (dot products). Both can ask for the
// rows of b's next tile while they run (next, next_rows): a stream from memory then overlaps the
// products instead of waiting between them.
#pragma once

#include "vector.hpp"

#include <type_traits>

namespace kflash::impl::host::internal {

/// Asks for the cache line holding p into the L2 cache ahead of use (a hint: nothing happens where
/// the compiler has no builtin for it). L2, not L1: the next tile would evict the current one.
inline void prefetch_l2(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 1);
#else
  (void)p;
#endif
}

/// c (+)= a b for an R x (NV vectors of VB bytes) block: a (R x K, lda; with AT, a is stored
/// transposed: element (r, k) at a[k * lda + r]), b (K x C, ldb), c (R x C, ldc), C = NV * VB /
/// sizeof(T). The accumulators are R x NV vectors; each step of k loads NV vectors of b and
/// broadcasts one element of a per row, and asks for the same columns of row k of next where
/// k < next_rows. b holds B (Operand: T, or 16-bit values widened to float as they load).
template <class T, int R, int NV, int VB, bool Accumulate, bool AT = false, class B = T>
inline void gemm_block(const T* a, index_t lda, const B* b, index_t ldb, T* c, index_t ldc, index_t K, const B* next,
                       index_t next_rows) {
  using V = Vec<T, VB>;
  constexpr int W = VB / int(sizeof(T));
  typename V::type acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) {
      if (Accumulate) {
        V::load(acc[r][j], c + r * ldc + j * W);
      } else {
        V::zero(acc[r][j]);
      }
    }
  for (index_t k = 0; k < K; ++k) {
    typename V::type bk[NV];
    for (int j = 0; j < NV; ++j) Operand<T, VB, B>::load(bk[j], b + k * ldb + j * W);
    if (k < next_rows)
      for (int j = 0; j < NV; ++j) prefetch_l2(next + k * ldb + j * W);
    for (int r = 0; r < R; ++r) {
      const T ar = AT ? a[k * lda + r] : a[r * lda + k];
      for (int j = 0; j < NV; ++j) V::fma(acc[r][j], ar, bk[j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) V::store(c + r * ldc + j * W, acc[r][j]);
}

/// c (+)= a b for M x N (N a multiple of NV0 vectors' columns) by blocks of R rows, their columns
/// in strips of NV vectors while they fit, then of NV0. The rows left (fewer than R) go by blocks
/// of R / 2 rows with twice the vectors (at most Cap), and so on down to single rows: a block of
/// few rows (decode's one or few query rows a K/V head) then keeps as many accumulators busy and
/// reads each row of b once, in whole lines, instead of once per strip. The first block of rows
/// asks for rows [0, next_rows) of next (row stride ldb, N columns). With AT, a is stored
/// transposed (gemm_block); b holds B.
template <class T, int R, int NV, int VB, bool Accumulate, int NV0 = NV, int Cap = R * NV / 2, bool AT = false,
          class B = T>
inline void gemm(const T* a, index_t lda, const B* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                 index_t K, const B* next = nullptr, index_t next_rows = 0) {
  constexpr index_t C = NV * VB / index_t(sizeof(T)), C0 = NV0 * VB / index_t(sizeof(T));
  if (next == nullptr) next = b, next_rows = 0;
  const auto rows_from = [&](index_t i) { return a + (AT ? i : i * lda); };
  index_t i = 0;
  for (; i + R <= M; i += R, next_rows = 0) {
    index_t j = 0;
    for (; j + C <= N; j += C)
      gemm_block<T, R, NV, VB, Accumulate, AT, B>(rows_from(i), lda, b + j, ldb, c + i * ldc + j, ldc, K, next + j,
                                                  next_rows);
    for (; j < N; j += C0)
      gemm_block<T, R, NV0, VB, Accumulate, AT, B>(rows_from(i), lda, b + j, ldb, c + i * ldc + j, ldc, K, next + j,
                                                   next_rows);
  }
  if constexpr (R > 1) {
    constexpr int NV2 = 2 * NV <= Cap ? 2 * NV : NV;
    if (i < M)
      gemm<T, R / 2, NV2, VB, Accumulate, NV0, Cap, AT, B>(rows_from(i), lda, b, ldb, c + i * ldc, ldc, M - i, N, K,
                                                           next, next_rows);
  }
}

#ifdef KFLASH_IMPL_SHUFFLES
/// Stores the sums of one LaneTrees tree over accumulators [f, f + W) of a block of J columns
/// (row-major) into c (row stride ldc): row by row, each row's run of min(J, W) sums in one store.
template <class T, int VB, int J, std::size_t... Run>
inline void store_sums(T* c, index_t ldc, int f, const typename Vec<T, VB>::type& sums, std::index_sequence<Run...>) {
  constexpr int W = VB / int(sizeof(T)), L = J < W ? J : W;
  (store_lanes<T, VB, int(Run) * L>(c + (f + int(Run) * L) / J * ldc + (f + int(Run) * L) % J, sums,
                                    std::make_index_sequence<L>{}),
   ...);
}
#endif

/// c = a b^T for an R x J block: a (R x K, lda), b (J x K, ldb), both read along K in vectors of
/// VB bytes (R x J accumulators, summed across lanes at the end: by LaneTrees where the accumulators
/// make whole trees, else one by one); asks for rows [0, next_rows) of next (J rows of K, ldb). b
/// holds B (Operand).
template <class T, int VB, int R, int J, class B = T>
inline void gemm_nt_block(const T* a, index_t lda, const B* b, index_t ldb, T* c, index_t ldc, index_t K,
                          const B* next, index_t next_rows) {
  using V = Vec<T, VB>;
  constexpr index_t W = VB / index_t(sizeof(T));
  typename V::type acc[R][J], av[R], bv[J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) V::fill(acc[r][j], T(0));
  index_t d = 0;
  for (; d + W <= K; d += W) {
    for (int r = 0; r < R; ++r) V::load(av[r], a + r * lda + d);
    for (int j = 0; j < J; ++j) Operand<T, VB, B>::load(bv[j], b + j * ldb + d);
    for (int j = 0; j < J; ++j)
      if (j < next_rows) prefetch_l2(next + j * ldb + d);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) V::fma(acc[r][j], av[r], bv[j]);
  }
  // The elements past the last whole vector.
  const auto tail = [&](int r, int j) {
    T sum = T(0);
    for (index_t e = d; e < K; ++e) sum += a[r * lda + e] * Operand<T, VB, B>::element(b[j * ldb + e]);
    return sum;
  };
#ifdef KFLASH_IMPL_SHUFFLES
  // Trees of S sums: the accumulators in row-major order, S / J rows a tree or J / S trees a row.
  using Sums = LaneTrees<T, VB, AddOp>;
  constexpr int S = Sums::W;
  if constexpr ((R * J) % S == 0 && (S % J == 0 || J % S == 0)) {
    typename V::type* flat = &acc[0][0];
    for (int t = 0; t < R * J / S; ++t) {
      typename V::type sums;
      Sums::apply(flat + t * S, sums);
      if constexpr (J > 1) {
        if (d == K) {  // no tail: each row's run of sums in one store
          store_sums<T, VB, J>(c, ldc, t * S, sums, std::make_index_sequence<(S < J ? 1 : S / J)>{});
          continue;
        }
      }
      const T* lanes = reinterpret_cast<const T*>(&sums);
      for (int e = 0; e < S; ++e) {
        const int r = (t * S + e) / J, j = (t * S + e) % J;
        c[r * ldc + j] = lanes[e] + tail(r, j);
      }
    }
    return;
  }
#endif
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) c[r * ldc + j] = reduce_lanes<T, VB, AddOp>(acc[r][j]) + tail(r, j);
}

/// Calls block(rows, cols, i, j, ahead) for the blocks of an M x N product c = a b^T taken by R x J
/// blocks, the edges by thinner ones (rows and cols: std::integral_constant sizes; block (i, j) its
/// first row and column): each block of J rows of b for all of a's rows before the next (a is
/// small and stays in L1; b is the stream). ahead: how many of the block's rows of b's successor
/// to ask for, so that the first block of rows asks for rows [0, next_rows) and the asks spread
/// over the whole product.
template <int R, int J, class Block>
inline void nt_blocks(index_t M, index_t N, index_t next_rows, Block&& block) {
  const auto ahead = [&](index_t i, index_t j) { return i == 0 && next_rows > j ? next_rows - j : index_t(0); };
  const auto rows = [&](auto cols, index_t j) {
    index_t i = 0;
    for (; i + R <= M; i += R) block(std::integral_constant<int, R>{}, cols, i, j, ahead(i, j));
    for (; i < M; ++i) block(std::integral_constant<int, 1>{}, cols, i, j, ahead(i, j));
  };
  index_t j = 0;
  for (; j + J <= N; j += J) rows(std::integral_constant<int, J>{}, j);
  for (; j < N; ++j) rows(std::integral_constant<int, 1>{}, j);
}

/// c = a b^T for M x N (a: M x K, b: N x K, any M, N) by R x J blocks (nt_blocks), asking for rows
/// [0, next_rows) of next (N rows of K, ldb). b holds B (Operand).
template <class T, int VB, int R, int J, class B = T>
inline void gemm_nt(const T* a, index_t lda, const B* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                    index_t K, const B* next = nullptr, index_t next_rows = 0) {
  if (next == nullptr) next = b, next_rows = 0;
  nt_blocks<R, J>(M, N, next_rows, [&](auto rows, auto cols, index_t i, index_t j, index_t ahead) {
    gemm_nt_block<T, VB, decltype(rows)::value, decltype(cols)::value, B>(
        a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K, next + j * ldb, ahead);
  });
}

}  // namespace kflash::impl::host::internal
