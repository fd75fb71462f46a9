// The compiled host kernels (src/host/): raw-pointer inner loops on contiguous memory, compiled once
// for several x86-64 instruction sets (AVX-512, AVX2 + FMA and the baseline); each call runs the
// best variant the CPU supports, so users' compiler flags do not decide the vector width. Their
// knobs are HostTraits'. The host schedules (host_rows.hpp, host_attention.hpp) call them.
#pragma once

#include <kflash/impl/tile/attention_step.hpp>
#include <kflash/impl/tile/logit_stats.hpp>
#include <kflash/impl/traits.hpp>

#include <cstdint>
#include <type_traits>

namespace kflash::impl::host {

/// Instruction sets the host kernels are built for, each including the ones before it. avx512bf16
/// and amx differ from avx512 only in attention's products on bf16 pairs (AttentionTile's q16):
/// AVX512-BF16 dot products, then AMX-BF16 tiles (on Linux, where the kernel grants the process
/// the tile data).
enum class Isa { baseline, avx2, avx512, avx512bf16, amx };

/// The variant in use: the best the CPU supports (avx512 rather than avx512bf16 on Intel CPUs
/// without AMX, whose bf16 dot products are slower than attention's fp32 path), or one the CPU
/// supports named by the environment variable KFLASH_HOST_ISA (baseline, avx2, avx512, avx512bf16,
/// amx), read once. Non-x86 builds and builds through nvcc have only the baseline.
Isa isa();
const char* isa_name(Isa);

/// Whether the avx512 variant rounds float vectors to bf16 by AVX512-BF16's vcvtneps2bf16 (the same
/// results as its integer steps): where the CPU has AVX512-BF16, unless KFLASH_HOST_ISA names a set
/// below avx512bf16.
bool bf16_rounding_instruction();

/// Whether the variant in use has bf16 products (avx512bf16, amx): attention's bf16 blocks then take
/// AttentionTile's pairs; the other variants are never given them.
inline bool bf16_products() { return int(isa()) >= int(Isa::avx512bf16); }

/// The state (m, l) of x[0, n), by tiles of HostTraits::tile (each tile's maximum first, then its
/// weights), through the variant `which` (default: isa()).
SoftmaxState<float> row_state(const float* x, index_t n);
SoftmaxState<double> row_state(const double* x, index_t n);
SoftmaxState<float> row_state(Isa which, const float* x, index_t n);
SoftmaxState<double> row_state(Isa which, const double* x, index_t n);

/// Rows of logits for cross-entropy's statistics: row r of x at x + r * ldx, cols elements each,
/// contiguous (a chunk of a row: rows = 1); the statistics of row r (target_logit 0) go to
/// out[r * ldout]. Rows longer than a tile take row_state's pass, which also sums each tile while
/// it is in the cache. Inside the kernels, B is the rows' storage (run_logit_rows16's long rows).
/// Without sum_logits the logits' sums (LogitStats::total, which only label smoothing needs) stay 0.
template <class T, class B = T>
struct LogitBlock {
  const B* x;
  index_t ldx;
  LogitStats<T>* out;
  index_t ldout;
  index_t rows, cols;
  bool sum_logits = true;
};

void run_logit_rows(const LogitBlock<float>& block);
void run_logit_rows(const LogitBlock<double>& block);

/// y[0, n) = norm.prob(x) (softmax) or norm.log_prob(x) (log_softmax) for a chunk x[0, n) of a row
/// whose state gave `norm`; with `stream`, through non-temporal stores.
void write_row(RowOp op, const float* x, float* y, index_t n, const SoftmaxNormalizer<float>& norm, bool stream);
void write_row(RowOp op, const double* x, double* y, index_t n, const SoftmaxNormalizer<double>& norm,
               bool stream);

/// The 16-bit storage formats, by their bits: kflash::bhalf_t and kflash::half_t (either
/// implementation: both are the bare 2-byte formats).
enum class Storage16 { bf16, fp16 };
template <class H>
inline constexpr Storage16 storage16_of = std::is_same<H, half_t>::value ? Storage16::fp16 : Storage16::bf16;

/// y[0, n) = x[0, n) widened to float; x[0, n) rounded to 16 bits, to nearest even (NaN stays NaN),
/// through the variant `which`.
void widen16(Isa which, Storage16 f, const std::uint16_t* x, float* y, index_t n);
void narrow16(Isa which, Storage16 f, const float* x, std::uint16_t* y, index_t n);

/// row_state and write_row on 16-bit rows, read widened to float as they load; each output is rounded
/// once (with `stream`, through non-temporal stores).
SoftmaxState<float> row_state16(Storage16 f, const std::uint16_t* x, index_t n);
void write_row16(Storage16 f, RowOp op, const std::uint16_t* x, std::uint16_t* y, index_t n,
                 const SoftmaxNormalizer<float>& norm, bool stream);
/// Whole 16-bit rows of `format`, as RowBlock: row r of x at x + r * ldx, cols elements each,
/// contiguous; softmax and log_softmax write row r of y at y + r * ldy (y may be x); logsumexp
/// writes out[r * ldout] in float, or out16[r * ldout] rounded where out is null. The rows go
/// through run_rows' passes as they are, read widened and written rounded; softmax's weights of
/// rows longer than a tile kept in `buffer` (buffer_elements floats, at least
/// weights_elements(cols); none: each weight computed again in the write pass). With `stream`, rows
/// longer than a tile write with non-temporal stores.
struct RowBlock16 {
  Storage16 format;
  RowOp op;
  const std::uint16_t* x;
  index_t ldx;
  std::uint16_t* y;
  index_t ldy;
  float* out;
  std::uint16_t* out16;
  index_t ldout;
  index_t rows, cols;
  float* buffer = nullptr;
  index_t buffer_elements = 0;
  bool stream = false;
};
void run_rows16(const RowBlock16& block);

/// run_logit_rows on 16-bit rows of `format` (LogitBlock's layout), widened to float by blocks.
void run_logit_rows16(Storage16 format, const std::uint16_t* x, index_t ldx, LogitStats<float>* out, index_t ldout,
                      index_t rows, index_t cols, bool sum_logits);

template <class H, std::enable_if_t<is_half_type<H>, int> = 0>
SoftmaxState<float> row_state(const H* x, index_t n) {
  return row_state16(storage16_of<H>, reinterpret_cast<const std::uint16_t*>(x), n);
}
template <class H, std::enable_if_t<is_half_type<H>, int> = 0>
void write_row(RowOp op, const H* x, H* y, index_t n, const SoftmaxNormalizer<float>& norm, bool stream) {
  write_row16(storage16_of<H>, op, reinterpret_cast<const std::uint16_t*>(x), reinterpret_cast<std::uint16_t*>(y), n,
              norm, stream);
}

/// y[0, n) = scale * exp(x - shift) - offset for a chunk x[0, n) of a row whose x - shift <= 0
/// (cross-entropy's gradient: shift = lse, scale and offset CrossEntropyGrad's weight and smooth).
/// y may be x.
void write_scaled_exp(const float* x, float* y, index_t n, float shift, float scale, float offset);
void write_scaled_exp(const double* x, double* y, index_t n, double shift, double scale, double offset);
void write_scaled_exp16(Storage16 f, const std::uint16_t* x, std::uint16_t* y, index_t n, float shift, float scale,
                        float offset);
template <class H, std::enable_if_t<is_half_type<H>, int> = 0>
void write_scaled_exp(const H* x, H* y, index_t n, float shift, float scale, float offset) {
  write_scaled_exp16(storage16_of<H>, reinterpret_cast<const std::uint16_t*>(x), reinterpret_cast<std::uint16_t*>(y), n,
                     shift, scale, offset);
}

/// Where softmax keeps each weight exp(x - max) between its two passes, so that it is computed once.
enum class WeightsAt {
  recomputed,  ///< nowhere: the write pass computes it again
  output,      ///< in y, rescaled in place (rows of one tile, and rows that stay in the cache)
  scratch      ///< in RowBlock::weights (weights_elements(cols) elements)
};

/// The elements of one row's weights: the weights and one maximum per tile, rounded up to 16 so
/// that the second row's half starts on a 64-byte line as the first does.
constexpr index_t row_weights_elements(index_t cols) {
  return (cols + cols / HostTraits::tile + 1 + 15) / 16 * 16;
}
/// The elements of RowBlock::weights: two rows' (row_weights_elements each), so that one row's
/// state pass stores its weights while the row before it is scaled out of the other half.
constexpr index_t weights_elements(index_t cols) { return 2 * row_weights_elements(cols); }

/// Whole rows: row r of x at x + r * ldx, cols elements each, contiguous. softmax and log_softmax
/// write row r of y at y + r * ldy (y may be x); logsumexp writes out[r * ldout]. With `stream`,
/// rows longer than one tile write with non-temporal stores. The plan decides stream and weights_at
/// (plan_host_rows); rows of one tile always keep softmax's weights in y. Inside the kernels, B is
/// the rows' storage (run_rows16's rows: a 16-bit type, T float).
template <class T, class B = T>
struct RowBlock {
  RowOp op;
  const B* x;
  index_t ldx;
  B* y;
  index_t ldy;
  T* out;
  index_t ldout;
  index_t rows, cols;
  bool stream = false;
  WeightsAt weights_at = WeightsAt::recomputed;
  T* weights = nullptr;
};

void run_rows(const RowBlock<float>& block);
void run_rows(const RowBlock<double>& block);

/// dx[0, n) = dlse * exp(x - lse) for a chunk x[0, n) of a row whose lse is finite (logsumexp's
/// gradient; x - lse of either sign), with `stream` through non-temporal stores. dx may be x.
void write_lse_grad(const float* x, float* dx, index_t n, float lse, float dlse, bool stream);
void write_lse_grad(const double* x, double* dx, index_t n, double lse, double dlse, bool stream);
void write_lse_grad16(Storage16 f, const std::uint16_t* x, std::uint16_t* dx, index_t n, float lse, float dlse,
                      bool stream);
template <class H, std::enable_if_t<is_half_type<H>, int> = 0>
void write_lse_grad(const H* x, H* dx, index_t n, float lse, float dlse, bool stream) {
  write_lse_grad16(storage16_of<H>, reinterpret_cast<const std::uint16_t*>(x), reinterpret_cast<std::uint16_t*>(dx), n,
                   lse, dlse, stream);
}

/// The gradients of softmax (op softmax: a = y, b = dy) and log_softmax (log_softmax: a = y, b = dy)
/// on a contiguous chunk [0, n) of a row: grad_sum gives its Σ b·a (softmax) or Σ b (log_softmax)
/// by tiles of HostTraits::tile, each summed over vector lanes, the tiles' sums compensated (a
/// SoftmaxState whose maximum stays -inf); write_grad writes dx = a (b - s) or b - exp(a) s over
/// the chunk (dx may be b), with `stream` through non-temporal stores.
SoftmaxState<float> grad_sum(RowOp op, const float* a, const float* b, index_t n);
SoftmaxState<double> grad_sum(RowOp op, const double* a, const double* b, index_t n);
void write_grad(RowOp op, const float* a, const float* b, float* dx, index_t n, float s, bool stream);
void write_grad(RowOp op, const double* a, const double* b, double* dx, index_t n, double s, bool stream);
/// The same on 16-bit chunks: the sum in float, widened as it loads; dx computed in float by blocks
/// and rounded once.
SoftmaxState<float> grad_sum16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, index_t n);
void write_grad16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* dx, index_t n,
                  float s, bool stream);
