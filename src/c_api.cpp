// The C interface (include/kflash/kflash.h): plain arrays become unmanaged strided Views in the
// memory space the caller names, and go through the C++ calls; exceptions become status codes and a
// per-thread message. This file: Kokkos' lifetime, the build's facts and the row calls with their
// gradients (attention in c_attention.cpp and c_attention_backward.cpp, cross-entropy in
// c_cross_entropy.cpp).
#include <kflash/kflash.h>
#include <kflash/kflash.hpp>

#include "c_calls.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

std::string& kflash::c_interface::last_error() {
  thread_local std::string message;
  return message;
}

namespace {

bool initialized_here = false;

std::string extents(std::int64_t rows, std::int64_t cols) {
  return "rows = " + std::to_string(rows) + ", cols = " + std::to_string(cols);
}

/// The checks of one array of rows: not null unless empty, and rows that do not overlap.
void check_rows(const char* function, const char* name, const void* p, std::int64_t rows, std::int64_t cols,
                std::int64_t row_stride) {
  if (p == nullptr && rows > 0 && cols > 0)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, std::string(name) + " is NULL (" + extents(rows, cols) + ")");
  if (rows > 1 && row_stride < cols)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         std::string(name) + "_row_stride = " + std::to_string(row_stride) + " is less than cols (" +
             extents(rows, cols) + ")");
}

void check_extents(const char* function, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, "negative extents (" + extents(rows, cols) + ")");
}

/// An unmanaged (rows, cols) View of p with the given row stride in `Exec`'s memory.
template <class Exec, class T>
auto rows_view(T* p, std::int64_t rows, std::int64_t cols, std::int64_t row_stride) {
  using View = Kokkos::View<T**, Kokkos::LayoutStride, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const std::int64_t stride = row_stride > cols ? row_stride : cols;  // one row: any stride
  return View(p, Kokkos::LayoutStride(std::size_t(rows), std::size_t(stride), std::size_t(cols), 1));
}

/// Y: y's element type (logsumexp: out's, float for 16-bit rows; otherwise T).
template <kflash::impl::RowOp Op, class T, class Y>
kflash_status row_call(const char* function, kflash_memory memory, std::int64_t rows, std::int64_t cols, const T* x,
                       std::int64_t x_row_stride, Y* y, std::int64_t y_row_stride) {
  return guarded(function, [&] {
    check_memory(function, memory);
    check_extents(function, rows, cols);
    check_rows(function, "x", x, rows, cols, x_row_stride);
    if constexpr (Op == kflash::impl::RowOp::logsumexp) {
      if (y == nullptr && rows > 0) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, "out is NULL (" + extents(rows, cols) + ")");
    } else {
      check_rows(function, "y", y, rows, cols, y_row_stride);
    }
    if (rows == 0 || (cols == 0 && Op != kflash::impl::RowOp::logsumexp)) return;
    on_memory(function, memory, [&](const auto& exec) {
      using Exec = std::decay_t<decltype(exec)>;
      const auto xv = rows_view<Exec>(x, rows, cols, x_row_stride);
      if constexpr (Op == kflash::impl::RowOp::logsumexp) {
        const Kokkos::View<Y*, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> out(
            y, std::size_t(rows));
        kflash::logsumexp(exec, xv, out);
      } else if constexpr (Op == kflash::impl::RowOp::softmax) {
        kflash::softmax(exec, xv, rows_view<Exec>(y, rows, cols, y_row_stride));
      } else {
        kflash::log_softmax(exec, xv, rows_view<Exec>(y, rows, cols, y_row_stride));
      }
      exec.fence();
    });
  });
}

/// The row gradients: a and b are y and dy (softmax, log_softmax), or x and nothing (logsumexp, whose
/// lse and dlse are one value per row, of type L: T, or float for 16-bit rows).
template <kflash::impl::RowGrad Op, class T, class L = T>
kflash_status row_grad_call(const char* function, kflash_memory memory, std::int64_t rows, std::int64_t cols,
                            const T* a, std::int64_t a_row_stride, const T* b, std::int64_t b_row_stride, const L* lse,
                            const L* dlse, T* dx, std::int64_t dx_row_stride) {
  constexpr bool by_lse = Op == kflash::impl::RowGrad::logsumexp;
  return guarded(function, [&] {
    check_memory(function, memory);
    check_extents(function, rows, cols);
    check_rows(function, by_lse ? "x" : "y", a, rows, cols, a_row_stride);
    if constexpr (by_lse) {
      if ((lse == nullptr || dlse == nullptr) && rows > 0)
        fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
             std::string(lse == nullptr ? "lse" : "dlse") + " is NULL (" + extents(rows, cols) + ")");
    } else {
      check_rows(function, "dy", b, rows, cols, b_row_stride);
    }
    check_rows(function, "dx", dx, rows, cols, dx_row_stride);
    if (rows == 0 || cols == 0) return;
    on_memory(function, memory, [&](const auto& exec) {
      using Exec = std::decay_t<decltype(exec)>;
      using Vector = Kokkos::View<const L*, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
      const auto av = rows_view<Exec>(a, rows, cols, a_row_stride);
      const auto dxv = rows_view<Exec>(dx, rows, cols, dx_row_stride);
      if constexpr (by_lse) {
        kflash::logsumexp_backward(exec, av, Vector(lse, std::size_t(rows)), Vector(dlse, std::size_t(rows)), dxv);
      } else if constexpr (Op == kflash::impl::RowGrad::softmax) {
        kflash::softmax_backward(exec, av, rows_view<Exec>(b, rows, cols, b_row_stride), dxv);
      } else {
        kflash::log_softmax_backward(exec, av, rows_view<Exec>(b, rows, cols, b_row_stride), dxv);
      }
      exec.fence();
    });
  });
}

}  // namespace

