// Inner loops of the host backends (Serial, OpenMP) on contiguous memory. They are compiled once,
// in src/host_kernels.cpp, for several x86-64 instruction sets (AVX-512, AVX2 + FMA and the
// baseline), and each call runs the best variant the CPU supports: users' own compiler flags do not
// decide the vector width. The Kokkos kernels in softmax.hpp and attention.hpp stay the schedules;
// on host spaces they hand their rows and tiles to these functions.
#pragma once

#include <kflash/impl/rows.hpp>
#include <kflash/softmax_state.hpp>

namespace kflash::impl::host {

/// Instruction sets the host kernels are built for.
enum class Isa { baseline, avx2, avx512 };

/// The variant in use: the best the CPU supports, or a lower one named by the environment variable
/// KFLASH_HOST_ISA (baseline, avx2, avx512), read once. Non-x86 builds and builds through nvcc have
/// only the baseline.
Isa isa();
const char* isa_name(Isa);

/// Elements per tile of the row kernels: a tile's maximum is found first, then its weights (its
/// lanes' plain partial sums stay short).
constexpr index_t row_tile = 512;

/// Steps of the row kernels over a chunk x[0, n) (and y[0, n)) of a row:
///   state:    result = the (m, l) of x, by tiles (the tile's maximum first, then its weights)
///   prob:     y = exp(x - a) * b
///   log_prob: y = (x - a) - b
/// With `stream`, prob and log_prob write y with non-temporal stores (see stream_bytes).
enum class RowStep { state, prob, log_prob };

template <class T>
struct RowTask {
  RowStep step;
  const T* x;
  T* y;
  index_t n;
  T a;
  T b;
  SoftmaxState<T> result;
  bool stream = false;
};

void run(RowTask<float>& task);
void run(RowTask<double>& task);

/// Columns of the attention tiles' kt, v and o are padded to a multiple of this (with zeros).
constexpr index_t attention_pad = 32;

/// Blocks of at most this many query rows (decoding, GQA groups) read K in place by dot products
/// (AttentionTile::k); larger blocks stage it transposed, once per tile for all their rows.
constexpr index_t dot_rows = 8;

/// One K/V tile of attention for a block of query rows, in place on the block's running state:
///   s = q k^T (rows x bk), row r masked past its first valid[r] keys; per row the tile's (m, l)
///   and weights (left in s), merged into state[r]; o = fa * o + fb * (s v).
/// q (rows x D, pre-scaled), o (rows x dvp) and s (rows x bk) row-major and contiguous; the keys
/// either as k (nk rows of D, row stride ldk: K in place, dot products) or, when k is null, as kt
/// (D x bk: K transposed, broadcast products); v: nk rows of dvp values, row stride ldv. bk and dvp
/// are multiples of attention_pad; nk <= bk keys are valid.
template <class T>
struct AttentionTile {
  const T* q;
  const T* kt;
  const T* v;
  T* s;
  T* o;
  SoftmaxState<T>* state;
  const index_t* valid;
  index_t rows, nk, bk, D, dvp;
  const T* k = nullptr;
  index_t ldk = 0;
  index_t ldv = 0;
};

void run(AttentionTile<float>& tile);
void run(AttentionTile<double>& tile);

/// Whole rows: row r of x at x + r * ldx, cols elements each, contiguous. softmax and log_softmax
/// write row r of y at y + r * ldy (y may be x); logsumexp writes out[r * ldout]. With `stream`,
/// rows longer than one tile (512 elements) take the two passes and write with non-temporal stores.
template <class T>
struct RowBlock {
  RowOp op;
  const T* x;
  index_t ldx;
  T* y;
  index_t ldy;
  T* out;
  index_t ldout;
  index_t rows, cols;
  bool stream = false;
  /// Scratch of weights_elements(cols) elements, or null (see buffered_weights_bytes).
  T* weights = nullptr;
};

void run(RowBlock<float>& block);
void run(RowBlock<double>& block);

/// softmax computes each weight exp(x - max) once: rows up to this many bytes, in calls without
/// non-temporal stores, keep their weights in y and rescale them in place (x and y stay in the
/// core's cache between the passes).
constexpr index_t stored_weights_bytes = index_t(1) << 19;

/// Other softmax rows of more than one tile, up to this many bytes, keep them in RowBlock::weights
/// when it has one (softmax.hpp gives every host team one, in its scratch). Longer rows, and rows
/// without one, compute the weights again in the write pass (one exp more per element).
constexpr index_t buffered_weights_bytes = index_t(1) << 23;

/// The elements of a row's weights in RowBlock::weights (of cols each): the weights and one
/// maximum per tile.
constexpr index_t weights_elements(index_t cols) { return cols + cols / row_tile + 1; }

/// softmax and log_softmax calls whose output has at least this many bytes write their rows of more
/// than one tile (and the chunks of split rows) in two passes, the second with non-temporal stores:
/// an output that size leaves the cache before it is read again, and a plain store first reads the
/// line it writes (a third of the memory traffic of the pass).
constexpr index_t stream_bytes = index_t(1) << 26;

/// Asks the memory system for [p, p + bytes) ahead of use, one request per 64-byte line.
inline void prefetch(const void* p, index_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  const char* c = static_cast<const char*>(p);
  for (index_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i);
#else
  (void)p, (void)bytes;
#endif
}

/// Shorthands for the row steps.
template <class T>
SoftmaxState<T> row_step(RowStep step, const T* x, T* y, index_t n, T a = T(0), T b = T(0), bool stream = false) {
  RowTask<T> task{step, x, y, n, a, b, SoftmaxState<T>::identity(), stream};
  run(task);
  return task.result;
}

}  // namespace kflash::impl::host