template <class H, std::enable_if_t<is_half_type<H>, int> = 0>
SoftmaxState<float> grad_sum(RowOp op, const H* a, const H* b, index_t n) {
  return grad_sum16(storage16_of<H>, op, reinterpret_cast<const std::uint16_t*>(a),
                    reinterpret_cast<const std::uint16_t*>(b), n);
}
template <class H, std::enable_if_t<is_half_type<H>, int> = 0>
void write_grad(RowOp op, const H* a, const H* b, H* dx, index_t n, float s, bool stream) {
  write_grad16(storage16_of<H>, op, reinterpret_cast<const std::uint16_t*>(a),
               reinterpret_cast<const std::uint16_t*>(b), reinterpret_cast<std::uint16_t*>(dx), n, s, stream);
}

/// Which part of attention_tile() to run: all of it, or the scores alone and then the rest (so that
/// the host schedule applies the user's score_mod and mask_mod in between).
enum class TilePart { whole, scores, update };

/// The built-in score stage (attention_step.hpp's ScoreOptions) of one row of a tile, resolved to
/// the row and the tile's first key: ALiBi's slope and the row's diagonal key as an index in the
/// tile; the row's bias and mask entries for the tile's first key, with their strides along keys
/// (null: off).
template <class T>
struct TileScoreRow {
  bool alibi = false;
  T slope = T(0);
  index_t diagonal = 0;
  const T* bias = nullptr;
  index_t bias_stride = 0;
  const bool* mask = nullptr;
  index_t mask_stride = 0;
};

