// The host kernels' micro-GEMMs on register blocks of vectors: c (+)= a b with b's rows in vectors
// (broadcast products) and c = a b^T with both read along K (dot products). Both can ask for the
// rows of b's next tile while they run (next, next_rows): a stream from memory then overlaps the
// products instead of waiting between them.
#pragma once

#include "vector.hpp"

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

/// c (+)= a b for an R x (NV vectors of VB bytes) block: a (R x K, lda), b (K x C, ldb), c (R x C,
/// ldc), C = NV * VB / sizeof(T). The accumulators are R x NV vectors; each step of k loads NV
/// vectors of b and broadcasts one element of a per row, and asks for the same columns of row k of
/// next where k < next_rows.
template <class T, int R, int NV, int VB, bool Accumulate>
inline void gemm_block(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t K,
                       const T* next, index_t next_rows) {
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
    for (int j = 0; j < NV; ++j) V::load(bk[j], b + k * ldb + j * W);
    if (k < next_rows)
      for (int j = 0; j < NV; ++j) prefetch_l2(next + k * ldb + j * W);
    for (int r = 0; r < R; ++r) {
      const T ar = a[r * lda + k];
      for (int j = 0; j < NV; ++j) V::fma(acc[r][j], ar, bk[j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) V::store(c + r * ldc + j * W, acc[r][j]);
}

/// c (+)= a b for M x N (N a multiple of the block's C columns) by blocks of R rows; the last M % R
/// rows one by one. The first block of rows asks for rows [0, next_rows) of next (row stride ldb,
/// N columns).
template <class T, int R, int NV, int VB, bool Accumulate>
inline void gemm(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                 index_t K, const T* next = nullptr, index_t next_rows = 0) {
  constexpr index_t C = NV * VB / index_t(sizeof(T));
  if (next == nullptr) next = b, next_rows = 0;
  index_t i = 0;
  for (; i + R <= M; i += R, next_rows = 0)
    for (index_t j = 0; j < N; j += C)
      gemm_block<T, R, NV, VB, Accumulate>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, K, next + j,
                                           next_rows);
  for (; i < M; ++i, next_rows = 0)
    for (index_t j = 0; j < N; j += C)
      gemm_block<T, 1, NV, VB, Accumulate>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, K, next + j,
                                           next_rows);
}

/// c = a b^T for an R x J block: a (R x K, lda), b (J x K, ldb), both read along K in vectors of
/// VB bytes (R x J accumulators, summed across lanes at the end: by LaneTrees where the accumulators
/// make whole trees, else one by one); asks for rows [0, next_rows) of next (J rows of K, ldb).
template <class T, int VB, int R, int J>
inline void gemm_nt_block(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t K,
                          const T* next, index_t next_rows) {
  using V = Vec<T, VB>;
  constexpr index_t W = VB / index_t(sizeof(T));
  typename V::type acc[R][J], av[R], bv[J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) V::fill(acc[r][j], T(0));
  index_t d = 0;
  for (; d + W <= K; d += W) {
    for (int r = 0; r < R; ++r) V::load(av[r], a + r * lda + d);
    for (int j = 0; j < J; ++j) V::load(bv[j], b + j * ldb + d);
    for (int j = 0; j < J; ++j)
      if (j < next_rows) prefetch_l2(next + j * ldb + d);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) V::fma(acc[r][j], av[r], bv[j]);
  }
  // The elements past the last whole vector.
  const auto tail = [&](int r, int j) {
    T sum = T(0);
    for (index_t e = d; e < K; ++e) sum += a[r * lda + e] * b[j * ldb + e];
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

/// c = a b^T for M x N (a: M x K, b: N x K, any M, N) by R x J blocks, the edges by thinner ones.
/// The first block of rows asks for rows [0, next_rows) of next (N rows of K, ldb).
template <class T, int VB, int R, int J>
inline void gemm_nt(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                    index_t K, const T* next = nullptr, index_t next_rows = 0) {
  if (next == nullptr) next = b, next_rows = 0;
  const auto ahead = [&](index_t i, index_t j) { return i == 0 && next_rows > j ? next_rows - j : index_t(0); };
  index_t i = 0;
  for (; i + R <= M; i += R) {
    index_t j = 0;
    for (; j + J <= N; j += J)
      gemm_nt_block<T, VB, R, J>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K, next + j * ldb,
                                 ahead(i, j));
    for (; j < N; ++j)
      gemm_nt_block<T, VB, R, 1>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K, next + j * ldb,
                                 ahead(i, j));
  }
  for (; i < M; ++i) {
    index_t j = 0;
    for (; j + J <= N; j += J)
      gemm_nt_block<T, VB, 1, J>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K, next + j * ldb,
                                 ahead(i, j));
    for (; j < N; ++j)
      gemm_nt_block<T, VB, 1, 1>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K, next + j * ldb,
                                 ahead(i, j));
  }
}

}  // namespace kflash::impl::host::internal
