// The C interface (include/kflash/kflash.h): plain arrays become unmanaged strided Views in the
// memory space the caller names, and go through the C++ calls; exceptions become status codes and a
// per-thread message.
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
  if (has_lse) required<kflash::impl::arith_t<T>>(function, "lse", lse, R - 1, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::AttentionOptions opt = cxx_options<Exec>(function, options);
    const auto qv = strided_view<Exec, const T, R>(q);
    const auto kv = strided_view<Exec, const T, R>(kk);
    const auto vv_ = strided_view<Exec, const T, R>(vv);
    const auto ov = strided_view<Exec, T, R>(oo);
    if (has_lse)
      kflash::attention(exec, qv, kv, vv_, ov, opt, strided_view<Exec, kflash::impl::arith_t<T>, R - 1>(*lse));
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

/// An output of AttentionGrads (dsinks, dbias) as a writable OptionView of type T (q's, or float32
/// for 16-bit q), empty when absent; the C++ call checks its shape against the option's.
template <class Exec, class T>
kflash::OptionView grad_option(const char* function, const char* name, const kflash_array* a) {
  if (a == nullptr || a->data == nullptr) return {};
  const kflash_array& g = required<T>(function, name, a, a->rank, true);
  switch (g.rank) {
    case 1: return strided_view<Exec, T, 1>(g);
    case 2: return strided_view<Exec, T, 2>(g);
    case 3: return strided_view<Exec, T, 3>(g);
    case 4: return strided_view<Exec, T, 4>(g);
    default:
      fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
           describe(name, g) + " must have the rank of its option: 1 (dsinks), 4 (dbias)");
  }
}

/// The arrays of an attention_backward call, as given.
struct BackwardArrays {
  const kflash_array *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv, *dsinks, *dbias;
};

/// attention_backward() with q, k, v, o and their gradients of rank R (4 dense, 3 varlen), lse of
/// rank R - 1; lse, dsinks and dbias of T's arithmetic type (float32 for 16-bit T).
template <class T, int R>
void attention_backward_call(const char* function, kflash_memory memory, const BackwardArrays& a,
                             const kflash_attention_options& options) {
  using A = kflash::impl::arith_t<T>;
  const kflash_array& q = required<T>(function, "q", a.q, R);
  const kflash_array& k = required<T>(function, "k", a.k, R);
  const kflash_array& v = required<T>(function, "v", a.v, R);
  const kflash_array& o = required<T>(function, "o", a.o, R);
  const kflash_array& lse = required<A>(function, "lse", a.lse, R - 1);
  const kflash_array& dout = required<T>(function, "dout", a.dout, R);
  const kflash_array& dq = required<T>(function, "dq", a.dq, R, true);
  const kflash_array& dk = required<T>(function, "dk", a.dk, R, true);
  const kflash_array& dv = required<T>(function, "dv", a.dv, R, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::AttentionOptions opt = cxx_options<Exec>(function, options);
    kflash::AttentionGrads grads;
    grads.dsinks = grad_option<Exec, A>(function, "dsinks", a.dsinks);
    grads.dbias = grad_option<Exec, A>(function, "dbias", a.dbias);
    kflash::attention_backward(exec, strided_view<Exec, const T, R>(q), strided_view<Exec, const T, R>(k),
                               strided_view<Exec, const T, R>(v), strided_view<Exec, const T, R>(o),
                               strided_view<Exec, const A, R - 1>(lse), strided_view<Exec, const T, R>(dout),
                               strided_view<Exec, T, R>(dq), strided_view<Exec, T, R>(dk), strided_view<Exec, T, R>(dv),
                               opt, grads);
    exec.fence();
  });
}

template <class T>
void merge_typed(const char* function, kflash_memory memory, const kflash_array* o_parts,
                 const kflash_array* lse_parts, const kflash_array* o, const kflash_array* lse) {
  const kflash_array& op = required<T>(function, "o_parts", o_parts, 5);
  using A = kflash::impl::arith_t<T>;  // lse_parts' and lse's type: float32 for 16-bit parts
  const kflash_array& lp = required<A>(function, "lse_parts", lse_parts, 4);
  const kflash_array& ov = required<T>(function, "o", o, 4, true);
  const kflash_array& lv = required<A>(function, "lse", lse, 3, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    kflash::merge_attention(exec, strided_view<Exec, const T, 5>(op), strided_view<Exec, const A, 4>(lp),
                            strided_view<Exec, T, 4>(ov), strided_view<Exec, A, 3>(lv));
    exec.fence();
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
    on_float_type<true>(fn, "q", q, [&](auto t) { attention_typed<decltype(t)>(fn, memory, q, k, v, o, lse, known); });
  });
}

kflash_status kflash_attention_backward(kflash_memory memory, const kflash_array* q, const kflash_array* k,
                                        const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                                        const kflash_array* dout, const kflash_array* dq, const kflash_array* dk,
                                        const kflash_array* dv, const kflash_array* dsinks, const kflash_array* dbias,
                                        const kflash_attention_options* options) {
  const char* fn = "kflash_attention_backward";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    const kflash_attention_options known =
        known_options(fn, options, kflash_attention_options_init, "kflash_attention_options_init", sizeof(double));
    const BackwardArrays arrays{q, k, v, o, lse, dout, dq, dk, dv, dsinks, dbias};
    on_float_type<true>(fn, "q", q, [&](auto t) {
      using T = decltype(t);
      if (q->rank == 4) attention_backward_call<T, 4>(fn, memory, arrays, known);
      else if (q->rank == 3) attention_backward_call<T, 3>(fn, memory, arrays, known);
      else
        fail(KFLASH_ERROR_INVALID_ARGUMENT, fn,
             describe("q", *q) + " must have rank 4 (B, Hq, Nq, D), or 3 (total_q, Hq, D) with varlen options");
    });
  });
}

kflash_status kflash_merge_attention(kflash_memory memory, const kflash_array* o_parts,
                                     const kflash_array* lse_parts, const kflash_array* o,
                                     const kflash_array* lse) {
  const char* fn = "kflash_merge_attention";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    on_float_type<true>(fn, "o_parts", o_parts,
                        [&](auto t) { merge_typed<decltype(t)>(fn, memory, o_parts, lse_parts, o, lse); });
  });
}

}  // extern "C"
