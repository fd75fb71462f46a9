// The host kernels' products on bf16 rows read in place, with AVX512-BF16's dot products on pairs
// formed in registers (pair_gemm.hpp's products take them staged in pairs).
#pragma once

#include "pair_gemm.hpp"

#include <cstdint>
#include <type_traits>

#include <kflash/impl/host/host_kernels.hpp>

namespace kflash::impl::host::internal {

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
/// The products on bf16 rows read in place, each pair of values formed in registers (decode's K and
/// V rows for a few query rows, where laying the tile out in pairs would cost more than its
/// products):
///   rows_nt: c = scale (a b^T), a (M rows, lda) and b (N rows, ldb) of K values, read along K by
///     vectors of 16 pairs (the last through a mask), each product's lanes summed at the end;
///   rows_pairs: c += a b, a (M rows of K weights, lda; a zero after an odd K), b (K rows of N
///     values, ldb; N a multiple of 32): rows 2k and 2k + 1 of b interleaved in registers, which
///     leaves the pairs of 32 columns in the order of pair_columns.
using PairSums = Vec<float, 64>;

template <int R, int J, bool Whole>
KFLASH_IMPL_BF16_TARGET inline void rows_nt_step(const std::uint16_t* a, index_t lda, const std::uint16_t* b,
                                                 index_t ldb, __mmask32 m, PairSums::type (&acc)[R][J]) {
  __m512i av[R], bv[J];
  for (int r = 0; r < R; ++r)
    av[r] =
        Whole ? _mm512_loadu_si512(static_cast<const void*>(a + r * lda)) : _mm512_maskz_loadu_epi16(m, a + r * lda);
  for (int j = 0; j < J; ++j)
    bv[j] =
        Whole ? _mm512_loadu_si512(static_cast<const void*>(b + j * ldb)) : _mm512_maskz_loadu_epi16(m, b + j * ldb);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j)
      acc[r][j] = (PairSums::type)_mm512_dpbf16_ps((__m512)acc[r][j], (__m512bh)av[r], (__m512bh)bv[j]);
}

/// An R x J block of rows_nt, asking for rows [0, next_rows) of next (J rows, ldb).
template <int R, int J>
KFLASH_IMPL_BF16_TARGET inline void rows_nt_block(const std::uint16_t* a, index_t lda, const std::uint16_t* b,
                                                  index_t ldb, float* c, index_t ldc, index_t K, float scale,
                                                  const std::uint16_t* next, index_t next_rows) {
  PairSums::type acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) PairSums::zero(acc[r][j]);
  index_t d = 0;
  for (; d < K; d += 32) {
    for (int j = 0; j < J; ++j)
      if (j < next_rows) prefetch_l2(next + j * ldb + d);
    if (d + 32 <= K)
      rows_nt_step<R, J, true>(a + d, lda, b + d, ldb, 0, acc);
    else
      rows_nt_step<R, J, false>(a + d, lda, b + d, ldb, __mmask32((1u << (K - d)) - 1), acc);
  }
#ifdef KFLASH_IMPL_SHUFFLES
  using Sums = LaneTrees<float, 64, AddOp>;
  constexpr int S = Sums::W;
  if constexpr ((R * J) % S == 0 && S % J == 0) {
    for (int t = 0; t < R * J / S; ++t) {
      PairSums::type sums;
      Sums::apply(&acc[0][0] + t * S, sums);
      sums *= scale;
      store_sums<float, 64, J>(c, ldc, t * S, sums, std::make_index_sequence<S / J>{});
    }
    return;
  }
#endif
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) c[r * ldc + j] = reduce_lanes<float, 64, AddOp>(acc[r][j]) * scale;
}

template <int R, int J>
KFLASH_IMPL_BF16_TARGET inline void rows_nt(const std::uint16_t* a, index_t lda, const std::uint16_t* b, index_t ldb,
                                            float* c, index_t ldc, index_t M, index_t N, index_t K, float scale,
                                            const std::uint16_t* next, index_t next_rows) {
  if (next == nullptr) next = b, next_rows = 0;
  nt_blocks<R, J>(M, N, next_rows, [&](auto rows, auto cols, index_t i, index_t j, index_t ahead) {
    rows_nt_block<decltype(rows)::value, decltype(cols)::value>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j,
                                                                ldc, K, scale, next + j * ldb, ahead);
  });
}

