// The host inner loops (see include/kflash/impl/host_kernels.hpp), written once as templates and
// compiled here for each instruction set: every variant inlines the whole template body
// (`flatten`), so the same source becomes AVX-512, AVX2 + FMA and baseline code.
#include <kflash/impl/host_kernels.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define KFLASH_IMPL_X86_VARIANTS 1
#endif
#ifdef KFLASH_IMPL_X86_VARIANTS
#include <immintrin.h>
#endif
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define KFLASH_IMPL_FLATTEN __attribute__((flatten))
#else
#define KFLASH_IMPL_FLATTEN
#endif

namespace kflash::impl::host {
namespace {

// Element access for the tile loops of softmax_state.hpp (function objects rather than lambdas: in
// a CUDA build this file also passes through nvcc, which wants them callable from both sides).
template <class T>
struct Load {
  const T* p;
  KOKKOS_INLINE_FUNCTION T operator()(index_t i) const { return p[i]; }
};
template <class T>
struct Store {
  T* p;
  KOKKOS_INLINE_FUNCTION void operator()(index_t i, T w) const { p[i] = w; }
};
template <class T>
struct NoStore {
  KOKKOS_INLINE_FUNCTION void operator()(index_t, T) const {}
};

/// A vector of `Bytes` bytes of T, loaded and stored unaligned. With GNU vector extensions (not
/// through nvcc, whose front end stops on them; CUDA builds have only the baseline) each
/// variant lowers it to its own registers (one AVX-512 register, two AVX2 or four SSE ones). Plain
/// loops were not enough in two places: GCC 12 vectorised gemm_block's k loop (a shuffle per
/// element) for some widths, and it does not vectorise a maximum that ignores NaN (`v > m ? v : m`).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(KFLASH_IMPL_NO_VECTOR_EXT)
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

/// w[l] = exp_nonpositive(x[l] - m), l in [0, N) (N a multiple of the vector's lanes): plain loops
/// that the compiler vectorises.
template <class T, int VB>
struct LaneExp {
  template <int N>
  static void apply(const T* x, T m, T* w) {
    for (int l = 0; l < N; ++l) w[l] = exp_nonpositive(x[l] - m);
  }
};

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
/// fp64 on AVX-512, where exp_nonpositive's degree-12 polynomial bounds the row kernels: a table of
/// 2^(j/16) in two registers (one permute picks an entry), and so a range 16 times narrower.
/// x = (16 k + j) ln2/16 + r with |r| <= ln2/32, exp(x) = 2^k 2^(j/16) exp(r), exp(r) - 1 = q by
/// its Taylor polynomial to degree 7 (the remainder is below 2^-59); the result is s + s q with s =
/// 2^k 2^(j/16) built in the exponent bits. Within 2 ulp, like exp_nonpositive (the table's entries
/// are rounded, half an ulp), with the same results for 0, -inf, NaN and arguments below `lowest`.
template <>
struct LaneExp<double, 64> {
  using V = Vec<double, 64>;
  using bits = std::int64_t __attribute__((vector_size(64)));
  using C = ExpConstants<double>;

  /// The bits of 2^(j/16) - j 2^48: adding t's bits shifted by 48 (16 k + j, the magic constant
  /// shifted out) gives those of 2^k 2^(j/16).
  static constexpr std::int64_t table_bits(int j) {
    constexpr std::int64_t entries[16] = {
        0x3ff0000000000000LL, 0x3ff0b5586cf9890fLL, 0x3ff172b83c7d517bLL, 0x3ff2387a6e756238LL,
        0x3ff306fe0a31b715LL, 0x3ff3dea64c123422LL, 0x3ff4bfdad5362a27LL, 0x3ff5ab07dd485429LL,
        0x3ff6a09e667f3bcdLL, 0x3ff7a11473eb0187LL, 0x3ff8ace5422aa0dbLL, 0x3ff9c49182a3f090LL,
        0x3ffae89f995ad3adLL, 0x3ffc199bdd85529cLL, 0x3ffd5818dcfba487LL, 0x3ffea4afa2a490daLL};
    return entries[j] - (std::int64_t(j) << 48);
  }

