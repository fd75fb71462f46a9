// The host schedule of the row operations' gradients on contiguous rows, through the compiled host
// kernels. softmax's and log_softmax's: rows of at most HostTraits::min_chunk elements a work item
// each (the sum, then the write while the row is in the cache); longer rows in chunks of that many,
// every chunk's sum first, each row's sums merged once in chunk order, then each chunk's write. The
// chunks depend on the row's length alone: the same bits for any number of threads. logsumexp's
// needs no sum: one write pass, a work item per row or chunk.
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/row_backward.hpp>
#include <kflash/impl/workspace.hpp>

namespace kflash::impl::host {

template <RowGrad Op, class ExecSpace, class ARows, class BRows, class DXRows>
void run_host_row_backward(const ExecSpace& exec, const ARows& a, const BRows& b, const DXRows& dx,
                           const char* label) {
  static_assert(Op != RowGrad::logsumexp, "kflash: logsumexp's gradient takes run_host_lse_backward");
  using S = std::remove_cv_t<typename decltype(a.v)::value_type>;  // storage: T, or 16 bits
  using T = arith_t<S>;
  constexpr RowOp op = Op == RowGrad::softmax ? RowOp::softmax : RowOp::log_softmax;
  const index_t rows = a.rows(), cols = a.cols();
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;
  constexpr index_t chunk = HostTraits::min_chunk;
  // Outputs that leave the cache before they are read again go out through non-temporal stores
  // (as the forward's), which do not read each line of dx before writing it.
  const bool stream = rows * cols * index_t(sizeof(S)) >= HostTraits::stream_bytes;
  if (cols <= chunk) {
    Kokkos::parallel_for(label, Range(exec, 0, rows), [=](index_t r) {
      const T s = compensated_value(grad_sum(op, a.row(r), b.row(r), cols));
      write_grad(op, a.row(r), b.row(r), dx.row(r), cols, s, stream);
    });
    return;
  }
  const index_t chunks = (cols + chunk - 1) / chunk;
  const CachedWorkspace<Kokkos::HostSpace> workspace(
      exec, sizeof(SoftmaxState<T>) * std::size_t(rows * chunks) + sizeof(T) * std::size_t(rows),
      "kflash::row gradient workspace");
  SoftmaxState<T>* sums = workspace.template at<SoftmaxState<T>>(0);
  T* row_sum = reinterpret_cast<T*>(sums + rows * chunks);  // each row's merged sum, once
  const auto extent = [=](index_t c) { return c + 1 < chunks ? chunk : cols - c * chunk; };
  Kokkos::parallel_for(label, Range(exec, 0, rows * chunks), [=](index_t item) {
    const index_t r = item / chunks, c = item % chunks;
    sums[item] = grad_sum(op, a.row(r) + c * chunk, b.row(r) + c * chunk, extent(c));
  });
  Kokkos::parallel_for(label, Range(exec, 0, rows), [=](index_t r) {
    SoftmaxState<T> sum = sums[r * chunks];
    for (index_t k = 1; k < chunks; ++k) sum.merge(sums[r * chunks + k]);
    row_sum[r] = compensated_value(sum);
  });
  Kokkos::parallel_for(label, Range(exec, 0, rows * chunks), [=](index_t item) {
    const index_t r = item / chunks, c = item % chunks;
    write_grad(op, a.row(r) + c * chunk, b.row(r) + c * chunk, dx.row(r) + c * chunk, extent(c), row_sum[r],
               stream);
  });
  exec.fence();  // the workspace must outlive the kernels
}

/// logsumexp's gradient dx = dlse · exp(x − lse) (dx may be x). A row whose lse is not finite
/// (a row of −inf, +inf or NaN) takes lse_grad_element's special cases element by element.
template <class ExecSpace, class XRows, class DXRows, class Lse, class DLse>
void run_host_lse_backward(const ExecSpace& exec, const XRows& x, const DXRows& dx, const Lse& lse, const DLse& dlse,
                           const char* label) {
  using S = std::remove_cv_t<typename decltype(x.v)::value_type>;  // storage: T, or 16 bits
  using T = arith_t<S>;
  const index_t rows = x.rows(), cols = x.cols();
  constexpr index_t chunk = HostTraits::min_chunk;
  const index_t chunks = (cols + chunk - 1) / chunk;
  const bool stream = rows * cols * index_t(sizeof(S)) >= HostTraits::stream_bytes;
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;
  Kokkos::parallel_for(label, Range(exec, 0, rows * chunks), [=](index_t item) {
    const index_t r = item / chunks, c0 = item % chunks * chunk, n = cols - c0 < chunk ? cols - c0 : chunk;
    const T m = widen(lse(r, 0)), g = widen(dlse(r, 0));
    const S* in = x.row(r) + c0;
    S* out = dx.row(r) + c0;
    if (m - m == T(0)) {
      write_lse_grad(in, out, n, m, g, stream);
    } else {
      for (index_t c = 0; c < n; ++c) out[c] = store_as<S>(lse_grad_element(T(widen(in[c])), m, g));
    }
  });
}

}  // namespace kflash::impl::host
