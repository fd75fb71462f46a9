// The C interface (include/kflash/kflash.h): plain arrays become unmanaged strided Views in the
// memory space the caller names, and go through the C++ calls; exceptions become status codes and a
// per-thread message.
#include <kflash/kflash.h>
#include <kflash/kflash.hpp>

#include <exception>
#include <stdexcept>
#include <string>

namespace {

thread_local std::string last_error;
bool initialized_here = false;

/// Thrown by the checks below: the status and the message to leave.
struct Failure {
  kflash_status status;
  std::string message;
};

[[noreturn]] void fail(kflash_status status, const char* function, const std::string& what) {
  throw Failure{status, std::string(function) + ": " + what};
}

/// Runs f, turning what it throws into a status and the thread's message.
template <class F>
kflash_status guarded(const char* function, F&& f) {
  last_error.clear();
  try {
    if (!Kokkos::is_initialized())
      fail(KFLASH_ERROR_NOT_INITIALIZED, function, "Kokkos is not initialized (call kflash_initialize first)");
    f();
    return KFLASH_SUCCESS;
  } catch (const Failure& e) {
    last_error = e.message;
    return e.status;
  } catch (const std::invalid_argument& e) {
    last_error = e.what();
    return KFLASH_ERROR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    last_error = std::string(function) + ": " + e.what();
    return KFLASH_ERROR_INTERNAL;
  } catch (...) {
    last_error = std::string(function) + ": an unknown exception";
    return KFLASH_ERROR_INTERNAL;
  }
}

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

/// A memory kind this build can run on (checked first, so that empty calls refuse it too).
void check_memory(const char* function, kflash_memory memory) {
  if (memory != KFLASH_MEMORY_HOST && memory != KFLASH_MEMORY_DEVICE)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, "memory = " + std::to_string(int(memory)) + " is not a kflash_memory");
  if (memory == KFLASH_MEMORY_DEVICE && !KFLASH_HAS_CUDA)
    fail(KFLASH_ERROR_UNSUPPORTED, function, "device memory, but kflash was built without a device backend");
}

/// Calls f(exec) on the execution space of `memory` (a kind check_memory accepted).
template <class F>
void on_memory(kflash_memory memory, F&& f) {
#if KFLASH_HAS_CUDA
  if (memory == KFLASH_MEMORY_DEVICE) {
    f(Kokkos::DefaultExecutionSpace());
    return;
  }
#endif
  (void)memory;
  f(Kokkos::DefaultHostExecutionSpace());
}

/// An unmanaged (rows, cols) View of p with the given row stride in `Exec`'s memory.
template <class Exec, class T>
auto rows_view(T* p, std::int64_t rows, std::int64_t cols, std::int64_t row_stride) {
  using View = Kokkos::View<T**, Kokkos::LayoutStride, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const std::int64_t stride = row_stride > cols ? row_stride : cols;  // one row: any stride
  return View(p, Kokkos::LayoutStride(std::size_t(rows), std::size_t(stride), std::size_t(cols), 1));
}

template <kflash::impl::RowOp Op, class T>
kflash_status row_call(const char* function, kflash_memory memory, std::int64_t rows, std::int64_t cols, const T* x,
                       std::int64_t x_row_stride, T* y, std::int64_t y_row_stride) {
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
    on_memory(memory, [&](const auto& exec) {
      using Exec = std::decay_t<decltype(exec)>;
      const auto xv = rows_view<Exec>(x, rows, cols, x_row_stride);
      if constexpr (Op == kflash::impl::RowOp::logsumexp) {
        const Kokkos::View<T*, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> out(
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

}  // namespace

extern "C" {

kflash_status kflash_initialize(void) {
  last_error.clear();
  try {
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      initialized_here = true;
    }
    return KFLASH_SUCCESS;
  } catch (const std::exception& e) {
    last_error = std::string("kflash_initialize: ") + e.what();
    return KFLASH_ERROR_INTERNAL;
  }
}

kflash_status kflash_finalize(void) {
  last_error.clear();
  try {
    if (initialized_here && Kokkos::is_initialized()) Kokkos::finalize();
    initialized_here = false;
    return KFLASH_SUCCESS;
  } catch (const std::exception& e) {
    last_error = std::string("kflash_finalize: ") + e.what();
    return KFLASH_ERROR_INTERNAL;
  }
}

const char* kflash_last_error(void) { return last_error.c_str(); }
const char* kflash_version(void) { return KFLASH_VERSION_STRING; }
const char* kflash_backends(void) { return KFLASH_BACKENDS; }
int kflash_has_device(void) { return KFLASH_HAS_CUDA; }

#define KFLASH_IMPL_ROW_CALLS(suffix, T)                                                                              \
  kflash_status kflash_softmax_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const T* x,                \
                                        int64_t x_row_stride, T* y, int64_t y_row_stride) {                          \
    return row_call<kflash::impl::RowOp::softmax>("kflash_softmax_" #suffix, memory, rows, cols, x, x_row_stride, y, \
                                                  y_row_stride);                                                     \
  }                                                                                                                  \
  kflash_status kflash_log_softmax_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const T* x,            \
                                            int64_t x_row_stride, T* y, int64_t y_row_stride) {                      \
    return row_call<kflash::impl::RowOp::log_softmax>("kflash_log_softmax_" #suffix, memory, rows, cols, x,         \
                                                      x_row_stride, y, y_row_stride);                                \
  }                                                                                                                  \
  kflash_status kflash_logsumexp_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const T* x,              \
                                          int64_t x_row_stride, T* out) {                                            \
    return row_call<kflash::impl::RowOp::logsumexp>("kflash_logsumexp_" #suffix, memory, rows, cols, x,             \
                                                    x_row_stride, out, 0);                                           \
  }

KFLASH_IMPL_ROW_CALLS(f32, float)
KFLASH_IMPL_ROW_CALLS(f64, double)
#undef KFLASH_IMPL_ROW_CALLS

}  // extern "C"