/// rows_nt for at most lane_rows rows of a and K a multiple of 4 (decode's query rows of a GQA
/// group against K's rows in place), with no sum across a vector's lanes: lanes 2r and 2r + 1 of
/// a vector hold row r's pairs 2p and 2p + 1 (its 4 values from 4p, `chunk` p, laid out once per
/// call by chunk_lanes), each key's chunk p is broadcast to every lane pair, and each of 8 keys at
/// a time has an accumulator. A key's score of row r is the sum of its lanes 2r and 2r + 1: 8
/// keys' sums are laid out by rows with 16 shuffles and adds (rows_nt sums each product's 16 lanes
/// by a tree, about 3 vector operations a product).
struct LaneRowsNt {
  static constexpr index_t lane_rows = 8;
  static constexpr index_t max_chunks = 64;  // K up to 256
  static bool takes(index_t M, index_t K) { return M <= lane_rows && K % 4 == 0 && K / 4 <= max_chunks; }

  /// Out of line: inlined into the attention tile, its row pointers went to vector registers and
  /// the stack (GCC 12).
  __attribute__((noinline)) KFLASH_IMPL_BF16_TARGET static void apply(const std::uint16_t* a, index_t lda,
                                                                      const std::uint16_t* b, index_t ldb, float* c,
                                                                      index_t ldc, index_t M, index_t N, index_t K,
                                                                      float scale, const std::uint16_t* next,
                                                                      index_t next_rows) {
    const index_t chunks = K / 4;
    alignas(64) __m512i q[max_chunks];
    for (index_t p = 0; p < chunks; p += 8) chunk_lanes(a, lda, M, p, chunks - p < 8 ? chunks - p : 8, q + p);
    if (next == nullptr) next_rows = 0;
    index_t j = 0;
    for (; j + 8 <= N; j += 8) {
      const index_t ahead = next_rows > j ? (next_rows - j < 8 ? next_rows - j : 8) : 0;
      block(q, chunks, b + j * ldb, ldb, c + j, ldc, M, 8, scale, next + j * ldb, ahead);
    }
    if (j < N) {  // the last keys from a copy padded with zeros, so that the block reads whole rows
      alignas(64) std::uint16_t rest[8 * 4 * max_chunks] = {};
      for (index_t k = 0; k < N - j; ++k)
        for (index_t d = 0; d < K; ++d) rest[k * K + d] = b[(j + k) * ldb + d];
      block(q, chunks, rest, K, c + j, ldc, M, N - j, scale, nullptr, 0);
    }
  }

  /// q[c], c < 8: chunk p + c of a's rows in its lane pairs (rows from M on, and chunks from `count`
  /// on, zeros). A transpose of 8 x 8 chunks in registers: each row's chunks load as one vector
  /// (gathering each q[c] from the rows took several times longer per call).
  KFLASH_IMPL_BF16_TARGET static void chunk_lanes(const std::uint16_t* a, index_t lda, index_t M, index_t p,
                                                  index_t count, __m512i* q) {
    const __mmask8 valid = __mmask8((1u << count) - 1);
    __m512i row[8];
    for (index_t r = 0; r < 8; ++r)
      row[r] = r < M ? _mm512_maskz_loadu_epi64(valid, a + r * lda + 4 * p) : _mm512_setzero_si512();
    // 128-bit block i of even[h] (odd[h]): chunks 2i (2i + 1) of rows 2h and 2h + 1. (The
    // zero-masking forms with every lane set are the plain instructions; the plain intrinsics start
    // from an undefined vector that GCC 12 warns about.)
    constexpr __mmask8 all = 0xff;
    __m512i even[4], odd[4];
    for (int h = 0; h < 4; ++h) {
      even[h] = _mm512_maskz_unpacklo_epi64(all, row[2 * h], row[2 * h + 1]);
      odd[h] = _mm512_maskz_unpackhi_epi64(all, row[2 * h], row[2 * h + 1]);
    }
    // Blocks 0, 2 (0x88) or 1, 3 (0xDD) of two vectors, then the same of the results: four rows'
    // pairs of blocks, then all four pairs of rows of one chunk.
    for (int s = 0; s < 2; ++s) {
      const __m512i* v = s == 0 ? even : odd;
      const __m512i b0 = _mm512_maskz_shuffle_i64x2(all, v[0], v[1], 0x88);
      const __m512i b1 = _mm512_maskz_shuffle_i64x2(all, v[0], v[1], 0xDD);
      const __m512i b2 = _mm512_maskz_shuffle_i64x2(all, v[2], v[3], 0x88);
      const __m512i b3 = _mm512_maskz_shuffle_i64x2(all, v[2], v[3], 0xDD);
      q[s + 0] = _mm512_maskz_shuffle_i64x2(all, b0, b2, 0x88);
      q[s + 4] = _mm512_maskz_shuffle_i64x2(all, b0, b2, 0xDD);
      q[s + 2] = _mm512_maskz_shuffle_i64x2(all, b1, b3, 0x88);
      q[s + 6] = _mm512_maskz_shuffle_i64x2(all, b1, b3, 0xDD);
    }
  }