/// The TileScoreRow of the built-in options so (the score stage's) for `row` in the tile from key t0:
/// ALiBi, bias, and the mask View unless mask_view is false (a user's score_mod comes before the
/// mask: then it stays header-side, with the functors).
template <class T>
TileScoreRow<T> tile_score_row(const ScoreOptions<T>& so, const RowAt& row, index_t t0, bool mask_view) {
  TileScoreRow<T> sr;
  if (so.alibi.on()) {
    sr.alibi = true;
    sr.slope = so.alibi(row.b, row.h);
    sr.diagonal = row.c - t0;
  }
  if (so.bias.on()) {
    sr.bias = so.bias.at(row.b, row.h, row.i, t0);
    sr.bias_stride = so.bias.s3;
  }
  if (so.mask.on() && mask_view) {
    sr.mask = so.mask.at(row.b, row.h, row.i, t0);
    sr.mask_stride = so.mask.s3;
  }
  return sr;
}

/// One K/V tile of attention for a block of query rows, in place on the block's running state:
///   s = q k^T (rows x bk); the score stage masks each row to its visible keys (keys); per row the
///   tile's (m, l) and weights (left in s), merged into state[r]; o = fa * o + fb * (s v).
/// q (rows x D, pre-scaled), o (rows x dvp) and s (rows x bk) row-major and contiguous; the keys
/// either as k (nk rows of D, row stride ldk: K in place, dot products) or, when k is null, as kt
/// (D rows of bk keys, row stride ldkt: K transposed, broadcast products); v: nk rows of dvp
/// values, row stride ldv. bk and dvp are multiples of HostTraits::attention_pad; nk <= bk keys are
/// valid. keys[r] are the tile's keys row r sees, as indices within the tile. Before the tile state,
/// the built-in score stage runs on each row's visible scores, one pass per modifier: softcap (when
/// softcap != 0), then ALiBi, bias and mask as score_rows[r] gives them (score_rows null: none of
/// the three).
template <class T>
struct AttentionTile {
  const T* q;
  const T* kt;
  const T* v;
  T* s;
  T* o;
  SoftmaxState<T>* state;
  const KeyRange* keys;
  index_t rows, nk, bk, D, dvp;
  const T* k = nullptr;
  index_t ldk = 0;
  index_t ldkt = 0;
  index_t ldv = 0;
  TilePart part = TilePart::whole;
  T softcap = T(0), inv_softcap = T(0);
  const TileScoreRow<T>* score_rows = nullptr;
  /// The next tile's nk_next rows of K (where k is read in place) and of V (where v is), with the
  /// same row strides: the products ask for them while they run.
  const T* k_next = nullptr;
  const T* v_next = nullptr;
  index_t nk_next = 0;
  /// 16-bit rows of K and V read in place instead of k and v (and their next tile's), of `format`,
  /// with the strides ldk and ldv: the products widen them to float as they load them (T = float).
  const std::uint16_t* k16 = nullptr;
  const std::uint16_t* v16 = nullptr;
  const std::uint16_t* k16_next = nullptr;
  const std::uint16_t* v16_next = nullptr;
  Storage16 format = Storage16::bf16;
  /// bf16 pairs (T = float, q16 not null; only where bf16_products()): both products take bf16
  /// operands in pairs, the layout of the hardware's bf16 products, instead of q, k, kt and v
  /// (src/host/tile_pairs.hpp); the weights are rounded to bf16 for P V, as the hardware takes them:
  ///   q16: the block's rows of Q, unscaled, d16 values a row (D rounded up to 32, zeros past D);
  ///        s = (q16 K^T) score_scale;
  ///   k_pairs: K in pairs of dimensions: row p of d16 / 2 (2 ldk_pairs values apart) holds the
  ///        dimensions 2p, 2p + 1 of key j at values 2j, 2j + 1, for the tile's bk keys;
  ///   v_pairs: V in pairs of keys: row p (2 dvp values) holds keys 2p, 2p + 1 of column c at
  ///        2c, 2c + 1, zeros from key nk to the next multiple of 32 (and past Dv);
  ///   p16: room for the weights rounded to bf16 (bk values a row), which o += p16 V;
  ///   or, with k_pairs and v_pairs null, K's and V's 16-bit rows in place (k16, v16: decode's
  ///        blocks), paired in registers by the products; V's rows have dv values (Dv: o's
  ///        columns past it add zeros).
  /// q16, p16, s and o have the rows rounded up to 16; q16's and p16's rows past `rows` are zeros.
  const std::uint16_t* q16 = nullptr;
  const std::uint16_t* k_pairs = nullptr;
  const std::uint16_t* v_pairs = nullptr;
  std::uint16_t* p16 = nullptr;
  index_t d16 = 0, ldk_pairs = 0, dv = 0;
  T score_scale = T(1);
  /// The tile's weights and sums serve only outputs rounded to 16 bits (no lse, no partial states):
  /// their exp may be the shorter one of such outputs (GUIDE §9: one ulp of the 16-bit type).
  bool output16_only = false;
};

