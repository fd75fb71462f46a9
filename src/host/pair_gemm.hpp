// The host kernels' products on bf16 operands in pairs, the layout the hardware's bf16 products take
// (AVX512-BF16's vdpbf16ps, AMX-BF16's tiles): c (+)= a b with
//   a: M rows of 2K bf16 values (row stride lda values), pair k of row r its values 2k, 2k + 1;
//   b: K rows of N pairs (row stride ldb values): pair (k, n) is b's elements (2k, n) and (2k + 1, n)
//      side by side, at values 2n, 2n + 1 of row k;
//   c: M x N floats (row stride ldc).
// Without accumulation c = scale (a b), each sum rounded once more by the scaling (the scores' scale,
// applied as the block is stored rather than by another pass over c).
// Every product of two bf16 values is exact in float; the sums are fp32. Two kinds of products:
// AVX512-BF16 dot products (one instruction a vector of pairs) and AMX tiles (16 x 16 blocks of c,
// 16 pairs deep, one instruction); the variants without either do not take pairs.
#pragma once

#include "gemm.hpp"

#include <cstdint>
#include <type_traits>

#include <kflash/impl/host/host_kernels.hpp>

namespace kflash::impl::host::internal {

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
// The target of every AVX512-BF16 function here, in pair_rows.hpp and in tile_pairs.hpp.
#define KFLASH_IMPL_BF16_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16")))
/// AVX512-BF16: vdpbf16ps adds both products of 16 pairs into 16 floats (denormal bf16 inputs and
/// outputs count as zero, as the instruction defines).
struct DotPairs {
  using acc_type = __m512;
  static constexpr int W = 16;
  using operand = __m512i;
  using pair = __m512i;
  KFLASH_IMPL_BF16_TARGET static void load(operand& v, const std::uint16_t* p) {
    v = _mm512_loadu_si512(static_cast<const void*>(p));
  }
  KFLASH_IMPL_BF16_TARGET static void broadcast(pair& a, const std::uint16_t* p) {
    std::uint32_t w;
    __builtin_memcpy(&w, p, sizeof w);
    a = _mm512_set1_epi32(int(w));
  }
  KFLASH_IMPL_BF16_TARGET static void dot(acc_type& acc, const pair& a, const operand& b) {
    acc = _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
  }
  KFLASH_IMPL_BF16_TARGET static void scale(acc_type& acc, float s) { acc = _mm512_mul_ps(acc, _mm512_set1_ps(s)); }
  /// m = max(x, m) lane by lane; a NaN in x leaves m (vmaxps returns its second operand then). (The
  /// masked form: GCC 12 warns that the unmasked one's undefined pass-through may be uninitialised.)
  KFLASH_IMPL_BF16_TARGET static void max(acc_type& m, const acc_type& x) {
    m = _mm512_mask_max_ps(m, __mmask16(0xffff), x, m);
  }
};

/// c += a b, or c = scale (a b), for an R x (NV vectors) block of c, in the broadcast form: each
/// pair k loads NV vectors of b's row k and broadcasts row r's pair k. With Max (c = scale (a b)
/// only), max[r] takes the lane-wise maximum of row r's values stored (NaN ignored): the caller
/// holds it in registers across a row block's columns. LDA: a's row stride where it is a constant
/// (0: lda), so that a's rows are one register and constant offsets rather than a register each.
template <class P, int R, int NV, bool Accumulate, index_t LDA, bool Max = false>
inline void pair_block(const std::uint16_t* a, index_t lda_given, const std::uint16_t* b, index_t ldb, float* c,
                       index_t ldc, index_t K, float scale, typename P::acc_type* max = nullptr) {
  static_assert(!(Accumulate && Max), "kflash: maxima of products, not of sums added to c");
  constexpr int W = P::W;
  const index_t lda = LDA != 0 ? LDA : lda_given;
  typename P::acc_type acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) {
      if (Accumulate) {
        __builtin_memcpy(&acc[r][j], c + r * ldc + j * W, sizeof acc[r][j]);
      } else {
        acc[r][j] = typename P::acc_type{};
      }
    }
  for (index_t k = 0; k < K; ++k) {
    typename P::operand bk[NV];
    for (int j = 0; j < NV; ++j) P::load(bk[j], b + k * ldb + j * 2 * W);
    for (int r = 0; r < R; ++r) {
      typename P::pair ar;
      P::broadcast(ar, a + r * lda + 2 * k);
      for (int j = 0; j < NV; ++j) P::dot(acc[r][j], ar, bk[j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) {
      if (!Accumulate) P::scale(acc[r][j], scale);
      if (Max) P::max(max[r], acc[r][j]);
      __builtin_memcpy(c + r * ldc + j * W, &acc[r][j], sizeof acc[r][j]);
    }
}

/// The R rows of c from row i on, by pair_block over N columns; with row_max (not null, c = scale
/// (a b) only), row r's W lanes at row_max + r W become the lane-wise maxima of its values.
template <class P, int R, int NV, bool Accumulate, index_t LDA>
inline void pair_rows(const std::uint16_t* a, index_t lda, const std::uint16_t* b, index_t ldb, float* c, index_t ldc,
                      index_t N, index_t K, float scale, float* row_max) {
  constexpr index_t C = NV * P::W;
  if constexpr (!Accumulate) {
    if (row_max != nullptr) {
      typename P::acc_type max[R];
      for (int r = 0; r < R; ++r) __builtin_memcpy(&max[r], row_max + r * P::W, sizeof max[r]);
      for (index_t j = 0; j < N; j += C)
        pair_block<P, R, NV, false, LDA, true>(a, lda, b + 2 * j, ldb, c + j, ldc, K, scale, max);
      for (int r = 0; r < R; ++r) __builtin_memcpy(row_max + r * P::W, &max[r], sizeof max[r]);
      return;
    }
  }
  for (index_t j = 0; j < N; j += C)
    pair_block<P, R, NV, Accumulate, LDA>(a, lda, b + 2 * j, ldb, c + j, ldc, K, scale);
}

/// c += a b, or c = scale (a b), for M x N (N a multiple of NV vectors' columns), by blocks of R rows
/// (the rows left one by one), with the products of P; row_max as pair_rows', for all M rows; LDA
/// as pair_block's.
template <class P, int R, int NV, bool Accumulate, index_t LDA = 0>
inline void pair_gemm(const std::uint16_t* a, index_t lda, const std::uint16_t* b, index_t ldb, float* c, index_t ldc,
                      index_t M, index_t N, index_t K, float scale, float* row_max) {
  const auto rows_max = [&](index_t i) { return row_max != nullptr ? row_max + i * P::W : nullptr; };
  index_t i = 0;
  for (; i + R <= M; i += R)
    pair_rows<P, R, NV, Accumulate, LDA>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, N, K, scale, rows_max(i));
  for (; i < M; ++i)
    pair_rows<P, 1, NV, Accumulate, LDA>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, N, K, scale, rows_max(i));
}

/// y[0, n) = x[0, n) rounded to bf16, to nearest even, by vcvtneps2bf16 (an AVX512-BF16
/// instruction; denormal floats round to zero).
KFLASH_IMPL_BF16_TARGET inline void narrow_bf16(const float* x, std::uint16_t* y, index_t n) {
  index_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

/// The register-block products: c += a b (accumulate) or c = scale (a b) with the broadcast blocks of
/// P, 8 rows by 2 vectors. Session: what a tile's products need around them (nothing here).
/// row_maxima: c = scale (a b) may also take each row's maximum (pair_gemm's row_max) as the
/// blocks are stored.
template <class P>
struct BlockPairs {
  struct Session {
    Session() {}  // user-provided: a Session is a scope, not an unused value
  };
  static constexpr bool row_maxima = true;
  static void gemm(const std::uint16_t* a, index_t lda, const std::uint16_t* b, index_t ldb, float* c, index_t ldc,
                   index_t M, index_t N, index_t K, bool accumulate, float scale = 1.0f, float* row_max = nullptr) {
    constexpr int R = HostTraits::gemm_rows<64>, NV = HostTraits::gemm_vectors;
    // a's row strides of the tiles' products as constants: q16's d16 at D = 64 and 128, p16's bk.
    const auto with_lda = [&](auto lda_constant) {
      constexpr index_t L = decltype(lda_constant)::value;
      if (accumulate)
        pair_gemm<P, R, NV, true, L>(a, lda, b, ldb, c, ldc, M, N, K, scale, nullptr);
      else
        pair_gemm<P, R, NV, false, L>(a, lda, b, ldb, c, ldc, M, N, K, scale, row_max);
    };
    if (lda == 64) with_lda(std::integral_constant<index_t, 64>{});
    else if (lda == 128) with_lda(std::integral_constant<index_t, 128>{});
    else if (lda == HostTraits::block_k_bf16) with_lda(std::integral_constant<index_t, HostTraits::block_k_bf16>{});
    else
      with_lda(std::integral_constant<index_t, 0>{});
  }
};

#define KFLASH_IMPL_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
/// AMX-BF16 tiles: blocks of 32 x 32 of c in four accumulator tiles (0-3), two tiles of a's rows
/// (4, 5) and two of b's pairs (6, 7), each product 16 pairs deep. M and N are multiples of 16 and
/// K of 16 pairs (the caller pads with zeros). A Session holds the tiles' configuration around
/// an attention tile's two products and the fp32 steps between them: loaded when it starts (another
/// user of the thread's tiles may have changed it since the last tile), the tiles released when it
/// ends.
struct AmxPairs {
  /// The tiles store their sums unscaled: no maxima taken as they are stored.
  static constexpr bool row_maxima = false;
  struct Config {
    std::uint8_t palette = 1, start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t bytes_per_row[16] = {};
    std::uint8_t rows[16] = {};
  };
  struct Session {
    KFLASH_IMPL_AMX_TARGET Session() {
      alignas(64) Config config;
      for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.bytes_per_row[t] = 64;
      _tile_loadconfig(&config);
    }
    KFLASH_IMPL_AMX_TARGET ~Session() { _tile_release(); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
  };
  KFLASH_IMPL_AMX_TARGET static void gemm(const std::uint16_t* a, index_t lda, const std::uint16_t* b, index_t ldb,
                                          float* c, index_t ldc, index_t M, index_t N, index_t K, bool accumulate,
                                          float scale = 1.0f) {
    const long sa = long(lda) * 2, sb = long(ldb) * 2, sc = long(ldc) * 4;
    alignas(64) static const float zeros[16 * 16] = {};
    for (index_t i = 0; i < M; i += 32) {
      const bool two_rows = i + 32 <= M;
      for (index_t j = 0; j < N; j += 32) {
        const bool two_cols = j + 32 <= N;
        float* c00 = c + i * ldc + j;
        float* c10 = c00 + 16 * ldc;
        // Tiles past the edge of c run on zeros and are not stored.
        if (accumulate) {
          _tile_loadd(0, c00, sc);
          _tile_loadd(1, two_cols ? c00 + 16 : zeros, two_cols ? sc : 64);
          _tile_loadd(2, two_rows ? c10 : zeros, two_rows ? sc : 64);
          _tile_loadd(3, two_rows && two_cols ? c10 + 16 : zeros, two_rows && two_cols ? sc : 64);
        } else {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        }
        for (index_t k = 0; k < K; k += 16) {
          const std::uint16_t* a0 = a + i * lda + 2 * k;
          const std::uint16_t* b0 = b + k * ldb + 2 * j;
          _tile_loadd(4, a0, sa);
          _tile_loadd(5, two_rows ? a0 + 16 * lda : a0, sa);
          _tile_loadd(6, b0, sb);
          _tile_loadd(7, two_cols ? b0 + 32 : b0, sb);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, c00, sc);
        if (two_cols) _tile_stored(1, c00 + 16, sc);
        if (two_rows) _tile_stored(2, c10, sc);
        if (two_rows && two_cols) _tile_stored(3, c10 + 16, sc);
      }
    }
    if (!accumulate && scale != 1.0f)  // the tiles store unscaled sums: scaled here, c just stored (L1 or L2)
      for (index_t i = 0; i < M; ++i)
        for (index_t j = 0; j < N; ++j) c[i * ldc + j] *= scale;
  }
};
#undef KFLASH_IMPL_AMX_TARGET
#endif

}  // namespace kflash::impl::host::internal
