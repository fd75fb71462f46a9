// The host schedule of softmax's and log_softmax's gradients on contiguous rows, through the
// compiled host kernels: rows of at most HostTraits::min_chunk elements a work item each (the sum,
// then the write while the row is in the cache); longer rows in chunks of that many, every chunk's
// sum first, each row's sums merged once in chunk order, then each chunk's write. The chunks depend on
// the row's length alone: the same bits for any number of threads.
#pragma once

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/schedule/row_backward.hpp>
#include <kflash/impl/workspace.hpp>

namespace kflash::impl::host {

template <RowGrad Op, class ExecSpace, class ARows, class BRows, class DXRows>
void run_host_row_backward(const ExecSpace& exec, const ARows& a, const BRows& b, const DXRows& dx,
                           const char* label) {
  static_assert(Op != RowGrad::logsumexp, "kflash: logsumexp's gradient takes the portable schedule");
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

}  // namespace kflash::impl::host
