// The C interface (include/kflash/kflash.h): plain arrays become unmanaged strided Views in the
// memory space the caller names, and go through the C++ calls; exceptions become status codes and a
// per-thread message.
#include <kflash/kflash.h>
#include <kflash/kflash.hpp>

#include "c_arrays.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

namespace {

thread_local std::string last_error;
bool initialized_here = false;

/// A message of the C++ layer with its "kflash::<call>: " prefix taken off: the C interface's
/// messages all begin with the C function's name.
std::string without_cpp_prefix(const std::string& message) {
  const std::size_t colon = message.find(": ");
  return message.rfind("kflash::", 0) == 0 && colon != std::string::npos ? message.substr(colon + 2) : message;
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
    last_error = std::string(function) + ": " + without_cpp_prefix(e.what());
    return KFLASH_ERROR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    last_error = std::string(function) + ": " + without_cpp_prefix(e.what());
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

/// Calls f(exec) on the execution space of `memory` (a kind check_memory accepted), where this host
/// thread may launch its kernels (KFLASH_ERROR_UNSUPPORTED where the Kokkos version does not allow it).
template <class F>
void on_memory(const char* function, kflash_memory memory, F&& f) {
  const auto run = [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    if (!kflash::impl::launches_from_this_thread<Exec>())
      fail(KFLASH_ERROR_UNSUPPORTED, function, kflash::impl::wrong_thread_message(Exec::name()));
    f(exec);
  };
#if KFLASH_HAS_CUDA
  if (memory == KFLASH_MEMORY_DEVICE) {
    run(Kokkos::DefaultExecutionSpace());
    return;
  }
#endif
  (void)memory;
  run(Kokkos::DefaultHostExecutionSpace());
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
    on_memory(function, memory, [&](const auto& exec) {
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

/// The row gradients: a and b are y and dy (softmax, log_softmax), or x and nothing (logsumexp, whose
/// lse and dlse are one value per row).
template <kflash::impl::RowGrad Op, class T>
kflash_status row_grad_call(const char* function, kflash_memory memory, std::int64_t rows, std::int64_t cols,
                            const T* a, std::int64_t a_row_stride, const T* b, std::int64_t b_row_stride,
                            const T* lse, const T* dlse, T* dx, std::int64_t dx_row_stride) {
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
      using Vector = Kokkos::View<const T*, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
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

/// The caller's options (the fields its struct_size covers; later fields keep their defaults), over
/// the defaults init sets. The first field after struct_size must be there.
template <class Options>
Options known_options(const char* function, const Options* given, void (*init)(Options*), const char* init_name,
                      std::size_t first_field) {
  Options o;
  init(&o);
  if (given == nullptr) return o;
  if (given->struct_size < sizeof(std::size_t) + first_field)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         "options->struct_size = " + std::to_string(given->struct_size) + ": set the options up with " + init_name);
  std::memcpy(static_cast<void*>(&o), given, std::min(given->struct_size, sizeof(o)));
  o.struct_size = sizeof(o);
  return o;
}

template <class Exec>
kflash::AttentionOptions cxx_options(const char* function, const kflash_attention_options& c) {
  kflash::AttentionOptions o;
  o.scale = c.scale;
  o.causal = c.causal != 0;
  o.window_left = c.window_left, o.window_right = c.window_right;
  o.softcap = c.softcap;
  o.alibi_slopes = option_view<Exec>(function, "options->alibi_slopes", c.alibi_slopes);
  o.sinks = option_view<Exec>(function, "options->sinks", c.sinks);
  o.bias = option_view<Exec>(function, "options->bias", c.bias);
  o.mask = option_view<Exec>(function, "options->mask", c.mask);
  o.cu_seqlens_q = option_view<Exec>(function, "options->cu_seqlens_q", c.cu_seqlens_q);
  o.cu_seqlens_k = option_view<Exec>(function, "options->cu_seqlens_k", c.cu_seqlens_k);
  o.block_table = option_view<Exec>(function, "options->block_table", c.block_table);
  o.cache_seqlens = option_view<Exec>(function, "options->cache_seqlens", c.cache_seqlens);
  switch (c.schedule) {
    case KFLASH_SCHEDULE_AUTOMATIC: o.schedule = kflash::AttentionSchedule::automatic; break;
    case KFLASH_SCHEDULE_PREFILL: o.schedule = kflash::AttentionSchedule::prefill; break;
    case KFLASH_SCHEDULE_SPLIT_KV: o.schedule = kflash::AttentionSchedule::split_kv; break;
    default:
      fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
           "options->schedule = " + std::to_string(int(c.schedule)) + " is not a kflash_schedule");
  }
  o.num_splits = c.num_splits;
  return o;
}

/// attention() with q, k, v, o of rank R (4 dense or paged, 3 varlen) and lse of rank R - 1.
template <class T, int R>
void attention_call(const char* function, kflash_memory memory, const kflash_array& q, const kflash_array* k,
                    const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                    const kflash_attention_options& options) {
  const kflash_array& kk = required<T>(function, "k", k, R);
  const kflash_array& vv = required<T>(function, "v", v, R);
  const kflash_array& oo = required<T>(function, "o", o, R, true);
  const bool has_lse = lse != nullptr && lse->data != nullptr;
  if (has_lse) required<T>(function, "lse", lse, R - 1, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::AttentionOptions opt = cxx_options<Exec>(function, options);
    const auto qv = strided_view<Exec, const T, R>(q);
    const auto kv = strided_view<Exec, const T, R>(kk);
    const auto vv_ = strided_view<Exec, const T, R>(vv);
    const auto ov = strided_view<Exec, T, R>(oo);
    if (has_lse) kflash::attention(exec, qv, kv, vv_, ov, opt, strided_view<Exec, T, R - 1>(*lse));
    else kflash::attention(exec, qv, kv, vv_, ov, opt);
    exec.fence();
  });
}

template <class T>
void attention_typed(const char* function, kflash_memory memory, const kflash_array* q, const kflash_array* k,
                     const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                     const kflash_attention_options& options) {
  if (q->rank == 4) attention_call<T, 4>(function, memory, *q, k, v, o, lse, options);
  else if (q->rank == 3) attention_call<T, 3>(function, memory, *q, k, v, o, lse, options);
  else
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         describe("q", *q) + " must have rank 4 (B, Hq, Nq, D), or 3 (total_q, Hq, D) with varlen options");
}

template <class T>
void merge_typed(const char* function, kflash_memory memory, const kflash_array* o_parts,
                 const kflash_array* lse_parts, const kflash_array* o, const kflash_array* lse) {
  const kflash_array& op = required<T>(function, "o_parts", o_parts, 5);
  const kflash_array& lp = required<T>(function, "lse_parts", lse_parts, 4);
  const kflash_array& ov = required<T>(function, "o", o, 4, true);
  const kflash_array& lv = required<T>(function, "lse", lse, 3, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    kflash::merge_attention(exec, strided_view<Exec, const T, 5>(op), strided_view<Exec, const T, 4>(lp),
                            strided_view<Exec, T, 4>(ov), strided_view<Exec, T, 3>(lv));
    exec.fence();
  });
}

/// The floating type of a call's first array: calls f(T()) for T float or double.
template <class F>
void on_float_type(const char* function, const char* name, const kflash_array* first, F&& f) {
  if (first == nullptr) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, std::string(name) + " is NULL");
  check_array(function, name, *first);
  if (first->dtype == KFLASH_FLOAT32) f(float());
  else if (first->dtype == KFLASH_FLOAT64) f(double());
  else
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe(name, *first) + " must be float32 or float64");
}


