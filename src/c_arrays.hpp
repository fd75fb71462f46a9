// The C interface's checks and conversions (src/c_api.cpp, src/c_cross_entropy.cpp): the Failure its
// checks throw, and kflash_array descriptors as unmanaged LayoutStride Views of the C++ layer.
#pragma once

#include <kflash/kflash.h>
#include <kflash/kflash.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace kflash::c_interface {
/// Thrown by the checks below: the status and the message to leave. One type in every file of the
/// C interface (not file-local like the helpers below): a call's typed part, compiled in another
/// file (c_attention_typed.hpp), throws what its entry point catches.
struct Failure {
  kflash_status status;
  std::string message;
};
}  // namespace kflash::c_interface

namespace {

using kflash::c_interface::Failure;

[[noreturn]] inline void fail(kflash_status status, const char* function, const std::string& what) {
  throw Failure{status, std::string(function) + ": " + what};
}

inline const char* dtype_name(int dtype) {
  switch (dtype) {
    case KFLASH_FLOAT32: return "float32";
    case KFLASH_FLOAT64: return "float64";
    case KFLASH_BOOL: return "bool";
    case KFLASH_INT32: return "int32";
    case KFLASH_INT64: return "int64";
    case KFLASH_BFLOAT16: return "bfloat16";
    case KFLASH_FLOAT16: return "float16";
    default: return "not a kflash_dtype";
  }
}

template <class T>
constexpr kflash_dtype dtype_of() {
  if constexpr (std::is_same<T, float>::value) return KFLASH_FLOAT32;
  else if constexpr (std::is_same<T, double>::value) return KFLASH_FLOAT64;
  else if constexpr (std::is_same<T, bool>::value) return KFLASH_BOOL;
  else if constexpr (std::is_same<T, std::int32_t>::value) return KFLASH_INT32;
  else if constexpr (std::is_same<T, kflash::bhalf_t>::value) return KFLASH_BFLOAT16;
  else if constexpr (std::is_same<T, kflash::half_t>::value) return KFLASH_FLOAT16;
  else return KFLASH_INT64;
}

/// "name (e0, e1, ...) dtype".
inline std::string describe(const char* name, const kflash_array& a) {
  std::string s = std::string(name) + " (";
  for (int d = 0; d < a.rank && d < KFLASH_MAX_RANK; ++d) s += (d ? ", " : "") + std::to_string(a.extent[d]);
  return s + ") " + dtype_name(a.dtype);
}

/// The checks every present array passes: a known dtype, a rank of 1 to KFLASH_MAX_RANK, extents
/// and strides >= 0, an element count and a span (from the first element to the last) that fit in
/// 63 bits, and data when it holds elements.
inline void check_array(const char* function, const char* name, const kflash_array& a) {
  if (a.dtype < KFLASH_FLOAT32 || a.dtype > KFLASH_FLOAT16)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, std::string(name) + ".dtype = " + std::to_string(int(a.dtype)) +
                                                      " is not a kflash_dtype");
  if (a.rank < 1 || a.rank > KFLASH_MAX_RANK)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, std::string(name) + ".rank = " + std::to_string(a.rank) +
                                                      " is not in [1, " + std::to_string(KFLASH_MAX_RANK) + "]");
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  bool empty = false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.extent[d] < 0 || a.stride[d] < 0)
      fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe(name, a) + " has a negative extent or stride");
    empty = empty || a.extent[d] == 0;
  }
  std::int64_t count = 1, last = 0;  // elements, and the offset of the last one
  for (int d = 0; d < a.rank && !empty; ++d) {
    const std::int64_t e = a.extent[d], reach = e - 1;
    if (count > max / e || (a.stride[d] > 0 && reach > (max - last) / a.stride[d]))
      fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe(name, a) + " addresses more than 2^63 elements");
    count *= e;
    last += reach * a.stride[d];
  }
  if (a.data == nullptr && !empty)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe(name, a) + " has elements but its data is NULL");
}

