// The host kernels of softmax's and log_softmax's gradients on a contiguous chunk of a row: its sum
// (Σ dy·y, Σ dy) by tiles of HostTraits::tile elements, each tile summed over vector lanes and the
// tiles' sums compensated, as the portable schedule sums them; then the write pass (through
// non-temporal stores for outputs that leave the cache anyway).
#pragma once

#include "vector.hpp"

#include <kflash/impl/host/host_kernels.hpp>

#include <cstdint>

namespace kflash::impl::host::internal {

/// B: the rows' storage, widened to T as it loads (Operand).
template <class T, int VB, class B = T>
SoftmaxState<T> grad_sum(RowOp op, const B* a, const B* b, index_t n) {
  using V = Vec<T, VB>;
  using Load = Operand<T, VB, B>;
  constexpr index_t W = VB / index_t(sizeof(T)), U = 4;  // U accumulators: chains of adds overlap
  typename V::type one;
  V::fill(one, T(1));
  SoftmaxState<T> sum = SoftmaxState<T>::identity();
  for (index_t t0 = 0; t0 < n; t0 += HostTraits::tile) {
    const index_t te = t0 + HostTraits::tile < n ? t0 + HostTraits::tile : n;
    typename V::type acc[U], av, bv;
    for (index_t u = 0; u < U; ++u) V::zero(acc[u]);
    index_t j = t0;
    for (; j + U * W <= te; j += U * W)
      for (index_t u = 0; u < U; ++u) {
        Load::load(bv, b + j + u * W);
        if (op == RowOp::softmax) Load::load(av, a + j + u * W);
        V::fma(acc[u], op == RowOp::softmax ? av : one, bv);
      }
    for (index_t u = 1; u < U; ++u) V::fma(acc[0], one, acc[u]);
    T s = reduce_lanes<T, VB, AddOp>(acc[0]);
    for (; j < te; ++j) s += op == RowOp::softmax ? Load::element(a[j]) * Load::element(b[j]) : Load::element(b[j]);
    sum.add_term(s);
  }
  return sum;
}

/// dx over [0, n) in plain loops the compiler vectorises.
template <class T>
inline void grad_chunk(RowOp op, const T* a, const T* b, T* dx, index_t n, T s) {
  if (op == RowOp::softmax) {
    for (index_t j = 0; j < n; ++j) dx[j] = a[j] * (b[j] - s);
  } else {  // a = log_softmax's output <= 0 (up to its rounding)
    for (index_t j = 0; j < n; ++j) dx[j] = b[j] - exp_nonpositive(a[j]) * s;
  }
}

/// With `stream`, dx goes out through non-temporal stores: each group of `group` elements is
/// computed into an aligned buffer by the plain loops, then streamed from it, a and b prefetched
/// `ahead` elements in front (log_softmax's exp per element).
template <class T, int VB>
void write_grad(RowOp op, const T* a, const T* b, T* dx, index_t n, T s, bool stream) {
  using S = Stream<T, VB>;
  using V = Vec<T, VB>;
  constexpr index_t W = VB / index_t(sizeof(T)), group = StreamAhead<T, VB>::group, ahead = StreamAhead<T, VB>::ahead;
  if (!stream || !S::available) {
    grad_chunk(op, a, b, dx, n, s);
    return;
  }
  index_t j = 0;
  while (j < n && reinterpret_cast<std::uintptr_t>(dx + j) % VB != 0) ++j;
  grad_chunk(op, a, b, dx, j, s);
  alignas(VB) T out[group];
  typename V::type v;
  for (; j + group <= n; j += group) {
    if (j + ahead + group <= n) prefetch_lines(a + j + ahead, group), prefetch_lines(b + j + ahead, group);
    grad_chunk(op, a + j, b + j, out, group, s);
    for (index_t l = 0; l < group; l += W) {
      V::load(v, out + l);
      S::store(dx + j + l, v);
    }
  }
  grad_chunk(op, a + j, b + j, dx + j, n - j, s);
  S::fence();
}

}  // namespace kflash::impl::host::internal