  __attribute__((target("avx512f"))) static V::type exp(V::type x) {
    constexpr double scale = 16 * C::log2e;
    constexpr double ln2_hi = C::ln2_hi / 16;  // exact: a power of two
    constexpr double ln2_lo = C::ln2_lo / 16;
    const bits lo = {table_bits(0), table_bits(1), table_bits(2), table_bits(3),
                     table_bits(4), table_bits(5), table_bits(6), table_bits(7)};
    const bits hi = {table_bits(8),  table_bits(9),  table_bits(10), table_bits(11),
                     table_bits(12), table_bits(13), table_bits(14), table_bits(15)};
    const V::type t = x * scale + C::round_magic;
    const V::type k = t - C::round_magic;  // 16 k + j
    const V::type r = (x - k * ln2_hi) - k * ln2_lo;
    V::type q = inv_factorial<double, 7> * r + inv_factorial<double, 6>;
    q = q * r + inv_factorial<double, 5>;
    q = q * r + inv_factorial<double, 4>;
    q = q * r + inv_factorial<double, 3>;
    q = q * r + inv_factorial<double, 2>;
    q = q * r + 1.0;
    q = q * r;
    const bits tb = (bits)t;  // vector casts keep the bits
    const bits entry = (bits)_mm512_permutex2var_epi64((__m512i)lo, (__m512i)tb, (__m512i)hi);
    const bits sb = entry + (tb << 48);
    const V::type s = (V::type)sb;
    const V::type e = s * q + s;
    return x < C::lowest ? V::type{} : e;  // false for NaN: its e is NaN
  }