/// A rank-1 array of integer class targets: calls f(I()) for its type, int32 or int64.
template <class F>
void on_targets(const char* function, const kflash_array* targets, F&& f) {
  if (targets == nullptr) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, "targets is NULL");
  check_array(function, "targets", *targets);
  if (targets->rank != 1)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe("targets", *targets) + " must have rank 1 (rows)");
  if (targets->dtype == KFLASH_INT32) f(std::int32_t());
  else if (targets->dtype == KFLASH_INT64) f(std::int64_t());
  else fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe("targets", *targets) + " must be int32 or int64");
}

kflash::CrossEntropyOptions cxx_options(const kflash_cross_entropy_options& c) {
  kflash::CrossEntropyOptions o;
  o.ignore_index = c.ignore_index;
  o.label_smoothing = c.label_smoothing;
  o.z_loss = c.z_loss;
  return o;
}

/// Checks the logits, the targets and the options as the C++ calls do, then every target's range:
/// so that a call that fails has written nothing (the C++ forward writes the rows before the bad one).
template <class Exec, class Logits, class Targets>
void check_cross_entropy_input(const char* function, const Exec& exec, const Logits& logits, const Targets& targets,
                               const kflash::CrossEntropyOptions& options) {
  kflash::impl::check_logits_and_targets<Exec>(function, logits, targets, options);
  const auto total = kflash::impl::check_targets(exec, targets, kflash::impl::index_t(logits.extent(1)),
                                                 options.ignore_index, "kflash::cross_entropy check_targets");
  kflash::impl::require_targets_in(total, kflash::impl::index_t(logits.extent(0)),
                                   kflash::impl::index_t(logits.extent(1)),
                                   "'" + kflash::impl::describe("logits", logits) + "' extent 1", options.ignore_index,
                                   function, "nothing was written");
}

