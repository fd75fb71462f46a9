// The host kernels' vector type: a vector of a fixed number of bytes of T, its lane reductions and
// its non-temporal stores. Each instruction-set variant (isa_variants.cpp) lowers it to its own
// registers.
#pragma once

#include "isa.hpp"

#include <kflash/impl/math.hpp>

#include <utility>

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

/// Loads of an operand's elements (of type B) as vectors and elements of T: B = T as they are; 16-bit
/// B (kflash's Bfloat16, Float16, by their bits) widened to float as they load (half_rows.hpp).
template <class T, int VB, class B>
struct Operand {
  static void load(typename Vec<T, VB>::type& v, const B* p) { Vec<T, VB>::load(v, p); }
  static T element(const B& x) { return x; }
};

// Shuffles of vector lanes by constant indices (__builtin_shufflevector: GCC 12 and later, clang).
#if defined(KFLASH_IMPL_VECTOR_EXT) && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define KFLASH_IMPL_SHUFFLES 1
#endif
#endif

/// v's lanes as two vectors of half the width: by shuffles where the compiler has them (copies
/// through memory can make it store the whole vector and load its halves back, which waits on the
/// store), else by copies.
#ifdef KFLASH_IMPL_SHUFFLES
template <class T, int VB, std::size_t... P>
inline void halves_of(const typename Vec<T, VB>::type& v, typename Vec<T, VB / 2>::type& lo,
                      typename Vec<T, VB / 2>::type& hi, std::index_sequence<P...>) {
  constexpr std::size_t H = sizeof...(P);
  lo = __builtin_shufflevector(v, v, P...);
  hi = __builtin_shufflevector(v, v, (P + H)...);
}
#endif
template <class T, int VB>
inline void halves(const typename Vec<T, VB>::type& v, typename Vec<T, VB / 2>::type& lo,
                   typename Vec<T, VB / 2>::type& hi) {
#ifdef KFLASH_IMPL_SHUFFLES
  halves_of<T, VB>(v, lo, hi, std::make_index_sequence<VB / 2 / sizeof(T)>{});
#else
  __builtin_memcpy(&lo, &v, VB / 2);
  __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + VB / 2, VB / 2);
#endif
}

#ifdef KFLASH_IMPL_SHUFFLES
/// Stores lanes [F, F + N) of v at p (N = the sequence's length, a power of two) with one store.
template <class T, int VB, int F, std::size_t... P>
inline void store_lanes(T* p, const typename Vec<T, VB>::type& v, std::index_sequence<P...>) {
  using Part = Vec<T, int(sizeof...(P) * sizeof(T))>;
  const typename Part::type part = __builtin_shufflevector(v, v, (F + int(P))...);
  Part::store(p, part);
}
#endif

/// The lane operations of the reductions: a = a op b.
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
#ifdef KFLASH_IMPL_SHUFFLES
/// The lane reductions (Op: AddOp, MaxOp) of W vectors of W lanes at once: lane l of apply()'s
/// result is a[l]'s lanes combined, in reduce_lanes' order. Each level pairs the vectors and
/// combines their blocks of B lanes two by two (B = W/2, ..., 1), halving the vectors; blocks of 16
/// bytes or more move as whole 16-byte lanes and smaller ones within each 16-byte lane, the
/// shuffles every x86 vector width has. A last permutation puts the results in order. About 3
/// operations a result, against 2 log2(W) for reduce_lanes on each vector.
template <class T, int VB, class Op>
struct LaneTrees {
  using type = typename Vec<T, VB>::type;
  static constexpr int W = VB / int(sizeof(T));
  static constexpr int L = 16 / int(sizeof(T)) < W ? 16 / int(sizeof(T)) : W;  // lanes of 16 bytes

  /// The lane of the pair (x: [0, W), y: [W, 2W)) that lane p of level B's even (parity 0) or odd
  /// (1) blocks takes: in each group of G lanes, x's blocks of that parity, then y's.
  static constexpr int pick(int B, int parity, int p) {
    const int G = B >= L ? W : L, half = G / 2, q = p % G, qq = q % half;
    return (q < half ? 0 : W) + p / G * G + (2 * (qq / B) + parity) * B + qq % B;
  }
  /// The lane of the tree's last vector that holds a[v]'s sum.
  static constexpr int lane_of(int v) {
    int owner[W][W] = {};  // owner[i][l]: whose sum lane l of vector i adds to
    for (int i = 0; i < W; ++i)
      for (int l = 0; l < W; ++l) owner[i][l] = i;
    for (int B = W / 2; B >= 1; B /= 2)
      for (int i = 0; i < B; ++i) {
        int next[W] = {};
        for (int l = 0; l < W; ++l) {
          const int s = pick(B, 0, l);
          next[l] = s < W ? owner[2 * i][s] : owner[2 * i + 1][s - W];
        }
        for (int l = 0; l < W; ++l) owner[i][l] = next[l];
      }
    for (int l = 0; l < W; ++l)
      if (owner[0][l] == v) return l;
    return -1;
  }
  // The vectors go by reference: returned by value, they would change the ABI of the functions of
  // the variants without the instruction set (GCC warns).
  template <int B, std::size_t... P>
  static void combine_blocks(const type& x, const type& y, type& out, std::index_sequence<P...>) {
    type odd = __builtin_shufflevector(x, y, pick(B, 1, int(P))...);
    out = __builtin_shufflevector(x, y, pick(B, 0, int(P))...);
    Op::template apply<T, VB>(out, odd);
  }
  template <std::size_t... P>
  static void in_order(const type& r, type& out, std::index_sequence<P...>) {
    out = __builtin_shufflevector(r, r, lane_of(int(P))...);
  }
  template <int B>
  static void level(type* a) {
    for (int i = 0; i < B; ++i) combine_blocks<B>(a[2 * i], a[2 * i + 1], a[i], std::make_index_sequence<W>{});
    if constexpr (B > 1) level<B / 2>(a);
  }
  /// out = the lane reductions of a[0, W), which is overwritten.
  static void apply(type* a, type& out) {
    if constexpr (W == 1) {
      out = a[0];
    } else {
      level<W / 2>(a);
      in_order(a[0], out, std::make_index_sequence<W>{});
    }
  }
};
#endif

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

/// Asks for the cache lines of p[0, n), one prefetch per 64-byte line: for write passes whose
/// arithmetic per element (an exp) leaves too few loads in flight for the hardware's prefetchers to
/// keep the memory busy. Locality as __builtin_prefetch's: 3 into every level (L1 on), 2 into L2 on.
template <int Locality = 3, class T>
inline void prefetch_lines(const T* p, index_t n) {
#if defined(__GNUC__) || defined(__clang__)
  constexpr index_t line = 64 / index_t(sizeof(T));
  for (index_t i = 0; i < n; i += line) __builtin_prefetch(p + i, 0, Locality);
#else
  (void)p, (void)n;
#endif
}

/// The elements a streaming write pass computes between two prefetches, and how far ahead those
/// reach (4 KiB of fp32 with AVX-512): measured on Intel Xeon (AVX-512), see row_grads.hpp's use.
template <class T, int VB>
struct StreamAhead {
  static constexpr index_t group = 16 * (VB / index_t(sizeof(T))), ahead = 4 * group;
};

}  // namespace kflash::impl::host::internal