  /// 8 keys' scores (rows b + k ldb, the first `keys` stored), asking for rows [0, ahead) of next.
  KFLASH_IMPL_BF16_TARGET static void block(const __m512i* q, index_t chunks, const std::uint16_t* b, index_t ldb,
                                            float* c, index_t ldc, index_t M, index_t keys, float scale,
                                            const std::uint16_t* next, index_t ahead) {
    // Two accumulators a key (even and odd chunks): 16 chains of products rather than 8, so that
    // the products' latency does not bound their rate.
    __m512 acc[2][8];
    for (int k = 0; k < 8; ++k) acc[0][k] = acc[1][k] = _mm512_setzero_ps();
    for (index_t p = 0; p < chunks; p += 2) {
      if (p % 8 == 0)  // a 64-byte line of each row: the next tile's same rows
        for (int k = 0; k < 8; ++k)
          if (k < ahead) prefetch_l2(next + k * ldb + 4 * p);
      add_chunk(q[p], b + 4 * p, ldb, acc[0]);
      if (p + 1 < chunks) add_chunk(q[p + 1], b + 4 * p + 4, ldb, acc[1]);
    }
    for (int k = 0; k < 8; ++k) acc[0][k] = _mm512_add_ps(acc[0][k], acc[1][k]);
    store(acc[0], c, ldc, M, keys, scale);
  }

  /// sums[k] += the products of q's lanes with key k's chunk (at b + k ldb) broadcast to each lane pair.
  KFLASH_IMPL_BF16_TARGET static void add_chunk(const __m512i& q, const std::uint16_t* b, index_t ldb,
                                                __m512 (&sums)[8]) {
    for (int k = 0; k < 8; ++k) {
      long long chunk;
      __builtin_memcpy(&chunk, b + k * ldb, sizeof chunk);
      sums[k] = _mm512_dpbf16_ps(sums[k], (__m512bh)q, (__m512bh)_mm512_set1_epi64(chunk));
    }
  }

  /// c[r ldc + k] = scale (the sum of lanes 2r and 2r + 1 of acc[k]), r < M, k < keys.
  KFLASH_IMPL_BF16_TARGET static void store(const __m512 (&acc)[8], float* c, index_t ldc, index_t M, index_t keys,
                                            float scale) {
    // u[i], 128-bit block b: rows 2b and 2b + 1 of keys 2i, then of key 2i + 1.
    __m512 u[4];
    for (int i = 0; i < 4; ++i)
      u[i] = _mm512_add_ps(_mm512_shuffle_ps(acc[2 * i], acc[2 * i + 1], 0x88),
                           _mm512_shuffle_ps(acc[2 * i], acc[2 * i + 1], 0xDD));
    // Block b of even[h] (odd[h]): row 2b (2b + 1), keys 4h to 4h + 3.
    const __m512 even[2] = {_mm512_shuffle_ps(u[0], u[1], 0x88), _mm512_shuffle_ps(u[2], u[3], 0x88)};
    const __m512 odd[2] = {_mm512_shuffle_ps(u[0], u[1], 0xDD), _mm512_shuffle_ps(u[2], u[3], 0xDD)};
    // Rows (2b, 2b + 2) of even blocks b = 0, 2 (rows 0, 2 and 4, 6), the same of odd (1, 3 and 5, 7).
    const __m512i low = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i high = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    const __m512 s = _mm512_set1_ps(scale);
    const __m512 pairs[4] = {_mm512_mul_ps(_mm512_permutex2var_ps(even[0], low, even[1]), s),   // rows 0, 2
                             _mm512_mul_ps(_mm512_permutex2var_ps(odd[0], low, odd[1]), s),     // rows 1, 3
                             _mm512_mul_ps(_mm512_permutex2var_ps(even[0], high, even[1]), s),  // rows 4, 6
                             _mm512_mul_ps(_mm512_permutex2var_ps(odd[0], high, odd[1]), s)};   // rows 5, 7
    // A row in the upper half is stored from 8 floats before it, through the mask of its lanes
    // (masked lanes are not accessed).
    const __mmask16 valid = __mmask16((1u << keys) - 1);
    for (index_t r = 0; r < M; ++r) {
      const __m512& v = pairs[(r / 4) * 2 + r % 2];
      if ((r / 2) % 2 == 0)
        _mm512_mask_storeu_ps(c + r * ldc, valid, v);
      else
        _mm512_mask_storeu_ps(c + r * ldc - 8, __mmask16(valid << 8), v);
    }
  }
};

