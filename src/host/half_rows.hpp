// The host kernels of 16-bit rows (kflash::bhalf_t, kflash::half_t by their bits): the float row
// passes read them widened as they load and round each output once, to nearest even (GUIDE §9;
// half_vectors.hpp). The gradients' write passes go through a float buffer in the L1 cache
// instead, a block at a time.
#pragma once

#include "half_vectors.hpp"
#include "row_grads.hpp"
#include "row_passes.hpp"

#include <cstdint>

namespace kflash::impl::host::internal {

constexpr index_t block16 = HostTraits::widened_block;

/// The accuracy of softmax's weights over rows stored as B, all of whose outputs are B: bf16's
/// half ulp allows ExpAccuracy::output_bf16, fp16's ExpAccuracy::output16.
template <int VB, class B>
constexpr ExpAccuracy rows16_accuracy =
    exp_accuracy<float, VB, std::is_same<B, Bfloat16>::value ? ExpAccuracy::output_bf16 : ExpAccuracy::output16>;

template <int VB>
SoftmaxState<float> row_state16(Storage16 f, const std::uint16_t* x, index_t n) {
  return with_storage(f, [&](auto* storage) {
    using B = std::remove_pointer_t<decltype(storage)>;
    return row_state<float, VB>(reinterpret_cast<const B*>(x), n);
  });
}

/// softmax's or log_softmax's write pass over a 16-bit chunk (its outputs are all 16-bit: softmax's
/// weights by the exp they allow); with `stream`, through non-temporal stores.
template <int VB>
void write_row16(Storage16 f, RowOp op, const std::uint16_t* x, std::uint16_t* y, index_t n,
                 const SoftmaxNormalizer<float>& norm, bool stream) {
  with_storage(f, [&](auto* storage) {
    using B = std::remove_pointer_t<decltype(storage)>;
    constexpr ExpAccuracy A = rows16_accuracy<VB, B>;
    write_row<float, VB, B, A>(op, reinterpret_cast<const B*>(x), reinterpret_cast<B*>(y), n, norm, stream);
  });
}

/// The sum of softmax's or log_softmax's gradient over a 16-bit chunk, widened as it loads.
template <int VB>
SoftmaxState<float> grad_sum16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, index_t n) {
  if (f == Storage16::bf16) {
    return grad_sum<float, VB, Bfloat16>(op, reinterpret_cast<const Bfloat16*>(a), reinterpret_cast<const Bfloat16*>(b),
                                         n);
  }
  return grad_sum<float, VB, Float16>(op, reinterpret_cast<const Float16*>(a), reinterpret_cast<const Float16*>(b), n);
}

/// The gradient's write pass over a 16-bit chunk, block by block (dx may be b); with `stream`, each
/// block rounded through non-temporal stores.
template <int VB>
void write_grad16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* dx, index_t n,
                  float s, bool stream) {
  alignas(64) float ab[block16], bb[block16];
  for (index_t i = 0; i < n; i += block16) {
    const index_t m = n - i < block16 ? n - i : block16;
    widen16<VB>(f, a + i, ab, m);
    widen16<VB>(f, b + i, bb, m);
    grad_chunk(op, ab, bb, bb, m, s);
    if (!stream) {
      narrow16<VB>(f, bb, dx + i, m);
      continue;
    }
    with_storage(f, [&](auto* storage) {
      using B = std::remove_pointer_t<decltype(storage)>;
      write_pass<float, VB>(bb, reinterpret_cast<B*>(dx + i), m, Rounded<float>{}, true, false);
    });
  }
  if (stream) Stream<float, VB>::fence();
}

/// write_scaled_exp over a 16-bit chunk (y may be x).
template <int VB>
void write_scaled_exp16(Storage16 f, const std::uint16_t* x, std::uint16_t* y, index_t n, float shift, float scale,
                        float offset) {
  with_storage(f, [&](auto* storage) {
    using B = std::remove_pointer_t<decltype(storage)>;
    write_scaled_exp<float, VB>(reinterpret_cast<const B*>(x), reinterpret_cast<B*>(y), n, shift, scale, offset);
  });
}

/// write_lse_grad over a 16-bit chunk (dx may be x).
template <int VB>
void write_lse_grad16(Storage16 f, const std::uint16_t* x, std::uint16_t* dx, index_t n, float lse, float dlse,
                      bool stream) {
  with_storage(f, [&](auto* storage) {
    using B = std::remove_pointer_t<decltype(storage)>;
    write_lse_grad<float, VB>(reinterpret_cast<const B*>(x), reinterpret_cast<B*>(dx), n, lse, dlse, stream);
  });
}

/// Whole 16-bit rows (RowBlock16); softmax's weights by the exp its 16-bit outputs allow.
template <int VB>
void run_rows16(const RowBlock16& b) {
  const index_t n = b.cols;
  auto store_lse = [&](index_t r, float lse) {
    if (b.out != nullptr) b.out[r * b.ldout] = lse;
    else narrow16<VB>(b.format, &lse, b.out16 + r * b.ldout, 1);
  };
  float lse[block16];
  with_storage(b.format, [&](auto* storage) {  // through run_rows' passes, read widened as they load
    using B = std::remove_pointer_t<decltype(storage)>;
    constexpr ExpAccuracy A = rows16_accuracy<VB, B>;
    const bool stored = b.op == RowOp::softmax && b.buffer != nullptr && b.buffer_elements >= weights_elements(n);
    for (index_t r0 = 0; r0 < b.rows; r0 += block16) {
      const index_t g = b.rows - r0 < block16 ? b.rows - r0 : block16;
      const RowBlock<float, B> rows{b.op, reinterpret_cast<const B*>(b.x + r0 * b.ldx), b.ldx,
                                    b.y != nullptr ? reinterpret_cast<B*>(b.y + r0 * b.ldy) : nullptr, b.ldy,
                                    lse, 1, g, n, b.stream, stored ? WeightsAt::scratch : WeightsAt::recomputed,
                                    b.buffer};
      run_rows<float, VB, B, A>(rows);
      if (b.op == RowOp::logsumexp)
        for (index_t i = 0; i < g; ++i) store_lse(r0 + i, lse[i]);
    }
  });
}

/// Cross-entropy's statistics of 16-bit rows (run_logit_rows' layout), read widened as they load.
template <int VB>
void run_logit_rows16(Storage16 f, const std::uint16_t* x, index_t ldx, LogitStats<float>* out, index_t ldout,
                      index_t rows, index_t n, bool sum_logits) {
  with_storage(f, [&](auto* storage) {
    using B = std::remove_pointer_t<decltype(storage)>;
    run_logit_rows<float, VB>(
        LogitBlock<float, B>{reinterpret_cast<const B*>(x), ldx, out, ldout, rows, n, sum_logits});
  });
}

}  // namespace kflash::impl::host::internal