/// A required array: not NULL, of the rank the call takes and of dtype T (the first array's, or
/// float32 for the lse of 16-bit arrays). An output (`written`)
/// may not give a stride of 0 to an extent above 1 (unless all strides are 0: contiguous), which
/// would write its elements over each other.
template <class T>
const kflash_array& required(const char* function, const char* name, const kflash_array* a, int rank,
                             bool written = false) {
  if (a == nullptr) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, std::string(name) + " is NULL");
  check_array(function, name, *a);
  bool contiguous = true, overlapping = false;
  for (int d = 0; d < a->rank; ++d) {
    contiguous = contiguous && a->stride[d] == 0;
    overlapping = overlapping || (a->stride[d] == 0 && a->extent[d] > 1);
  }
  if (written && overlapping && !contiguous)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         describe(name, *a) +
             " is written, and a stride of 0 on an extent above 1 would write elements over each other");
  if (a->dtype != dtype_of<T>())
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         describe(name, *a) + " must have dtype " + dtype_name(dtype_of<T>()) +
             (std::is_same<T, float>::value ? " (the first array's, or float32 where that is 16-bit)"
                                            : " (the first array's)"));
  if (a->rank != rank)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe(name, *a) + " must have rank " + std::to_string(rank));
  return *a;
}

template <class T, int R>
struct ArrayOf {
  using type = typename ArrayOf<T, R - 1>::type*;
};
template <class T>
struct ArrayOf<T, 0> {
  using type = T;
};

/// The unmanaged View of rank R over a (checked) array, in Exec's memory.
template <class Exec, class T, int R>
auto strided_view(const kflash_array& a) {
  using View = Kokkos::View<typename ArrayOf<T, R>::type, Kokkos::LayoutStride, typename Exec::memory_space,
                            Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::LayoutStride layout;
  bool contiguous = true, empty = false;
  for (int d = 0; d < R; ++d) contiguous = contiguous && a.stride[d] == 0, empty = empty || a.extent[d] == 0;
  // Row-major strides of a contiguous array (check_array bounds their product), all 1 when it is
  // empty: no element is addressed then.
  std::int64_t next = 1;
  for (int d = R - 1; d >= 0; --d) {
    layout.dimension[d] = std::size_t(a.extent[d]);
    layout.stride[d] = std::size_t(contiguous ? next : a.stride[d]);
    if (!empty && d > 0) next *= a.extent[d];
  }
  return View(static_cast<T*>(a.data), layout);
}

template <class Exec, class T>
kflash::OptionView option_of_rank(const kflash_array& a) {
  switch (a.rank) {
    case 1: return strided_view<Exec, const T, 1>(a);
    case 2: return strided_view<Exec, const T, 2>(a);
    case 3: return strided_view<Exec, const T, 3>(a);
    default: return strided_view<Exec, const T, 4>(a);
  }
}

/// An option array as an OptionView (empty when its data is NULL); the C++ call checks its dtype
/// and shape against the call's.
template <class Exec>
kflash::OptionView option_view(const char* function, const char* name, const kflash_array& a) {
  if (a.data == nullptr) return {};
  check_array(function, name, a);
  if (a.rank > 4)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe(name, a) + ": options have rank 4 at most");
  if (a.dtype == KFLASH_BFLOAT16 || a.dtype == KFLASH_FLOAT16)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         describe(name, a) + ": options hold float32 or float64 (float32 for 16-bit q, k, v), bool or integers");
  switch (a.dtype) {
    case KFLASH_FLOAT32: return option_of_rank<Exec, float>(a);
    case KFLASH_FLOAT64: return option_of_rank<Exec, double>(a);
    case KFLASH_BOOL: return option_of_rank<Exec, bool>(a);
    case KFLASH_INT32: return option_of_rank<Exec, std::int32_t>(a);
    default: return option_of_rank<Exec, std::int64_t>(a);
  }
}

}  // namespace
