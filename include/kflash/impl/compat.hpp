// Every difference between the Kokkos versions kflash supports (3.4 through 4.x and 5.x), and between
// the compilers it builds with (loop unrolling, 16-byte loads), lives here.
#pragma once

#include <Kokkos_Core.hpp>
#include <kflash/impl/half_types.hpp>

#include <cstddef>
#include <type_traits>

#ifndef KOKKOS_VERSION
#error "kflash: KOKKOS_VERSION is not defined; kflash needs Kokkos 3.4 or newer"
#endif
#if KOKKOS_VERSION < 30400
#error "kflash needs Kokkos 3.4 or newer"
#endif

// --- Full unrolling of loops over register blocks, where the compiler takes `#pragma unroll` (as
// Kokkos reports: nvcc, clang, Intel). Without it nvcc keeps a block indexed in a loop it did not
// unroll in local memory.
#ifdef KOKKOS_ENABLE_PRAGMA_UNROLL
#define KFLASH_IMPL_UNROLL _Pragma("unroll")
#else
#define KFLASH_IMPL_UNROLL
#endif

namespace kflash::impl {

// --- Math functions: Kokkos::Experimental:: in 3.x, Kokkos:: from 4.0 on.
#if KOKKOS_VERSION >= 40000
KOKKOS_INLINE_FUNCTION float exp(float x) { return Kokkos::exp(x); }
KOKKOS_INLINE_FUNCTION double exp(double x) { return Kokkos::exp(x); }
KOKKOS_INLINE_FUNCTION float log(float x) { return Kokkos::log(x); }
KOKKOS_INLINE_FUNCTION double log(double x) { return Kokkos::log(x); }
#else
KOKKOS_INLINE_FUNCTION float exp(float x) { return Kokkos::Experimental::exp(x); }
KOKKOS_INLINE_FUNCTION double exp(double x) { return Kokkos::Experimental::exp(x); }
KOKKOS_INLINE_FUNCTION float log(float x) { return Kokkos::Experimental::log(x); }
KOKKOS_INLINE_FUNCTION double log(double x) { return Kokkos::Experimental::log(x); }
#endif

// --- Special values. kflash relies on true infinities and NaNs (never compile it with fast-math).
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T infinity() {
  return Kokkos::Experimental::infinity<T>::value;
}
#if KOKKOS_VERSION >= 30500
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T quiet_nan() {
  return Kokkos::Experimental::quiet_NaN<T>::value;
}
#else
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T quiet_nan() {
  return static_cast<T>(__builtin_nan(""));
}
#endif

// --- View rank: an enum in 3.x, an integral constant in 4.x, a static function in 5.x.
template <class ViewType>
inline constexpr int view_rank =
#if KOKKOS_VERSION >= 40000
    static_cast<int>(ViewType::rank());
#else
    static_cast<int>(ViewType::rank);
#endif

// --- 16-byte loads and stores (the team schedules move K/V rows and softmax rows by them where
// the rows allow): one instruction in CUDA device code; element by element elsewhere, where
// accessing T objects through another type would break C++'s aliasing rules.
inline constexpr std::size_t chunk_bytes = 16;
/// chunk_bytes of T, as one load reads them.
template <class T>
struct alignas(chunk_bytes) Chunk {
  static constexpr int n = int(chunk_bytes / sizeof(T));
  T x[n];
};
/// The chunk at p, which is chunk_bytes aligned.
template <class T>
KOKKOS_INLINE_FUNCTION Chunk<T> load_chunk(const T* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const Chunk<T>*>(p);
#else
  Chunk<T> c;
  for (int e = 0; e < Chunk<T>::n; ++e) c.x[e] = p[e];
  return c;
#endif
}
/// Stores chunk c at p, which is chunk_bytes aligned.
template <class T>
KOKKOS_INLINE_FUNCTION void store_chunk(T* p, const Chunk<T>& c) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<Chunk<T>*>(p) = c;
#else
  for (int e = 0; e < Chunk<T>::n; ++e) p[e] = c.x[e];
#endif
}

// --- Reducers: Kokkos before 4.2 also calls join() on volatile references.
// Copies a trivially copyable value out of / into volatile storage byte by byte (unsigned char is
// the one type that may alias any object).
template <class T>
KOKKOS_INLINE_FUNCTION T volatile_load(const volatile T& src) {
  static_assert(std::is_trivially_copyable<T>::value, "kflash: reducer values must be trivially copyable");
  T result{};
  auto* to = reinterpret_cast<unsigned char*>(&result);
  auto* from = reinterpret_cast<const volatile unsigned char*>(&src);
  for (std::size_t i = 0; i < sizeof(T); ++i) to[i] = from[i];
  return result;
}
template <class T>
KOKKOS_INLINE_FUNCTION void volatile_store(volatile T& dst, const T& value) {
  auto* to = reinterpret_cast<volatile unsigned char*>(&dst);
  auto* from = reinterpret_cast<const unsigned char*>(&value);
  for (std::size_t i = 0; i < sizeof(T); ++i) to[i] = from[i];
}

// --- Host threads. From 4.4 on, each Serial and OpenMP instance serialises the kernels that several
// host threads launch on it, and OpenMP runs kernels launched from any host thread. Before, a Serial
// instance's team scratch had no lock, and OpenMP ran reductions and team kernels only from the
// thread that initialised it (other threads: "ERROR: in parallel or not initialized").
inline constexpr bool kokkos_serialises_host_threads = KOKKOS_VERSION >= 40400;

