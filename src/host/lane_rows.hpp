// softmax, log_softmax and logsumexp over rows of at most 16 values on AVX-512, 16 rows at a time
// with one row in each lane: the rows are loaded by masked loads (lanes past a row's end read -inf
// and weigh 0), transposed so that vector j holds value j of every row, and every step is then one
// vector operation for the 16 rows (the maxima, the weights, their sums, the normalizers), with no
// reduction across lanes; the outputs are transposed back and stored by masked stores. Rows shorter
// than a block otherwise pay a block's fixed steps each (short_rows: a padded block, the lanes'
// trees, a normalizer), several times the arithmetic of their few values.
//
// A group in which a row's state is special (a NaN, or an infinite maximum: either makes the sum
// NaN here, as -inf - -inf and +inf - +inf are NaN) writes nothing and is left to short_rows, where
// the contract's rules apply (the state layer's): lane_rows itself computes only rows of finite
// values, whose largest value weighs exactly 1, so that each sum is in [1, 16].
#pragma once

#include "half_vectors.hpp"
#include "vector_exp.hpp"

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/math.hpp>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kflash::impl::host::internal {

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
#define KFLASH_IMPL_LANE_ROWS 1

/// The rows lane_rows takes at a time, and the most values a row may have.
constexpr index_t lane_rows_group = 16;

using LaneRowVector = Vec<float, 64>::type;

/// The permutes of transpose_16x16, step by step (k = 8, 4, 2, 1): the lanes of a (0-15) and of b
/// (16-31) that make the new vectors i and i + k from vectors i and i + k. Built at compile time, so
/// that each is loaded as one vector.
struct TransposeLanes {
  alignas(64) std::int32_t low[4][16];
  alignas(64) std::int32_t high[4][16];
};
constexpr TransposeLanes make_transpose_lanes() {
  TransposeLanes t{};
  for (int s = 0, k = 8; s < 4; ++s, k /= 2)
    for (int l = 0; l < 16; ++l) {
      t.low[s][l] = (l & k) == 0 ? l : 16 + l - k;
      t.high[s][l] = (l & k) == 0 ? l + k : 16 + l;
    }
  return t;
}
inline constexpr TransposeLanes transpose_lanes = make_transpose_lanes();

/// f(std::integral_constant<int, I>) for I = 0, ..., N - 1, unrolled by the expansion (a vector
/// array indexed in a loop the compiler does not unroll lives on the stack).
template <class F, int... I>
inline void unrolled(const F& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
inline void unrolled(const F& f) {
  unrolled(f, std::make_integer_sequence<int, N>{});
}

/// One step of transpose_16x16 (k = 8 >> S) on the vectors I and I + k, for I with bit k clear.
template <int S, int I>
__attribute__((target("avx512f"))) inline void transpose_pair(LaneRowVector (&v)[16], const __m512i& lo,
                                                              const __m512i& hi) {
  constexpr int k = 8 >> S;
  if constexpr ((I & k) == 0) {
    const __m512 a = (__m512)v[I], b = (__m512)v[I + k];
    v[I] = (LaneRowVector)_mm512_permutex2var_ps(a, lo, b);
    v[I + k] = (LaneRowVector)_mm512_permutex2var_ps(a, hi, b);
  }
}
template <int S, int... I>
__attribute__((target("avx512f"))) inline void transpose_step(LaneRowVector (&v)[16],
                                                              std::integer_sequence<int, I...>) {
  const __m512i lo = _mm512_load_si512(transpose_lanes.low[S]), hi = _mm512_load_si512(transpose_lanes.high[S]);
  (transpose_pair<S, I>(v, lo, hi), ...);
}

/// v[i] lane l <-> v[l] lane i: at each step k (8, 4, 2, 1) the k x k blocks off the diagonal of
/// each 2k x 2k block swap, between vectors i and i + k, by one two-source permute per vector.
__attribute__((target("avx512f"))) inline void transpose_16x16(LaneRowVector (&v)[16]) {
  constexpr auto lanes = std::make_integer_sequence<int, 16>{};
  transpose_step<0>(v, lanes);
  transpose_step<1>(v, lanes);
  transpose_step<2>(v, lanes);
  transpose_step<3>(v, lanes);
}

/// Lanes [0, count) of v at y, rounded to B where B is 16-bit; nothing at or past y + count is written.
__attribute__((target("avx512f"))) inline void partial_store(float* y, const LaneRowVector& v, index_t count) {
  _mm512_mask_storeu_ps(y, __mmask16(lanes_mask(int(count), 16)), (__m512)v);
}
template <class B>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void partial_store(B* y, const LaneRowVector& v,
                                                                                index_t count) {
  alignas(32) B rounded[16];
  narrow_vector<64>(v, rounded);
  _mm256_mask_storeu_epi16(y, __mmask16(lanes_mask(int(count), 16)),
                           _mm256_load_si256(reinterpret_cast<const __m256i*>(rounded)));
}

/// Rows [r0, r0 + 16) of blk (blk.cols <= C, C = 8 or 16: the values computed per row), as in the
/// file's comment; false, with nothing written, where a row's state is special. A: the accuracy of
/// the exp (short_exp_takes), as for short_rows.
template <int C, class B, ExpAccuracy A>
__attribute__((target("avx512f,avx512bw,avx512vl"))) bool lane_rows(const RowBlock<float, B>& blk, index_t r0) {
  static_assert(C == 8 || C == 16, "kflash: lane_rows computes 8 or 16 values a row");
  using V = Vec<float, 64>;
  using F = LaneRowVector;
  using Exp = typename ExpOf<float, 64, A>::type;
  const index_t n = blk.cols;
  F v[16];
  unrolled<16>([&](auto r) { PartialOperand<float, 64, B>::load(v[r], blk.x + (r0 + r) * blk.ldx, n); });
  transpose_16x16(v);  // v[j] lane r: value j of row r0 + r, -inf for j >= n
  F m = v[0];
  unrolled<C - 1>([&](auto j) { V::max(m, v[j + 1]); });  // NaN never enters: it fails the comparison
  F w[C], sums[C / 2];
  unrolled<C>([&](auto j) {
    w[j] = v[j] - m;
    Exp::exp(w[j]);
  });
  unrolled<C / 2>([&](auto j) { sums[j] = w[j] + w[j + C / 2]; });  // the weights' sums by a tree
  unrolled<C == 16 ? 3 : 2>([&](auto t) {
    constexpr int h = C / 4 >> t;
    unrolled<h>([&](auto j) { sums[j] += sums[j + h]; });
  });
  const F l = sums[0];
  if (_mm512_cmp_ps_mask((__m512)l, (__m512)l, _CMP_UNORD_Q) != 0) return false;
  if (blk.op == RowOp::softmax) {
    const F inv_sum = 1.0f / l;  // SoftmaxNormalizer's inv_sum, lane by lane
    unrolled<C>([&](auto j) { v[j] = w[j] * inv_sum; });
  } else {
    alignas(64) float totals[16], logs[16];
    V::store(totals, l);
    if (blk.op == RowOp::logsumexp) {
      alignas(64) float maxima[16];
      V::store(maxima, m);
      for (int r = 0; r < 16; ++r)  // SoftmaxState::logsumexp(log_total)
        blk.out[(r0 + r) * blk.ldout] = float(double(maxima[r]) + log_of_total(double(totals[r])));
      return true;
    }
    for (int r = 0; r < 16; ++r) logs[r] = float(log_of_total(double(totals[r])));
    F log_sum;
    V::load(log_sum, logs);
    unrolled<C>([&](auto j) { v[j] = (v[j] - m) - log_sum; });  // SoftmaxNormalizer::log_prob
  }
  unrolled<16 - C>([&](auto j) { v[C + j] = F{}; });
  transpose_16x16(v);
  unrolled<16>([&](auto r) { partial_store(blk.y + (r0 + r) * blk.ldy, v[r], n); });
  return true;
}
#endif

}  // namespace kflash::impl::host::internal
