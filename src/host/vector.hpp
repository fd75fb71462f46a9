// The host kernels' vector type: a vector of a fixed number of bytes of T, its lane reductions and
// its non-temporal stores. Each instruction-set variant (isa_variants.cpp) lowers it to its own
// registers.
#pragma once

#include "isa.hpp"

#include <kflash/impl/math.hpp>

namespace kflash::impl::host::internal {

/// A vector of `Bytes` bytes of T, loaded and stored unaligned. With GNU vector extensions (not
/// through nvcc, whose front end stops on them; CUDA builds have only the baseline) each
/// variant lowers it to its own registers (one AVX-512 register, two AVX2 or four SSE ones): plain
/// loops are not vectorised well enough in two places (the micro-GEMM's k loop, which gets a
/// shuffle per element, and a maximum that ignores NaN, `v > m ? v : m`).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define KFLASH_IMPL_VECTOR_EXT 1
template <class T, int Bytes>
struct Vec {
  typedef T type __attribute__((vector_size(Bytes)));
  static void zero(type& v) { v = type{}; }
  static void load(type& v, const T* p) { __builtin_memcpy(&v, p, sizeof v); }
  static void store(T* p, const type& v) { __builtin_memcpy(p, &v, sizeof v); }
  static void fill(type& v, T a) { v = type{} + a; }
  static void fma(type& acc, T a, const type& b) { acc += a * b; }
  static void fma(type& acc, const type& a, const type& b) { acc += a * b; }
  static void max(type& m, const type& v) { m = v > m ? v : m; }
  static T lane(const type& v, int i) { return v[i]; }
};
#else
template <class T, int Bytes>
struct Vec {
  static constexpr int width = Bytes / int(sizeof(T));
  struct type {
    T e[width];
    type& operator+=(const type& b) {
      for (int i = 0; i < width; ++i) e[i] += b.e[i];
      return *this;
    }
    type operator+(const type& b) const {
      type a = *this;
      return a += b;
    }
  };
  static void zero(type& v) { v = type{}; }
  static void load(type& v, const T* p) {
    for (int i = 0; i < width; ++i) v.e[i] = p[i];
  }
  static void store(T* p, const type& v) {
    for (int i = 0; i < width; ++i) p[i] = v.e[i];
  }
  static void fill(type& v, T a) {
    for (int i = 0; i < width; ++i) v.e[i] = a;
  }
  static void fma(type& acc, T a, const type& b) {
    for (int i = 0; i < width; ++i) acc.e[i] += a * b.e[i];
  }
  static void fma(type& acc, const type& a, const type& b) {
    for (int i = 0; i < width; ++i) acc.e[i] += a.e[i] * b.e[i];
  }
  static void max(type& m, const type& v) {
    for (int i = 0; i < width; ++i) m.e[i] = v.e[i] > m.e[i] ? v.e[i] : m.e[i];
  }
  static T lane(const type& v, int i) { return v.e[i]; }
};
#endif

/// v's lanes as two vectors of half the width.
template <class T, int VB>
inline void halves(const typename Vec<T, VB>::type& v, typename Vec<T, VB / 2>::type& lo,
                   typename Vec<T, VB / 2>::type& hi) {
  __builtin_memcpy(&lo, &v, VB / 2);
  __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + VB / 2, VB / 2);
}

/// Combines v's lanes by halves: the upper half into the lower one, level by level, with
/// Op::apply (a = a op b on vectors of half the width).
template <class T, int VB, class Op>
inline T reduce_lanes(const typename Vec<T, VB>::type& v) {
  if constexpr (VB == int(sizeof(T))) {
    return Vec<T, VB>::lane(v, 0);
  } else {
    typename Vec<T, VB / 2>::type a, b;
    halves<T, VB>(v, a, b);
    Op::template apply<T, VB / 2>(a, b);
    return reduce_lanes<T, VB / 2, Op>(a);
  }
}
struct MaxOp {  // NaN lanes ignored
  template <class T, int VB>
  static void apply(typename Vec<T, VB>::type& a, const typename Vec<T, VB>::type& b) {
    Vec<T, VB>::max(a, b);
  }
};
struct AddOp {
  template <class T, int VB>
  static void apply(typename Vec<T, VB>::type& a, const typename Vec<T, VB>::type& b) {
    a += b;
  }
};

/// Non-temporal stores of a vector (aligned to its size) where the instruction set has them: the
/// line goes to memory without being read first and without evicting the cache. `fence` orders
/// them before what follows (other threads read the output after the kernel).
template <class T, int VB>
struct Stream {
  static constexpr bool available = false;
  static void store(T* p, const typename Vec<T, VB>::type& v) { Vec<T, VB>::store(p, v); }
  static void fence() {}
};
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
#define KFLASH_IMPL_STREAM(T, VB, attributes, intrinsic)                  \
  template <>                                                             \
  struct Stream<T, VB> {                                                  \
    static constexpr bool available = true;                               \
    attributes static void store(T* p, const typename Vec<T, VB>::type& v) { intrinsic(p, v); } \
    static void fence() { _mm_sfence(); }                                 \
  };
KFLASH_IMPL_STREAM(float, 16, , _mm_stream_ps)
KFLASH_IMPL_STREAM(double, 16, , _mm_stream_pd)
KFLASH_IMPL_STREAM(float, 32, __attribute__((target("avx"))), _mm256_stream_ps)
KFLASH_IMPL_STREAM(double, 32, __attribute__((target("avx"))), _mm256_stream_pd)
KFLASH_IMPL_STREAM(float, 64, __attribute__((target("avx512f"))), _mm512_stream_ps)
KFLASH_IMPL_STREAM(double, 64, __attribute__((target("avx512f"))), _mm512_stream_pd)
#undef KFLASH_IMPL_STREAM
#endif

}  // namespace kflash::impl::host::internal
