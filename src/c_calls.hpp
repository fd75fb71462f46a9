// The C interface's call frame (src/c_api.cpp, c_attention.cpp, c_attention_backward.cpp,
// c_cross_entropy.cpp: one file per group of calls, compiled in parallel): the per-thread message,
// exceptions turned into status codes, the memory kind's execution space, the options structs read
// by their struct_size and the attention options as the C++ calls take them, and the dispatch on an
// array's floating type.
#pragma once

#include "c_arrays.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

namespace kflash::c_interface {
/// The message of the calling thread's last failed call (kflash_last_error). The thread-local
/// string lives in c_api.cpp and every file reaches it through this function, called afresh where
/// it is written: a reference held across a try block into another file's thread-local variable
/// came out null in a catch block under ASan + UBSan (GCC 12).
std::string& last_error();
}  // namespace kflash::c_interface

namespace {

/// A message of the C++ layer with its "kflash::<call>: " prefix taken off: the C interface's
/// messages all begin with the C function's name.
inline std::string without_cpp_prefix(const std::string& message) {
  const std::size_t colon = message.find(": ");
  return message.rfind("kflash::", 0) == 0 && colon != std::string::npos ? message.substr(colon + 2) : message;
}

/// Runs f, turning what it throws into a status and the thread's message.
template <class F>
kflash_status guarded(const char* function, F&& f) {
  using kflash::c_interface::last_error;
  last_error().clear();
  try {
    if (!Kokkos::is_initialized())
      fail(KFLASH_ERROR_NOT_INITIALIZED, function, "Kokkos is not initialized (call kflash_initialize first)");
    f();
    return KFLASH_SUCCESS;
  } catch (const Failure& e) {
    last_error() = e.message;
    return e.status;
  } catch (const std::invalid_argument& e) {
    last_error() = std::string(function) + ": " + without_cpp_prefix(e.what());
    return KFLASH_ERROR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    last_error() = std::string(function) + ": " + without_cpp_prefix(e.what());
    return KFLASH_ERROR_INTERNAL;
  } catch (...) {
    last_error() = std::string(function) + ": an unknown exception";
    return KFLASH_ERROR_INTERNAL;
  }
}

/// A memory kind this build can run on (checked first, so that empty calls refuse it too).
inline void check_memory(const char* function, kflash_memory memory) {
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

/// The floating type of a call's first array: calls f(T()) for T float or double, and with Takes16
/// also kflash::bhalf_t or kflash::half_t (bfloat16, float16).
template <bool Takes16 = false, class F>
void on_float_type(const char* function, const char* name, const kflash_array* first, F&& f) {
  if (first == nullptr) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, std::string(name) + " is NULL");
  check_array(function, name, *first);
  if (first->dtype == KFLASH_FLOAT32) return f(float());
  if (first->dtype == KFLASH_FLOAT64) return f(double());
  if constexpr (Takes16) {
    if (first->dtype == KFLASH_BFLOAT16) return f(kflash::bhalf_t());
    if (first->dtype == KFLASH_FLOAT16) return f(kflash::half_t());
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         describe(name, *first) + " must be float32, float64, bfloat16 or float16");
  }
  fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe(name, *first) + " must be float32 or float64");
}

/// The C attention options as kflash::AttentionOptions, their arrays as Views in Exec's memory.
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

}  // namespace