void attention_tile(const AttentionTile<float>& tile);
void attention_tile(const AttentionTile<double>& tile);

/// The bf16 pairs' layouts (AttentionTile's k_pairs and v_pairs) from rows of 16-bit values:
///   key_pairs: rows [0, n) of K (D values each, row stride ld) into rows of pairs of dimensions:
///     key j's dimensions 2p, 2p + 1 at out[p * 2 ldo + 2j + {0, 1}], for p < d16 / 2 (zeros from
///     dimension D on);
///   row_pairs: rows a and b (b null: zeros) of n values into out[2c + {0, 1}], c < n, then zeros
///     up to 2 n_pad values.
void key_pairs(const std::uint16_t* k, index_t ld, index_t n, index_t D, index_t d16, std::uint16_t* out, index_t ldo);
void row_pairs(const std::uint16_t* a, const std::uint16_t* b, index_t n, index_t n_pad, std::uint16_t* out);
void attention_tile(Isa which, const AttentionTile<float>& tile);
void attention_tile(Isa which, const AttentionTile<double>& tile);

/// c = a b, or c += a b with `accumulate`, for row-major b (K x N, row stride ldb) and c (M x N,
/// ldc), N a multiple of HostTraits::attention_pad, and a (M x K) row-major with row stride lda, or
/// with `a_transposed` stored as its transpose (K x M, row stride lda): the products of attention's
/// backward tiles (host_attention_backward.hpp). Rows [0, next_rows) of next (b's successor: N
/// columns, row stride ldb) are asked into the L2 cache while the product runs.
template <class T>
struct TileProduct {
  const T* a;
  index_t lda;
  const T* b;
  index_t ldb;
  T* c;
  index_t ldc;
  index_t M, N, K;
  bool accumulate = false;
  bool a_transposed = false;
  const T* next = nullptr;
  index_t next_rows = 0;
};

void tile_product(const TileProduct<float>& product);
void tile_product(const TileProduct<double>& product);

/// P and dS of a tile of attention's backward, in place over its raw scores s (q . k) and dP d
/// (dout . v), row r at s + r * ld and d + r * ld, keys [0, nk): over the keys keys[r] row r sees,
/// the built-in score stage of scale * s (softcap, then score_rows[r]'s ALiBi, bias and mask, as
/// attention_tile's), then P = exp(score - lse[r]) and dS = P (dP - delta[r]) softcap' scale (the
/// gradient of q . k); both 0 for every other key and where the mask hides the pair.
template <class T>
struct BackwardTile {
  T* s;
  T* d;
  index_t ld;
  index_t rows, nk;
  const KeyRange* keys;
  const T* lse;
  const T* delta;
  T scale;
  T softcap = T(0), inv_softcap = T(0);
  const TileScoreRow<T>* score_rows = nullptr;
};

void backward_tile(const BackwardTile<float>& tile);
void backward_tile(const BackwardTile<double>& tile);

}  // namespace kflash::impl::host