template <class T, class I>
void cross_entropy_typed(const char* function, kflash_memory memory, const kflash_array& logits,
                         const kflash_array& targets, const kflash_array* loss, const kflash_array* mean,
                         const kflash_cross_entropy_options& options) {
  const kflash_array& lg = required<T>(function, "logits", &logits, 2);
  const kflash_array& ls = required<T>(function, "loss", loss, 1, true);
  const bool has_mean = mean != nullptr && mean->data != nullptr;
  if (has_mean) {
    required<T>(function, "mean", mean, 1, true);
    if (mean->extent[0] != 1) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe("mean", *mean) + " must have one element");
  }
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::CrossEntropyOptions opt = cxx_options(options);
    const auto lv = strided_view<Exec, const T, 2>(lg);
    const auto tv = strided_view<Exec, const I, 1>(targets);
    const auto lossv = strided_view<Exec, T, 1>(ls);
    check_cross_entropy_input(function, exec, lv, tv, opt);
    if (has_mean) {
      const Kokkos::View<T, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> mv(
          static_cast<T*>(mean->data));
      kflash::impl::require_disjoint(function, "mean", mv, "logits", lv);
      kflash::impl::require_disjoint(function, "mean", mv, "targets", tv);
      kflash::impl::require_disjoint(function, "mean", mv, "loss", lossv);
      kflash::cross_entropy(exec, lv, tv, lossv, mv, opt);
    } else {
      kflash::cross_entropy(exec, lv, tv, lossv, opt);
    }
    exec.fence();
  });
}

template <class T, class I>
void cross_entropy_backward_typed(const char* function, kflash_memory memory, const kflash_array& logits,
                                  const kflash_array& targets, const kflash_array* dloss, const kflash_array* dlogits,
                                  const kflash_array* lse, const kflash_cross_entropy_options& options) {
  const kflash_array& lg = required<T>(function, "logits", &logits, 2);
  const kflash_array& dl = required<T>(function, "dloss", dloss, 1);
  const kflash_array& dg = required<T>(function, "dlogits", dlogits, 2, true);
  const bool has_lse = lse != nullptr && lse->data != nullptr;
  if (has_lse) required<T>(function, "lse", lse, 1);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::CrossEntropyOptions opt = cxx_options(options);
    const auto lv = strided_view<Exec, const T, 2>(lg);
    const auto tv = strided_view<Exec, const I, 1>(targets);
    const auto dlv = strided_view<Exec, const T, 1>(dl);
    const auto dgv = strided_view<Exec, T, 2>(dg);
    if (has_lse) kflash::cross_entropy_backward(exec, lv, tv, dlv, dgv, opt, strided_view<Exec, const T, 1>(*lse));
    else kflash::cross_entropy_backward(exec, lv, tv, dlv, dgv, opt);
    exec.fence();
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

#define KFLASH_IMPL_ROW_GRAD_CALLS(suffix, T)                                                                          \
  kflash_status kflash_softmax_backward_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const T* y,         \
                                                 int64_t y_row_stride, const T* dy, int64_t dy_row_stride, T* dx,      \
                                                 int64_t dx_row_stride) {                                              \
    return row_grad_call<kflash::impl::RowGrad::softmax, T>("kflash_softmax_backward_" #suffix, memory, rows, cols, y, \
                                                         y_row_stride, dy, dy_row_stride, nullptr, nullptr, dx,        \
                                                         dx_row_stride);                                               \
  }                                                                                                                    \
  kflash_status kflash_log_softmax_backward_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const T* y,     \
                                                     int64_t y_row_stride, const T* dy, int64_t dy_row_stride,         \
                                                     T* dx, int64_t dx_row_stride) {                                   \
    return row_grad_call<kflash::impl::RowGrad::log_softmax, T>("kflash_log_softmax_backward_" #suffix, memory, rows,  \
                                                             cols, y, y_row_stride, dy, dy_row_stride, nullptr,        \
                                                             nullptr, dx, dx_row_stride);                              \
  }                                                                                                                    \
  kflash_status kflash_logsumexp_backward_##suffix(kflash_memory memory, int64_t rows, int64_t cols, const T* x,       \
                                                   int64_t x_row_stride, const T* lse, const T* dlse, T* dx,           \
                                                   int64_t dx_row_stride) {                                            \
    return row_grad_call<kflash::impl::RowGrad::logsumexp, T>("kflash_logsumexp_backward_" #suffix, memory, rows,      \
                                                           cols, x, x_row_stride, nullptr, 0, lse, dlse, dx,           \
                                                           dx_row_stride);                                             \
  }