  template <int N>
  __attribute__((target("avx512f"))) static void apply(const double* x, double m, double* w) {
    static_assert(N % 8 == 0, "kflash: whole vectors only");
    for (int i = 0; i < N; i += 8) {
      V::type v;
      V::load(v, x + i);
      V::store(w + i, exp(v - m));
    }
  }
};
#endif

/// The maximum of x[b, e) (NaN ignored, -inf if empty), as lanes_max computes it, in vectors of VB
/// bytes (four independent ones per step).
template <class T, int VB>
inline T max_of(const T* x, index_t b, index_t e) {
  using V = Vec<T, VB>;
  constexpr index_t W = VB / index_t(sizeof(T));
  constexpr int U = 4;
  typename V::type m[U], v;
  for (int u = 0; u < U; ++u) V::fill(m[u], -infinity<T>());
  index_t i = b;
  for (; i + U * W <= e; i += U * W)
    for (int u = 0; u < U; ++u) {
      V::load(v, x + i + u * W);
      V::max(m[u], v);
    }
  for (; i + W <= e; i += W) {
    V::load(v, x + i);
    V::max(m[0], v);
  }
  for (int h = U / 2; h >= 1; h /= 2)
    for (int u = 0; u < h; ++u) V::max(m[u], m[u + h]);
  T r = reduce_lanes<T, VB, MaxOp>(m[0]);
  for (; i < e; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

/// The weights of a tile against its maximum m, summed as serial_tile_state sums them: its 16
/// lanes, as NL vectors of VB bytes held in registers (one vector type of all 16 would live in
/// memory when it is wider than a register: fp64 on AVX-512), and the elements past the last full
/// group of 16 in `tail`.
template <class T, int VB>
struct TileLanes {
  using V = Vec<T, VB>;
  static constexpr int W = VB / int(sizeof(T));
  static constexpr int NL = serial_lanes / W > 0 ? serial_lanes / W : 1;
  static_assert(NL * W == serial_lanes, "kflash: the lanes must fill whole vectors");
  typename V::type lanes[NL];
  SoftmaxState<T> tail;

  /// Adds exp(x[i] - m), i in [b, e) (stored through `store`), for a finite m.
  template <class Store>
  void add_weights(const T* x, index_t b, index_t e, T m, const Store& store) {
    for (int u = 0; u < NL; ++u) V::fill(lanes[u], T(0));
    tail = SoftmaxState<T>::identity();
    const index_t full = b + (e - b) / serial_lanes * serial_lanes;
    typename V::type w;
    for (index_t i = b; i < full; i += serial_lanes) {
      T wl[serial_lanes];
      LaneExp<T, VB>::template apply<serial_lanes>(x + i, m, wl);
      for (int l = 0; l < serial_lanes; ++l) store(i + l, wl[l]);
      for (int u = 0; u < NL; ++u) {
        V::load(w, wl + u * W);
        lanes[u] += w;
      }
    }
    for (index_t i = full; i < e; ++i) {
      const T wi = exp_nonpositive(x[i] - m);
      store(i, wi);
      tail.add_term(wi);
    }
  }

  /// The tile's state: the tail plus the lanes, by lanes_add_terms' tree.
  SoftmaxState<T> state(T m) {
    for (int h = NL / 2; h >= 1; h /= 2)  // the tree's first levels: lane l + lane l + h * W
      for (int u = 0; u < h; ++u) lanes[u] += lanes[u + h];
    SoftmaxState<T> sum = tail;
    sum.add_term(reduce_lanes<T, VB, AddOp>(lanes[0]));  // its last levels
    return SoftmaxState<T>{m, sum.sum, sum.comp};
  }
};

/// serial_tile_state of x[b, e) with vectors: the maximum, then the weights (TileLanes). The same
/// operations in the same order, so the same state. A tile whose maximum is infinite (or that is
/// empty) takes the shared code.
template <class T, int VB, class Store>
inline SoftmaxState<T> tile_state(const T* x, index_t b, index_t e, const Store& store) {
  const T m = max_of<T, VB>(x, b, e);
  if (!(m - m == T(0))) return serial_tile_state<T>(m, b, e, Load<T>{x}, store);
  TileLanes<T, VB> lanes;
  lanes.add_weights(x, b, e, m, store);
  return lanes.state(m);
}

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

/// The write passes: y[i] = f(x[i]), i in [0, n); with `stream`, through non-temporal stores.
template <class T>
struct ProbOf {
  T shift, inv_sum;
  T operator()(T v) const { return exp_nonpositive(v - shift) * inv_sum; }
};
template <class T>
struct LogProbOf {
  T shift, log_sum;
  T operator()(T v) const { return (v - shift) - log_sum; }
};
template <class T>
struct Scaled {  // softmax's weights, stored in the state pass
  T factor;
  T operator()(T v) const { return v * factor; }
};

/// w[l] = f(v[l]), l in [0, N): a vector's lanes.
template <class T, int VB, int N, class F>
inline void apply_lanes(const F& f, const T* v, T* w) {
  for (int l = 0; l < N; ++l) w[l] = f(v[l]);
}
template <class T, int VB, int N>
inline void apply_lanes(const ProbOf<T>& f, const T* v, T* w) {
  LaneExp<T, VB>::template apply<N>(v, f.shift, w);
  for (int l = 0; l < N; ++l) w[l] *= f.inv_sum;
}

/// y[j] = f(x[j]) for the whole vectors of [i, n), each written by Out::store; returns where they end.
/// In groups of a vector (x and y may be the same row, never partly overlapping ones: a group is
/// read whole before it is written, and the compiler needs no test of their overlap). x's group
/// goes through a vector and an aligned copy: read as x[i + l], GCC 12 loads it one element at a
/// time, and copied by memcpy, in two halves that a whole-vector load then waits for (AVX2, whose
/// generic tuning splits unaligned 32-byte accesses).
template <class T, int VB, class Out, class F>
inline index_t write_vectors(const T* x, T* y, index_t i, index_t n, const F& f) {
  using V = Vec<T, VB>;
  constexpr int W = VB / int(sizeof(T));
  alignas(VB) T xl[W];
  T w[W];
  typename V::type v;
  for (; i + W <= n; i += W) {
    V::load(v, x + i);
    V::store(xl, v);
    apply_lanes<T, VB, W>(f, xl, w);
    V::load(v, w);
    Out::store(y + i, v);
  }
  return i;
}

template <class T, int VB, class F>
inline void write_pass(const T* x, T* y, index_t n, const F& f, bool stream, bool fence = true) {
  using S = Stream<T, VB>;
  index_t i = 0;
  if (stream && S::available) {
    for (; i < n && reinterpret_cast<std::uintptr_t>(y + i) % VB != 0; ++i) y[i] = f(x[i]);
    i = write_vectors<T, VB, S>(x, y, i, n, f);
    if (fence) S::fence();
  } else {
    i = write_vectors<T, VB, Vec<T, VB>>(x, y, i, n, f);
  }
  for (; i < n; ++i) y[i] = f(x[i]);
}

/// Asks for the tile after next of x[0, n) (from x + e on) while this one is computed: the tile
/// loops alternate a memory-bound pass (the maximum) with a compute-bound one (the weights).
template <class T>
inline void prefetch_ahead(const T* x, index_t e, index_t n) {
#if defined(__GNUC__) || defined(__clang__)
  constexpr index_t line = 64 / sizeof(T);
  const index_t b = e + row_tile;
  const index_t end = b + row_tile < n ? b + row_tile : n;
  for (index_t i = b; i < end; i += line) __builtin_prefetch(x + i);
#else
  (void)x, (void)e, (void)n;
#endif
}

/// The state pass over x[0, n), a tile at a time. With w, the weights exp(x - tile max) go to
/// w[0, n) and tile t's maximum to tile_max[t].
template <class T, int VB>
struct StatePass {
  const T* x;
  index_t n;
  T* w = nullptr;
  T* tile_max = nullptr;
  SoftmaxState<T> state = SoftmaxState<T>::identity();

  /// The tile from b (a multiple of row_tile).
  void tile(index_t b) {
    const index_t e = b + row_tile < n ? b + row_tile : n;
    prefetch_ahead(x, e, n);
    SoftmaxState<T> t;
    if (w != nullptr) {
      t = tile_state<T, VB>(x, b, e, Store<T>{w});
      tile_max[b / row_tile] = t.max;
    } else {
      t = tile_state<T, VB>(x, b, e, NoStore<T>{});
    }
    if (b == 0) {
      state = t;  // merging into the identity would only cost two exps
    } else {
      state.merge(t);
    }
  }
  void all() {
    for (index_t b = 0; b < n; b += row_tile) tile(b);
  }
};

template <class T, int VB>
void run_row(RowTask<T>& t) {
  const T* x = t.x;
  T* y = t.y;
  const index_t n = t.n;
  switch (t.step) {
    case RowStep::state: {
      StatePass<T, VB> pass{x, n};
      pass.all();
      t.result = pass.state;
      break;
    }
    case RowStep::prob:
      write_pass<T, VB>(x, y, n, ProbOf<T>{t.a, t.b}, t.stream);
      break;
    case RowStep::log_prob:
      write_pass<T, VB>(x, y, n, LogProbOf<T>{t.a, t.b}, t.stream);
      break;
  }
}

/// log(l) for l in [1, 2^1023] (the total of a finished state of finite entries: its maximum
/// weighs exactly 1), in double, written so that loops over it vectorise (libm's log is a call per
/// row, which perf put at 30 % of a 64-element row). l = 2^e f with f in [sqrt(1/2), sqrt(2)), t = f - 1
/// (exact), s = t / (2 + t), log f = 2 atanh(s) = t - (t^2/2 - s (t^2/2 + R(s^2))), R by its series
/// (s^2 <= 0.0295: the terms left out are below 1e-17 of the result); e ln2 in two parts.
inline double log_of_total(double l) {
  using bits_type = std::int64_t;
  constexpr bits_type sqrt_half_bits = 0x3fe6a09e667f3bcdLL;  // sqrt(1/2) rounded down
  constexpr bits_type one_bits = 0x3ff0000000000000LL;
  constexpr bits_type mantissa = (bits_type(1) << 52) - 1;
  constexpr double ln2_hi = 0.693147180369123816490;  // 32 significant bits: e * ln2_hi is exact
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  // Adding 1 - sqrt(1/2) to the bits carries into the exponent exactly when f >= sqrt(2).
  const bits_type u = bits_as<bits_type>(l) + (one_bits - sqrt_half_bits);
  const bits_type e = (u >> 52) - 1023;  // in [0, 1023]
  const double f = bits_as<double>((u & mantissa) + sqrt_half_bits);
  // e as a double without an integer conversion (which AVX2 lacks for 64-bit integers).
  const double ed = bits_as<double>(bits_type(0x4330000000000000LL) | e) - 4503599627370496.0;
  const double t = f - 1.0;
  const double s = t / (2.0 + t);
  const double z = s * s;
  double r = 2.0 / 21.0;  // R(z) = sum_{k=1..10} 2 z^k / (2k + 1), by Horner's rule
  r = 2.0 / 19.0 + z * r;
  r = 2.0 / 17.0 + z * r;
  r = 2.0 / 15.0 + z * r;
  r = 2.0 / 13.0 + z * r;
  r = 2.0 / 11.0 + z * r;
  r = 2.0 / 9.0 + z * r;
  r = 2.0 / 7.0 + z * r;
  r = 2.0 / 5.0 + z * r;
  r = 2.0 / 3.0 + z * r;
  r *= z;
  const double half_t2 = 0.5 * t * t;
  return ed * ln2_hi + ((ed * ln2_lo) + (t - (half_t2 - s * (half_t2 + r))));
}

/// Rows of at most one tile are taken this many at a time: their states first, then the logs that
/// logsumexp and log_softmax need, in vectors (log_of_total), then their outputs.
constexpr index_t short_group = 16;

/// Rows [r0, r0 + g) of blk (g <= short_group), each of at most one tile: the finish of
/// softmax_stored or of the two passes without their tile loops (the same operations, but for the
/// log: log_of_total rather than libm's, within an ulp of it).
template <class T, int VB>
void short_rows(const RowBlock<T>& blk, index_t r0, index_t g) {
  // tile_state of each row, step by step across the rows: each step's chains of dependent
  // operations (the lanes' trees, the exp polynomials) are short, and the rows' chains overlap.
  const index_t n = blk.cols;
  const bool softmax = blk.op == RowOp::softmax;
  const T* x[short_group];
  T* y[short_group];
  T m[short_group];
  for (index_t i = 0; i < g; ++i) {
    x[i] = blk.x + (r0 + i) * blk.ldx;
    y[i] = softmax || blk.op == RowOp::log_softmax ? blk.y + (r0 + i) * blk.ldy : nullptr;
    m[i] = max_of<T, VB>(x[i], 0, n);
  }
  TileLanes<T, VB> lanes[short_group];
  for (index_t i = 0; i < g; ++i) {
    if (!(m[i] - m[i] == T(0))) continue;  // infinite maximum, or NaN: below
    if (softmax) {
      lanes[i].add_weights(x[i], 0, n, m[i], Store<T>{y[i]});
    } else {
      lanes[i].add_weights(x[i], 0, n, m[i], NoStore<T>{});
    }
  }
  SoftmaxState<T> s[short_group];
  for (index_t i = 0; i < g; ++i) {
    if (m[i] - m[i] == T(0)) {
      s[i] = lanes[i].state(m[i]);
    } else if (softmax) {
      s[i] = serial_tile_state<T>(m[i], index_t(0), n, Load<T>{x[i]}, Store<T>{y[i]});
    } else {
      s[i] = serial_tile_state<T>(m[i], index_t(0), n, Load<T>{x[i]}, NoStore<T>{});
    }
  }
  if (softmax) {
    for (index_t i = 0; i < g; ++i) {
      const T f = SoftmaxState<T>::weight(s[i].max, s[i].max) * SoftmaxNormalizer<T>(s[i]).inv_sum;
      for (index_t j = 0; j < n; ++j) y[i][j] *= f;
    }
    return;
  }
  double l[short_group], log_l[short_group];
  bool usual[short_group];  // the others (NaN, +inf, an empty row, fp64 beyond 2^1023): as before
  for (index_t i = 0; i < short_group; ++i) {
    const T total = i < g ? s[i].total() : T(1);
    usual[i] = total >= T(1) && double(total) <= 0x1p1023 && (i >= g || s[i].max - s[i].max == T(0));
    l[i] = usual[i] ? double(total) : 1.0;
  }
  for (index_t i = 0; i < short_group; ++i) log_l[i] = log_of_total(l[i]);
  for (index_t i = 0; i < g; ++i) {
    if (blk.op == RowOp::logsumexp) {
      blk.out[(r0 + i) * blk.ldout] = usual[i] ? T(double(s[i].max) + log_l[i]) : s[i].logsumexp();
    } else {
      SoftmaxNormalizer<T> norm(s[i], Normalize::log_prob);
      if (usual[i]) norm.log_sum = T(log_l[i]);
      write_pass<T, VB>(x[i], y[i], n, LogProbOf<T>{norm.shift, norm.log_sum}, false);
    }
  }
}

/// write_pass over x[0, n) a tile at a time, each tile followed by the same tile of `beside`'s
/// state pass (if any; its row has n elements too). With `stream`, the write pass's tiles start
/// where y is aligned (after the first): each tile then stores vectors only.
template <class T, int VB, class F>
void write_pass_beside(const T* x, T* y, index_t n, const F& f, bool stream, StatePass<T, VB>* beside) {
  if (beside == nullptr) {
    write_pass<T, VB>(x, y, n, f, stream);
    return;
  }
  index_t head = 0;
  while (stream && head < n && reinterpret_cast<std::uintptr_t>(y + head) % VB != 0) ++head;
  index_t wb = 0;
  for (index_t b = 0; b < n; b += row_tile) {
    const index_t we = b + row_tile + head < n ? b + row_tile + head : n;
    write_pass<T, VB>(x + wb, y + wb, we - wb, f, stream, false);
    wb = we;
    beside->tile(b);
  }
  if (stream) Stream<T, VB>::fence();
}

/// softmax's write pass after a state pass that stored its weights (`done`): y = w exp(tile max -
/// row max) / l a tile at a time, each tile followed by the same tile of `beside`'s state pass (if
/// any; its row has n elements too, and its weights may go where done's were: each tile is
/// scaled before `beside` computes it). y may be done's w (in place).
template <class T, int VB>
void scale_pass_beside(const StatePass<T, VB>& done, T* y, bool stream, StatePass<T, VB>* beside) {
  const T inv_sum = SoftmaxNormalizer<T>(done.state).inv_sum;
  for (index_t b = 0; b < done.n; b += row_tile) {
    const index_t e = b + row_tile < done.n ? b + row_tile : done.n;
    const T f = SoftmaxState<T>::weight(done.tile_max[b / row_tile], done.state.max) * inv_sum;
    write_pass<T, VB>(done.w + b, y + b, e - b, Scaled<T>{f}, stream, false);
    if (beside != nullptr) beside->tile(b);
  }
  if (stream) Stream<T, VB>::fence();
}

template <class T, int VB>
void run_rows(RowBlock<T>& blk) {
  const index_t n = blk.cols;
  if (n <= row_tile) {
    for (index_t r = 0; r < blk.rows; r += short_group)
      short_rows<T, VB>(blk, r, blk.rows - r < short_group ? blk.rows - r : short_group);
    return;
  }
  if (blk.op == RowOp::softmax && n * index_t(sizeof(T)) <= stored_weights_bytes && !blk.stream) {
    // One exp per element: the weights in y, scaled in place while the row is still in cache.
    T tile_max[stored_weights_bytes / sizeof(T) / row_tile];
    for (index_t r = 0; r < blk.rows; ++r) {
      T* y = blk.y + r * blk.ldy;
      StatePass<T, VB> pass{blk.x + r * blk.ldx, n, y, tile_max};
      pass.all();
      scale_pass_beside<T, VB>(pass, y, false, nullptr);
    }
    return;
  }
  // The state pass of each row, then its write pass (softmax, log_softmax). The write pass of row r
  // runs a tile at a time alongside the state pass of row r + 1: the reads of one and the writes
  // of the other share the memory system, instead of taking turns.
  // softmax rows with a RowBlock::weights keep their weights there (one exp per element). One
  // row's room is enough: each tile of row r is scaled into y before row r + 1's tile overwrites it.
  if (blk.rows <= 0) return;
  const bool stored = blk.op == RowOp::softmax && blk.weights != nullptr;
  auto pass_of = [&](index_t r) {
    return StatePass<T, VB>{blk.x + r * blk.ldx, n, stored ? blk.weights : nullptr, stored ? blk.weights + n : nullptr};
  };
  StatePass<T, VB> next = pass_of(0);
  next.all();
  for (index_t r = 0; r < blk.rows; ++r) {
    const T* x = blk.x + r * blk.ldx;
    const StatePass<T, VB> done = next;
    const SoftmaxState<T> s = done.state;
    const bool more = r + 1 < blk.rows;
    if (more) next = pass_of(r + 1);
    if (stored) {
      scale_pass_beside<T, VB>(done, blk.y + r * blk.ldy, blk.stream, more ? &next : nullptr);
      continue;
    }
    if (blk.op == RowOp::logsumexp) {
      blk.out[r * blk.ldout] = s.logsumexp();
      if (more) next.all();
      continue;
    }
    const SoftmaxNormalizer<T> norm(s, blk.op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
    T* y = blk.y + r * blk.ldy;
    if (blk.op == RowOp::softmax) {
      write_pass_beside<T, VB>(x, y, n, ProbOf<T>{norm.shift, norm.inv_sum}, blk.stream, more ? &next : nullptr);
    } else {
      write_pass_beside<T, VB>(x, y, n, LogProbOf<T>{norm.shift, norm.log_sum}, blk.stream, more ? &next : nullptr);
    }
  }
}

/// c (+)= a b for an R x (NV vectors of VB bytes) block: a (R x K, lda), b (K x C, ldb), c (R x C,
/// ldc), C = NV * VB / sizeof(T). The accumulators are R x NV vectors; each step of k loads NV
/// vectors of b and broadcasts one element of a per row.
template <class T, int R, int NV, int VB, bool Accumulate>
inline void gemm_block(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t K) {
  using V = Vec<T, VB>;
  constexpr int W = VB / int(sizeof(T));
  typename V::type acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) {
      if (Accumulate) {
        V::load(acc[r][j], c + r * ldc + j * W);
      } else {
        V::zero(acc[r][j]);
      }
    }
  for (index_t k = 0; k < K; ++k) {
    typename V::type bk[NV];
    for (int j = 0; j < NV; ++j) V::load(bk[j], b + k * ldb + j * W);
    for (int r = 0; r < R; ++r) {
      const T ar = a[r * lda + k];
      for (int j = 0; j < NV; ++j) V::fma(acc[r][j], ar, bk[j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) V::store(c + r * ldc + j * W, acc[r][j]);
}

/// c (+)= a b for M x N (N a multiple of the block's C columns) by blocks of R rows; the last M % R
/// rows one by one.
template <class T, int R, int NV, int VB, bool Accumulate>
inline void gemm(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                 index_t K) {
  constexpr index_t C = NV * VB / index_t(sizeof(T));
  index_t i = 0;
  for (; i + R <= M; i += R)
    for (index_t j = 0; j < N; j += C)
      gemm_block<T, R, NV, VB, Accumulate>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, K);
  for (; i < M; ++i)
    for (index_t j = 0; j < N; j += C)
      gemm_block<T, 1, NV, VB, Accumulate>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, K);
}

/// c = a b^T for an R x J block: a (R x K, lda), b (J x K, ldb), both read along K in vectors of
/// VB bytes (R x J accumulators, summed across lanes at the end).
template <class T, int VB, int R, int J>
inline void gemm_nt_block(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t K) {
  using V = Vec<T, VB>;
  constexpr index_t W = VB / index_t(sizeof(T));
  typename V::type acc[R][J], av[R], bv[J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) V::fill(acc[r][j], T(0));
  index_t d = 0;
  for (; d + W <= K; d += W) {
    for (int r = 0; r < R; ++r) V::load(av[r], a + r * lda + d);
    for (int j = 0; j < J; ++j) V::load(bv[j], b + j * ldb + d);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < J; ++j) V::fma(acc[r][j], av[r], bv[j]);
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) {
      T sum = reduce_lanes<T, VB, AddOp>(acc[r][j]);
      for (index_t e = d; e < K; ++e) sum += a[r * lda + e] * b[j * ldb + e];
      c[r * ldc + j] = sum;
    }
}

/// c = a b^T for M x N (a: M x K, b: N x K, any M, N) by R x J blocks, the edges by thinner ones.
template <class T, int VB, int R, int J>
inline void gemm_nt(const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, index_t M, index_t N,
                    index_t K) {
  index_t i = 0;
  for (; i + R <= M; i += R) {
    index_t j = 0;
    for (; j + J <= N; j += J) gemm_nt_block<T, VB, R, J>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
    for (; j < N; ++j) gemm_nt_block<T, VB, R, 1>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
  }
  for (; i < M; ++i) {
    index_t j = 0;
    for (; j + J <= N; j += J) gemm_nt_block<T, VB, 1, J>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
    for (; j < N; ++j) gemm_nt_block<T, VB, 1, 1>(a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, K);
  }
}

template <class T, int R, int NV, int VB>
void attention_tile(AttentionTile<T>& t) {
  static_assert(attention_pad % (NV * VB / int(sizeof(T))) == 0,
                "kflash: the attention tiles' padding must be a multiple of the register block's columns");
  if (t.k != nullptr) {  // scores of the nk keys, from K's rows in place
    gemm_nt<T, VB, 4, 4>(t.q, t.D, t.k, t.ldk, t.s, t.bk, t.rows, t.nk, t.D);
  } else {  // scores for all bk columns of kt (columns past nk hold leftovers and are never read)
    gemm<T, R, NV, VB, false>(t.q, t.D, t.kt, t.bk, t.s, t.bk, t.rows, t.bk, t.D);
  }
  for (index_t r = 0; r < t.rows; ++r) {
    T* s = t.s + r * t.bk;
    T* o = t.o + r * t.dvp;
    const index_t valid = t.valid[r];
    T fa = T(1), fb = T(0);
    if (valid > 0) {
      const SoftmaxState<T> tile = tile_state<T, VB>(s, index_t(0), valid, Store<T>{s});
      t.state[r].merge(tile, fa, fb);
    }
    for (index_t j = 0; j < valid; ++j) s[j] *= fb;
    for (index_t j = valid; j < t.nk; ++j) s[j] = T(0);
    for (index_t d = 0; d < t.dvp; ++d) o[d] *= fa;
  }
  gemm<T, R, NV, VB, true>(t.s, t.bk, t.v, t.ldv, t.o, t.dvp, t.rows, t.dvp, t.nk);
}

// One variant per instruction set: the same bodies, with register blocks of `rows` rows x 2 vectors
// of the set's width (8 accumulators of 16 SSE / AVX2 registers, 16 of 32 AVX-512 ones). Measured
// on a 32 x 64 x 64 tile, AVX-512: 4 rows 67 / 47 GFLOP/s (fp32 / fp64), 8 rows 84 / 47.
#define KFLASH_IMPL_VARIANT(name, attributes, vector_bytes, rows)                                   \
  attributes void name(RowTask<float>& t) { run_row<float, vector_bytes>(t); }                      \
  attributes void name(RowTask<double>& t) { run_row<double, vector_bytes>(t); }                    \
  attributes void name(RowBlock<float>& t) { run_rows<float, vector_bytes>(t); }                    \
  attributes void name(RowBlock<double>& t) { run_rows<double, vector_bytes>(t); }                  \
  attributes void name(AttentionTile<float>& t) { attention_tile<float, rows, 2, vector_bytes>(t); } \
  attributes void name(AttentionTile<double>& t) { attention_tile<double, rows, 2, vector_bytes>(t); }

KFLASH_IMPL_VARIANT(run_baseline, KFLASH_IMPL_FLATTEN, 16, 4)
#ifdef KFLASH_IMPL_X86_VARIANTS
KFLASH_IMPL_VARIANT(run_avx2, __attribute__((target("avx2,fma"), flatten)), 32, 4)
KFLASH_IMPL_VARIANT(run_avx512, __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"), flatten)),
                    64, 8)
#endif
#undef KFLASH_IMPL_VARIANT

Isa detect_isa() {
  Isa best = Isa::baseline;
#ifdef KFLASH_IMPL_X86_VARIANTS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::avx2;
  if (best == Isa::avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
    best = Isa::avx512;
#endif
  const char* wanted = std::getenv("KFLASH_HOST_ISA");
  if (wanted == nullptr || *wanted == '\0') return best;
  for (Isa candidate : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (std::strcmp(wanted, isa_name(candidate)) != 0) continue;
    if (int(candidate) <= int(best)) return candidate;
    std::fprintf(stderr, "kflash: KFLASH_HOST_ISA=%s is not supported by this CPU or build; using %s\n", wanted,
                 isa_name(best));
    return best;
  }
  std::fprintf(stderr, "kflash: KFLASH_HOST_ISA=%s is not one of baseline, avx2, avx512; using %s\n", wanted,
               isa_name(best));
  return best;
}

template <class Task>
void dispatch(Task& task) {
  switch (isa()) {
#ifdef KFLASH_IMPL_X86_VARIANTS
    case Isa::avx512: run_avx512(task); return;
    case Isa::avx2: run_avx2(task); return;
#endif
    default: run_baseline(task); return;
  }
}

}  // namespace

Isa isa() {
  static const Isa value = detect_isa();
  return value;
}

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "baseline";
  }
}

void run(RowTask<float>& task) { dispatch(task); }
void run(RowTask<double>& task) { dispatch(task); }
void run(RowBlock<float>& block) { dispatch(block); }
void run(RowBlock<double>& block) { dispatch(block); }
void run(AttentionTile<float>& tile) { dispatch(tile); }
void run(AttentionTile<double>& tile) { dispatch(tile); }

}  // namespace kflash::impl::host