/// Whether this host thread may launch kernels on ExecSpace (false: Kokkos before 4.4 would refuse
/// or misrun them: OpenMP from a thread other than its master, or from inside a parallel region).
template <class ExecSpace>
bool launches_from_this_thread() {
#if KOKKOS_VERSION < 40400 && defined(KOKKOS_ENABLE_OPENMP)
  if constexpr (std::is_same<ExecSpace, Kokkos::OpenMP>::value) return !Kokkos::OpenMP::in_parallel();
#endif
  return true;
}

}  // namespace kflash::impl

// --- 16-bit storage types (GUIDE §9): Kokkos::Experimental's where this build's are 2-byte types
// (backends with native ones: CUDA, HIP, SYCL), kflash's own (impl/half_types.hpp) where Kokkos
// emulates them by float (host-only builds) or has none (bhalf_t before Kokkos 3.7).
// to_float(x) and narrow<H>(f) (f rounded to nearest even) are the conversions kernels use.
namespace kflash {
#if defined(KOKKOS_HALF_T_IS_FLOAT) && !KOKKOS_HALF_T_IS_FLOAT
using half_t = Kokkos::Experimental::half_t;
#else
using half_t = impl::Float16;
#endif
#if defined(KOKKOS_BHALF_T_IS_FLOAT) && !KOKKOS_BHALF_T_IS_FLOAT
using bhalf_t = Kokkos::Experimental::bhalf_t;
#else
using bhalf_t = impl::Bfloat16;
#endif
static_assert(sizeof(half_t) == 2 && sizeof(bhalf_t) == 2, "kflash: 16-bit storage types must take 2 bytes");
}  // namespace kflash

namespace kflash::impl {
template <class H>
inline constexpr bool is_half_type = std::is_same<H, half_t>::value || std::is_same<H, bhalf_t>::value;

/// A 16-bit value as float.
KOKKOS_INLINE_FUNCTION float to_float(half_t x) {
#if defined(KOKKOS_HALF_T_IS_FLOAT) && !KOKKOS_HALF_T_IS_FLOAT
  return Kokkos::Experimental::cast_from_half<float>(x);
#else
  return float(x);
#endif
}
KOKKOS_INLINE_FUNCTION float to_float(bhalf_t x) {
#if defined(KOKKOS_BHALF_T_IS_FLOAT) && !KOKKOS_BHALF_T_IS_FLOAT
  return Kokkos::Experimental::cast_from_bhalf<float>(x);
#else
  return float(x);
#endif
}
/// f rounded to nearest even in the 16-bit type H.
KOKKOS_INLINE_FUNCTION half_t to_half(float f) {
#if defined(KOKKOS_HALF_T_IS_FLOAT) && !KOKKOS_HALF_T_IS_FLOAT
  return Kokkos::Experimental::cast_to_half(f);
#else
  return half_t(f);
#endif
}
KOKKOS_INLINE_FUNCTION bhalf_t to_bhalf(float f) {
#if defined(KOKKOS_BHALF_T_IS_FLOAT) && !KOKKOS_BHALF_T_IS_FLOAT
  return Kokkos::Experimental::cast_to_bhalf(f);
#else
  return bhalf_t(f);
#endif
}
template <class H>
KOKKOS_INLINE_FUNCTION H narrow(float f) {
  static_assert(is_half_type<H>, "kflash: narrow<H> takes kflash::half_t or kflash::bhalf_t");
  if constexpr (std::is_same<H, half_t>::value) {
    return to_half(f);
  } else {
    return to_bhalf(f);
  }
}

/// The type a stored element is computed in: float for 16-bit storage, the type itself otherwise.
template <class S>
struct Arithmetic {
  using type = S;
};
template <>
struct Arithmetic<half_t> {
  using type = float;
};
template <>
struct Arithmetic<bhalf_t> {
  using type = float;
};
template <class S>
using arith_t = typename Arithmetic<std::remove_cv_t<S>>::type;

/// A stored element in its arithmetic type.
template <class S>
KOKKOS_INLINE_FUNCTION arith_t<S> widen(S x) {
  if constexpr (is_half_type<std::remove_cv_t<S>>) {
    return to_float(x);
  } else {
    return x;
  }
}
/// A computed value x stored as S: rounded once, to nearest even, where S is a 16-bit type.
template <class S, class T>
KOKKOS_INLINE_FUNCTION S store_as(T x) {
  if constexpr (is_half_type<S>) {
    return narrow<S>(float(x));
  } else {
    return S(x);
  }
}
}  // namespace kflash::impl

// Placed inside a reducer class whose non-volatile join(value_type&, const value_type&) exists:
// adds the volatile overload that Kokkos < 4.2 requires, and nothing on newer Kokkos.
#if KOKKOS_VERSION < 40200
#define KFLASH_IMPL_VOLATILE_JOIN(VALUE_TYPE)                                          \
  KOKKOS_INLINE_FUNCTION                                                              \
  void join(volatile VALUE_TYPE& dest, const volatile VALUE_TYPE& src) const {        \
    VALUE_TYPE d = ::kflash::impl::volatile_load(dest);                               \
    const VALUE_TYPE s = ::kflash::impl::volatile_load(src);                          \
    join(d, s);                                                                       \
    ::kflash::impl::volatile_store(dest, d);                                          \
  }
#else
#define KFLASH_IMPL_VOLATILE_JOIN(VALUE_TYPE)
#endif