KFLASH_IMPL_ROW_GRAD_CALLS(f32, float)
KFLASH_IMPL_ROW_GRAD_CALLS(f64, double)
#undef KFLASH_IMPL_ROW_GRAD_CALLS

void kflash_attention_options_init(kflash_attention_options* options) {
  if (options == nullptr) return;
  *options = kflash_attention_options{};
  options->struct_size = sizeof(kflash_attention_options);
  options->window_left = options->window_right = -1;
  options->schedule = KFLASH_SCHEDULE_AUTOMATIC;
}

kflash_status kflash_attention(kflash_memory memory, const kflash_array* q, const kflash_array* k,
                               const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                               const kflash_attention_options* options) {
  const char* fn = "kflash_attention";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    const kflash_attention_options known =
        known_options(fn, options, kflash_attention_options_init, "kflash_attention_options_init", sizeof(double));
    on_float_type(fn, "q", q, [&](auto t) { attention_typed<decltype(t)>(fn, memory, q, k, v, o, lse, known); });
  });
}

kflash_status kflash_merge_attention(kflash_memory memory, const kflash_array* o_parts,
                                     const kflash_array* lse_parts, const kflash_array* o,
                                     const kflash_array* lse) {
  const char* fn = "kflash_merge_attention";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    on_float_type(fn, "o_parts", o_parts,
                  [&](auto t) { merge_typed<decltype(t)>(fn, memory, o_parts, lse_parts, o, lse); });
  });
}

void kflash_cross_entropy_options_init(kflash_cross_entropy_options* options) {
  if (options == nullptr) return;
  *options = kflash_cross_entropy_options{};
  options->struct_size = sizeof(kflash_cross_entropy_options);
  options->ignore_index = kflash::CrossEntropyOptions().ignore_index;
}

kflash_status kflash_cross_entropy(kflash_memory memory, const kflash_array* logits, const kflash_array* targets,
                                   const kflash_array* loss, const kflash_array* mean,
                                   const kflash_cross_entropy_options* options) {
  const char* fn = "kflash_cross_entropy";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    const kflash_cross_entropy_options known =
        known_options(fn, options, kflash_cross_entropy_options_init, "kflash_cross_entropy_options_init",
                      sizeof(std::int64_t));
    on_float_type(fn, "logits", logits, [&](auto t) {
      on_targets(fn, targets, [&](auto i) {
        cross_entropy_typed<decltype(t), decltype(i)>(fn, memory, *logits, *targets, loss, mean, known);
      });
    });
  });
}

kflash_status kflash_cross_entropy_backward(kflash_memory memory, const kflash_array* logits,
                                            const kflash_array* targets, const kflash_array* dloss,
                                            const kflash_array* dlogits, const kflash_array* lse,
                                            const kflash_cross_entropy_options* options) {
  const char* fn = "kflash_cross_entropy_backward";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    const kflash_cross_entropy_options known =
        known_options(fn, options, kflash_cross_entropy_options_init, "kflash_cross_entropy_options_init",
                      sizeof(std::int64_t));
    on_float_type(fn, "logits", logits, [&](auto t) {
      on_targets(fn, targets, [&](auto i) {
        cross_entropy_backward_typed<decltype(t), decltype(i)>(fn, memory, *logits, *targets, dloss, dlogits, lse,
                                                               known);
      });
    });
  });
}

}  // extern "C"