extern "C" {

kflash_status kflash_initialize(void) {
  using kflash::c_interface::last_error;
  last_error().clear();
  try {
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      initialized_here = true;
    }
    return KFLASH_SUCCESS;
  } catch (const std::exception& e) {
    last_error() = std::string("kflash_initialize: ") + e.what();
    return KFLASH_ERROR_INTERNAL;
  }
}

kflash_status kflash_finalize(void) {
  using kflash::c_interface::last_error;
  last_error().clear();
  try {
    if (initialized_here && Kokkos::is_initialized()) Kokkos::finalize();
    initialized_here = false;
    return KFLASH_SUCCESS;
  } catch (const std::exception& e) {
    last_error() = std::string("kflash_finalize: ") + e.what();
    return KFLASH_ERROR_INTERNAL;
  }
}

const char* kflash_last_error(void) { return kflash::c_interface::last_error().c_str(); }
const char* kflash_version(void) { return KFLASH_VERSION_STRING; }
const char* kflash_backends(void) { return KFLASH_BACKENDS; }
int kflash_has_device(void) { return KFLASH_HAS_CUDA; }

// C: the C element type; T: the C++ one it holds (16-bit rows: kflash::bhalf_t or half_t, by their
// bits); Out: logsumexp's output type.
#define KFLASH_IMPL_ROW_CALLS(suffix, C, T, Out)                                                                     \
  kflash_status kflash_softmax_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const C* x,                \
                                        int64_t x_row_stride, C* y, int64_t y_row_stride) {                          \
    return row_call<kflash::impl::RowOp::softmax>("kflash_softmax_" #suffix, memory, rows, cols,                    \
                                                  reinterpret_cast<const T*>(x), x_row_stride,                       \
                                                  reinterpret_cast<T*>(y), y_row_stride);                            \
  }                                                                                                                  \
  kflash_status kflash_log_softmax_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const C* x,            \
                                            int64_t x_row_stride, C* y, int64_t y_row_stride) {                      \
    return row_call<kflash::impl::RowOp::log_softmax>("kflash_log_softmax_" #suffix, memory, rows, cols,            \
                                                      reinterpret_cast<const T*>(x), x_row_stride,                   \
                                                      reinterpret_cast<T*>(y), y_row_stride);                        \
  }                                                                                                                  \
  kflash_status kflash_logsumexp_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const C* x,              \
                                          int64_t x_row_stride, Out* out) {                                          \
    return row_call<kflash::impl::RowOp::logsumexp>("kflash_logsumexp_" #suffix, memory, rows, cols,                \
                                                    reinterpret_cast<const T*>(x), x_row_stride, out, 0);            \
  }

KFLASH_IMPL_ROW_CALLS(f32, float, float, float)
KFLASH_IMPL_ROW_CALLS(f64, double, double, double)
KFLASH_IMPL_ROW_CALLS(bf16, uint16_t, kflash::bhalf_t, float)
KFLASH_IMPL_ROW_CALLS(f16, uint16_t, kflash::half_t, float)
#undef KFLASH_IMPL_ROW_CALLS

// C: the C element type; T: the C++ one it holds; L: the type of logsumexp's lse and dlse.
#define KFLASH_IMPL_ROW_GRAD_CALLS(suffix, C, T, L)                                                                   \
  kflash_status kflash_softmax_backward_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const C* y,        \
                                                 int64_t y_row_stride, const C* dy, int64_t dy_row_stride, C* dx,     \
                                                 int64_t dx_row_stride) {                                             \
    return row_grad_call<kflash::impl::RowGrad::softmax, T, L>(                                                       \
        "kflash_softmax_backward_" #suffix, memory, rows, cols, reinterpret_cast<const T*>(y), y_row_stride,          \
        reinterpret_cast<const T*>(dy), dy_row_stride, nullptr, nullptr, reinterpret_cast<T*>(dx), dx_row_stride);    \
  }                                                                                                                   \
  kflash_status kflash_log_softmax_backward_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const C* y,    \
                                                     int64_t y_row_stride, const C* dy, int64_t dy_row_stride, C* dx, \
                                                     int64_t dx_row_stride) {                                         \
    return row_grad_call<kflash::impl::RowGrad::log_softmax, T, L>(                                                   \
        "kflash_log_softmax_backward_" #suffix, memory, rows, cols, reinterpret_cast<const T*>(y), y_row_stride,      \
        reinterpret_cast<const T*>(dy), dy_row_stride, nullptr, nullptr, reinterpret_cast<T*>(dx), dx_row_stride);    \
  }                                                                                                                   \
  kflash_status kflash_logsumexp_backward_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const C* x,      \
                                                   int64_t x_row_stride, const L* lse, const L* dlse, C* dx,          \
                                                   int64_t dx_row_stride) {                                           \
    return row_grad_call<kflash::impl::RowGrad::logsumexp, T, L>(                                                     \
        "kflash_logsumexp_backward_" #suffix, memory, rows, cols, reinterpret_cast<const T*>(x), x_row_stride,        \
        nullptr, 0, lse, dlse, reinterpret_cast<T*>(dx), dx_row_stride);                                              \
  }

KFLASH_IMPL_ROW_GRAD_CALLS(f32, float, float, float)
KFLASH_IMPL_ROW_GRAD_CALLS(f64, double, double, double)
KFLASH_IMPL_ROW_GRAD_CALLS(bf16, uint16_t, kflash::bhalf_t, float)
KFLASH_IMPL_ROW_GRAD_CALLS(f16, uint16_t, kflash::half_t, float)
#undef KFLASH_IMPL_ROW_GRAD_CALLS

}  // extern "C"
