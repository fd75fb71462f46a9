// The host kernels' micro-GEMMs on register blocks of vectors: c (+)= a b with b's rows in vectors
// (broadcast products) and c = a b^T with both read along K (dot products).
#pragma once

#include "vector.hpp"

namespace kflash::impl::host::internal {

/// c (+)= a b for an R x (NV vectors of VB bytes) block: a (R x K, lda), b (K x C, ldb), c (R x C,
/// ldc), C = NV * VB / sizeof(T). The accumulators are R x NV vectors; each step of k loads NV
/// vectors of b and broadcasts one element of a per row.
template <class T, int R, int NV, int VB, bool Accumulate>
inline void gemm_block(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t K) {
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
    for (int r = 0; r < R; ++r) {
      const T ar = a[r * lda + k];
      for (int j = 0; j < NV; ++j) V::fma(acc[r][j], ar, bk[j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) V::store(c + r * ldc + j * W, acc[r][j]);
}

/// c (+)= a b for M x N (N a multiple of the block's C columns) by blocks of R rows; the last M % R
/// rows one by one.
template <class T, int R, int NV, int VB, bool Accumulate>
inline void gemm(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                 index_t K) {
  constexpr index_t C = NV * VB / index_t(sizeof(T));
  index_t i = 0;
  for (; i + R <= M; i += R)
    for (index_t j = 0; j < N; j += C)
      gemm_block<T, R, NV, VB, Accumulate>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, K);
  for (; i < M; ++i)
    for (index_t j = 0; j < N; j += C)
      gemm_block<T, 1, NV, VB, Accumulate>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, K);
}

/// c = a b^T for an R x J block: a (R x K, lda), b (J x K, ldb), both read along K in vectors of
/// VB bytes (R x J accumulators, summed across lanes at the end).
template <class T, int VB, int R, int J>
inline void gemm_nt_block(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t K) {
  using V = Vec<T, VB>;
  constexpr index_t W = VB / index_t(sizeof(T));
  typename V::type acc[R][J], av[R], bv[J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) V::fill(acc[r][j], T(0));
  index_t d = 0;
  for (; d + W <= K; d += W) {
    for (int r = 0; r < R; ++r) V::load(av[r], a + r * lda + d);
    for (int j = 0; j < J; ++j) V::load(bv[j], b + j * ldb + d);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) V::fma(acc[r][j], av[r], bv[j]);
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) {
      T sum = reduce_lanes<T, VB, AddOp>(acc[r][j]);
      for (index_t e = d; e < K; ++e) sum += a[r * lda + e] * b[j * ldb + e];
      c[r * ldc + j] = sum;
    }
}

/// c = a b^T for M x N (a: M x K, b: N x K, any M, N) by R x J blocks, the edges by thinner ones.
template <class T, int VB, int R, int J>
inline void gemm_nt(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                    index_t K) {
  index_t i = 0;
  for (; i + R <= M; i += R) {
    index_t j = 0;
    for (; j + J <= N; j += J) gemm_nt_block<T, VB, R, J>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
    for (; j < N; ++j) gemm_nt_block<T, VB, R, 1>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
  }
  for (; i < M; ++i) {
    index_t j = 0;
    for (; j + J <= N; j += J) gemm_nt_block<T, VB, 1, J>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
    for (; j < N; ++j) gemm_nt_block<T, VB, 1, 1>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
  }
}

}  // namespace kflash::impl::host::internal