/// The order rows_pairs' products leave 32 columns in: unpacking two rows' 16-bit values by
/// _mm512_unpacklo_epi16 pairs columns 0-3, 8-11, 16-19 and 24-27 (`low`), _mm512_unpackhi_epi16
/// the others (`high`, each 4 more); `back` (and 8 more) gives columns 0-15 (16-31) from the two.
struct PairColumns {
  __m512i low, high, back0, back1;
  KFLASH_IMPL_BF16_TARGET PairColumns() {
    low = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    high = _mm512_add_epi32(low, _mm512_set1_epi32(4));
    back0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    back1 = _mm512_add_epi32(back0, _mm512_set1_epi32(8));
  }
};

/// acc[r] += the weights of rows r of a at keys 0 and 1 times the pairs of x (key 0) and y (key 1).
/// LDA: a's row stride as a constant (0: lda), so that the rows' weights load at offsets from one
/// pointer.
template <int R, index_t LDA>
KFLASH_IMPL_BF16_TARGET inline void rows_pairs_step(const std::uint16_t* a, index_t lda_given, const __m512i& x,
                                                    const __m512i& y, __m512 (&acc)[R][2]) {
  const index_t lda = LDA > 0 ? LDA : lda_given;
  const __m512i low = _mm512_unpacklo_epi16(x, y), high = _mm512_unpackhi_epi16(x, y);
  for (int r = 0; r < R; ++r) {
    __m512i w;
    DotPairs::broadcast(w, a + r * lda);
    DotPairs::dot(acc[r][0], w, low);
    DotPairs::dot(acc[r][1], w, high);
  }
}

/// 32 values of a row of b (its first `valid` where not Whole: the rest zeros, not read).
template <bool Whole>
KFLASH_IMPL_BF16_TARGET inline __m512i value_row(const std::uint16_t* b, __mmask32 valid) {
  if constexpr (Whole)
    return _mm512_loadu_si512(static_cast<const void*>(b));
  else
    return _mm512_maskz_loadu_epi16(valid, b);
}

/// R rows by 32 columns of rows_pairs (b's first `valid` columns where not Whole: the others add
/// zeros), asking for the lines next + k next_ld, k in [0, next_rows).
template <int R, bool Whole, index_t LDA>
KFLASH_IMPL_BF16_TARGET inline void rows_pairs_block(const std::uint16_t* a, index_t lda, const std::uint16_t* b,
                                                     index_t ldb, float* c, index_t ldc, index_t K, __mmask32 valid,
                                                     const std::uint16_t* next, index_t next_ld, index_t next_rows) {
  const PairColumns order;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    const __m512 c0 = _mm512_loadu_ps(c + r * ldc), c1 = _mm512_loadu_ps(c + r * ldc + 16);
    acc[r][0] = _mm512_permutex2var_ps(c0, order.low, c1);
    acc[r][1] = _mm512_permutex2var_ps(c0, order.high, c1);
  }
  index_t k = 0;
  for (; k + 2 <= K; k += 2) {
    if (k < next_rows) prefetch_l2(next + k * next_ld);
    if (k + 1 < next_rows) prefetch_l2(next + (k + 1) * next_ld);
    const __m512i x = value_row<Whole>(b + k * ldb, valid), y = value_row<Whole>(b + (k + 1) * ldb, valid);
    rows_pairs_step<R, LDA>(a + k, lda, x, y, acc);
  }
  if (k < K) {  // the last key alone: its partner's weight is zero, its values zeros (not read)
    const __m512i x = value_row<Whole>(b + k * ldb, valid), y = _mm512_setzero_si512();
    rows_pairs_step<R, LDA>(a + k, lda, x, y, acc);
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(c + r * ldc, _mm512_permutex2var_ps(acc[r][0], order.back0, acc[r][1]));
    _mm512_storeu_ps(c + r * ldc + 16, _mm512_permutex2var_ps(acc[r][0], order.back1, acc[r][1]));
  }
}

/// rows_pairs for the M rows of a 32-column strip: blocks of R rows, the rest by halves.
template <int R, bool Whole, index_t LDA>
KFLASH_IMPL_BF16_TARGET inline void rows_pairs_strip(const std::uint16_t* a, index_t lda, const std::uint16_t* b,
                                                     index_t ldb, float* c, index_t ldc, index_t M, index_t K,
                                                     __mmask32 valid, const std::uint16_t* next, index_t next_ld,
                                                     index_t next_rows) {
  index_t i = 0;
  for (; i + R <= M; i += R, next_rows = 0)
    rows_pairs_block<R, Whole, LDA>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, K, valid, next, next_ld, next_rows);
  if constexpr (R > 1)
    if (i < M)
      rows_pairs_strip<R / 2, Whole, LDA>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, M - i, K, valid, next,
                                          next_ld, next_rows);
}

/// The strips of rows_pairs past b's last whole 32 columns, kept out of line: inlined beside the
/// whole strips' loop, it changed how that loop compiled and slowed it.
__attribute__((noinline)) KFLASH_IMPL_BF16_TARGET inline void rows_pairs_tail(
    const std::uint16_t* a, index_t lda, const std::uint16_t* b, index_t ldb, float* c, index_t ldc, index_t M,
    index_t N, index_t cols, index_t K, index_t j, const std::uint16_t* next, index_t next_rows) {
  for (; j < N; j += 32) {
    const __mmask32 valid = j < cols ? __mmask32((1u << (cols - j)) - 1) : 0;
    rows_pairs_strip<HostTraits::dot_rows, false, 0>(a, lda, b + j, ldb, c + j, ldc, M, K, valid, next + j, ldb,
                                                     next_rows);
  }
}

/// c (M x N, N a multiple of 32) += a (M x K weights, bf16) b (K x cols values, bf16, rows ldb
/// apart): b's columns past cols are not read, and c's add zeros. Rows [0, next_rows) of next are
/// asked for into L2 as the strips go: where they lie end to end (ldb == cols, whole strips), in
/// address order, strip s the lines from s next_rows on (a strip's own columns of each row, 256 or
/// more bytes apart, were about 15 % slower to stream from memory); otherwise each strip its
/// columns of each row. a's rows block_k_bf16 apart (the attention tiles' weights, P) take that
/// stride as a constant (rows_pairs_step).
KFLASH_IMPL_BF16_TARGET inline void rows_pairs(const std::uint16_t* a, index_t lda, const std::uint16_t* b, index_t ldb,
                                               float* c, index_t ldc, index_t M, index_t N, index_t cols, index_t K,
                                               const std::uint16_t* next, index_t next_rows) {
  if (next == nullptr) next = b, next_rows = 0;
  const bool end_to_end = ldb == cols && cols % 32 == 0;
  const auto whole_strips = [&](auto lda_constant) {
    constexpr index_t L = decltype(lda_constant)::value;
    index_t j = 0;
    for (; j + 32 <= cols; j += 32)
      rows_pairs_strip<HostTraits::dot_rows, true, L>(a, lda, b + j, ldb, c + j, ldc, M, K, 0,
                                                      end_to_end ? next + j * next_rows : next + j,
                                                      end_to_end ? 32 : ldb, next_rows);
    return j;
  };
  using Tiles = std::integral_constant<index_t, HostTraits::block_k_bf16>;
  const index_t j = lda == Tiles::value ? whole_strips(Tiles{}) : whole_strips(std::integral_constant<index_t, 0>{});
  if (j < N) rows_pairs_tail(a, lda, b, ldb, c, ldc, M, N, cols, K, j, next, next_rows);
}
#endif

}  // namespace kflash::impl::host::internal
