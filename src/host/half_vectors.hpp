// 16-bit storage in the host kernels' vectors (kflash::bhalf_t and kflash::half_t by their bits,
// as impl/half_types.hpp's Bfloat16 and Float16): loads widened to float (Operand) and float vectors
// rounded back once, to nearest even (GUIDE §9). bf16 by integer shifts and the rounding's carry,
// fp16 by the F16C / AVX-512 conversion instructions where the variant has them, else element by
// element through kflash's own types, which the vector forms reproduce bit for bit. Also the loads
// of a row's values shorter than a vector, of every storage type (PartialOperand).
#pragma once

#include "vector.hpp"

#include <kflash/impl/half_types.hpp>
#include <kflash/impl/host/host_kernels.hpp>

#include <cstdint>
#include <type_traits>

namespace kflash::impl::host::internal {

#ifdef KFLASH_IMPL_VECTOR_EXT
/// A vector of VB bytes of 32-bit words, and the vector of its lanes' 16-bit halves.
template <int VB>
struct Words16 {
  typedef std::uint16_t half __attribute__((vector_size(VB / 2)));
  typedef std::uint32_t word __attribute__((vector_size(VB)));
};
#endif

#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
// (The zero-masking forms: GCC 12 takes the plain ones' undefined source for an uninitialised read.)
// (Results by reference: a vector returned by value would change the ABI where the caller's
// instruction set lacks it, GCC warns.)
__attribute__((target("avx512f"))) inline void widened_fp16_16(const std::uint16_t* x, __m512& y) {
  y = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}
__attribute__((target("avx512f"))) inline void narrow_fp16_16(const __m512& x, std::uint16_t* y) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y),
                      _mm512_maskz_cvtps_ph(0xFFFF, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("f16c"))) inline void narrow_fp16_1(float x, std::uint16_t* y) {
  *y = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
__attribute__((target("avx,f16c"))) inline void widened_fp16_8(const std::uint16_t* x, __m256& y) {
  y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
__attribute__((target("avx,f16c"))) inline void narrow_fp16_8(const __m256& x, std::uint16_t* y) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// bf16 on AVX-512 by the instructions themselves (one zero extension, one truncation): GCC 12
// lowers the vector-extension forms below to four instructions more each way.
__attribute__((target("avx512f"))) inline void widened_bf16_16(const std::uint16_t* x, __m512& y) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  y = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, w, 16));
}
// A row's first `count` values as a vector's lanes [0, count), -inf in the others (count < 0 or >
// the lanes: none or all): masked loads, which read nothing at or past x + count (faults included),
// in registers; lanes built one by one in memory and read back as a vector wait for those stores.
inline unsigned lanes_mask(int count, int lanes) {
  return count <= 0 ? 0u : count >= lanes ? (1u << lanes) - 1 : (1u << count) - 1;
}
__attribute__((target("avx512f"))) inline void partial_f32_16(const float* x, int count, __m512& y) {
  y = _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), __mmask16(lanes_mask(count, 16)), x);
}
__attribute__((target("avx512f"))) inline void partial_f64_8(const double* x, int count, __m512d& y) {
  y = _mm512_mask_loadu_pd(_mm512_set1_pd(-__builtin_inf()), __mmask8(lanes_mask(count, 8)), x);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void partial_bf16_16(const std::uint16_t* x, int count,
                                                                                  __m512& y) {
  const __mmask16 k = __mmask16(lanes_mask(count, 16));
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(k, x));
  const __m512 widened = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, w, 16));
  y = _mm512_mask_mov_ps(_mm512_set1_ps(-__builtin_inff()), k, widened);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void partial_fp16_16(const std::uint16_t* x, int count,
                                                                                  __m512& y) {
  const __mmask16 k = __mmask16(lanes_mask(count, 16));
  const __m512 widened = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_maskz_loadu_epi16(k, x));
  y = _mm512_mask_mov_ps(_mm512_set1_ps(-__builtin_inff()), k, widened);
}
__attribute__((target("avx2"))) inline void partial_f32_8(const float* x, int count, __m256& y) {
  const __m256i take = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  y = _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), _mm256_maskload_ps(x, take), _mm256_castsi256_ps(take));
}
__attribute__((target("avx2"))) inline void partial_f64_4(const double* x, int count, __m256d& y) {
  const __m256i take = _mm256_cmpgt_epi64(_mm256_set1_epi64x(count), _mm256_setr_epi64x(0, 1, 2, 3));
  y = _mm256_blendv_pd(_mm256_set1_pd(-__builtin_inf()), _mm256_maskload_pd(x, take), _mm256_castsi256_pd(take));
}

/// Read once per vector by narrow_bf16_16 (a call there would cost more than the rounding).
inline const bool rounds_bf16_by_instruction = bf16_rounding_instruction();

/// Bfloat16::from_float's steps on 16 lanes: x + 0x7FFF + (bit 16 of x), shifted down 16; NaN
/// lanes keep their top half, quiet. AVX512-BF16's vcvtneps2bf16 takes the same steps in one
/// instruction (bit for bit, checked over every fp32 pattern), except that it takes subnormal lanes
/// as zero: where it is allowed, vectors without a subnormal lane go through it. Inline assembly:
/// the avx512 variant also runs on CPUs without it.
__attribute__((target("avx512f,avx512dq"))) inline void narrow_bf16_16(const __m512& x, std::uint16_t* y) {
  if (rounds_bf16_by_instruction && _mm512_fpclass_ps_mask(x, 0x20 /* subnormal */) == 0) {
    __m256i r;
    __asm__("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(x));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), r);
    return;
  }
  const __m512i u = _mm512_castps_si512(x), top = _mm512_maskz_srli_epi32(0xFFFF, u, 16);
  const __m512i odd = _mm512_and_si512(top, _mm512_set1_epi32(1));
  __m512i r =
      _mm512_maskz_srli_epi32(0xFFFF, _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), top, _mm512_set1_epi32(0x40));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_maskz_cvtepi32_epi16(0xFFFF, r));
}
/// vcvtne2ps2bf16's rounding of a (the low half) and b into r, where it is allowed (neither has a
/// subnormal lane): false (r unset) where not.
__attribute__((target("avx512f,avx512dq"))) inline bool rounded_bf16_32(const __m512& a, const __m512& b,
                                                                       __m512i& r) {
  if (!rounds_bf16_by_instruction ||
      (_mm512_fpclass_ps_mask(a, 0x20 /* subnormal */) | _mm512_fpclass_ps_mask(b, 0x20)) != 0)
    return false;
  __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(b), "v"(a));
  return true;
}
/// narrow_bf16_16 on two vectors at once, a at y and b at y + 16: one instruction rounds both and
/// one 64-byte store writes them where rounded_bf16_32 allows.
__attribute__((target("avx512f,avx512dq"))) inline void narrow_bf16_32(const __m512& a, const __m512& b,
                                                                       std::uint16_t* y) {
  __m512i r;
  if (rounded_bf16_32(a, b, r)) {
    _mm512_storeu_si512(y, r);
    return;
  }
  narrow_bf16_16(a, y);
  narrow_bf16_16(b, y + 16);
}
/// The same through a non-temporal store (y aligned to 64 bytes) where rounded_bf16_32 allows:
/// false (nothing stored) where not.
__attribute__((target("avx512f,avx512dq"))) inline bool stream_bf16_32(const __m512& a, const __m512& b,
                                                                      std::uint16_t* y) {
  __m512i r;
  if (!rounded_bf16_32(a, b, r)) return false;
  _mm512_stream_si512(reinterpret_cast<__m512i*>(y), r);
  return true;
}
#endif

/// f(storage) with storage a null B* of `format`'s type (Bfloat16, Float16): the 16-bit kernels'
/// one switch from the format to the type.
template <class F>
inline decltype(auto) with_storage(Storage16 format, const F& f) {
  if (format == Storage16::bf16) return f(static_cast<Bfloat16*>(nullptr));
  return f(static_cast<Float16*>(nullptr));
}

/// bfloat16 operands widened to float as they load: by integer shifts.
template <int VB>
struct Operand<float, VB, Bfloat16> {
  static void load(typename Vec<float, VB>::type& v, const Bfloat16* p) {
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
    if constexpr (VB == 64) {
      __m512 w;
      widened_bf16_16(&p->bits, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    }
#endif
#ifdef KFLASH_IMPL_VECTOR_EXT
    using Half = typename Words16<VB>::half;
    using Word = typename Words16<VB>::word;
    Half h;
    __builtin_memcpy(&h, p, sizeof h);
    const Word w = __builtin_convertvector(h, Word) << 16;
    __builtin_memcpy(&v, &w, sizeof w);
#else
    float e[VB / 4];
    for (int i = 0; i < VB / 4; ++i) e[i] = element(p[i]);
    Vec<float, VB>::load(v, e);
#endif
  }
  static float element(const Bfloat16& x) { return bits_float(std::uint32_t(x.bits) << 16); }
};

/// binary16 operands widened to float as they load: by the AVX-512 / F16C conversions where the
/// variant has them, else element by element.
template <int VB>
struct Operand<float, VB, Float16> {
  static void load(typename Vec<float, VB>::type& v, const Float16* p) {
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
    if constexpr (VB == 64) {
      __m512 w;
      widened_fp16_16(&p->bits, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    } else if constexpr (VB == 32) {
      __m256 w;
      widened_fp16_8(&p->bits, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    }
#endif
    float e[VB / 4];
    for (int i = 0; i < VB / 4; ++i) e[i] = element(p[i]);
    Vec<float, VB>::load(v, e);
  }
  static float element(const Float16& x) { return Float16::to_float(x.bits); }
};

/// A vector of T from a row stored as B: its values [0, count) in lanes [0, count), -inf in the
/// others; nothing from p + count on is read (count may be 0 or below: every lane -inf, no read).
/// By the masked loads above where the variant has them, else element by element.
template <class T, int VB, class B>
struct PartialOperand {
  static void load(typename Vec<T, VB>::type& v, const B* p, index_t count) {
    constexpr int W = VB / int(sizeof(T));
    const int c = count <= 0 ? 0 : count >= W ? W : int(count);
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
    constexpr bool same = std::is_same<T, B>::value;
    if constexpr (VB == 64 && same && std::is_same<T, float>::value) {
      __m512 w;
      partial_f32_16(p, c, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    } else if constexpr (VB == 64 && same && std::is_same<T, double>::value) {
      __m512d w;
      partial_f64_8(p, c, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    } else if constexpr (VB == 64 && std::is_same<B, Bfloat16>::value) {
      __m512 w;
      partial_bf16_16(&p->bits, c, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    } else if constexpr (VB == 64 && std::is_same<B, Float16>::value) {
      __m512 w;
      partial_fp16_16(&p->bits, c, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    } else if constexpr (VB == 32 && same && std::is_same<T, float>::value) {
      __m256 w;
      partial_f32_8(p, c, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    } else if constexpr (VB == 32 && same && std::is_same<T, double>::value) {
      __m256d w;
      partial_f64_4(p, c, w);
      __builtin_memcpy(&v, &w, sizeof v);
      return;
    }
#endif
    alignas(VB) T e[W];
    for (int l = 0; l < W; ++l) e[l] = l < c ? Operand<T, VB, B>::element(p[l]) : -infinity<T>();
    Vec<T, VB>::load(v, e);
  }
};

/// y[0, n) = x[0, n) widened to float.
template <int VB>
void widen16(Storage16 f, const std::uint16_t* x, float* y, index_t n) {
  const auto widen = [&](auto format) {
    using B = std::remove_cv_t<std::remove_pointer_t<decltype(format)>>;
    using Load = Operand<float, VB, B>;
    const B* b = reinterpret_cast<const B*>(x);
    constexpr index_t W = VB / 4;
    index_t i = 0;
    for (; i + W <= n; i += W) {
      typename Vec<float, VB>::type v;
      Load::load(v, b + i);
      Vec<float, VB>::store(y + i, v);
    }
    for (; i < n; ++i) y[i] = Load::element(b[i]);
  };
  with_storage(f, widen);
}

/// The vector v rounded to B (Bfloat16, Float16) at y, to nearest even (NaN stays NaN, quiet, its
/// sign kept): bf16 by integer lanes (Bfloat16::from_float's steps), fp16 by the AVX-512 / F16C
/// conversions where the variant has them, else element by element.
template <int VB>
inline void narrow_vector(const typename Vec<float, VB>::type& v, Bfloat16* y) {
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
  if constexpr (VB == 64) {
    __m512 x;
    __builtin_memcpy(&x, &v, sizeof x);
    narrow_bf16_16(x, &y->bits);
    return;
  }
#endif
#ifdef KFLASH_IMPL_VECTOR_EXT
  using Half = typename Words16<VB>::half;
  using Word = typename Words16<VB>::word;
  Word u;
  __builtin_memcpy(&u, &v, sizeof u);
  const Word nan = (Word)((u & 0x7FFFFFFFu) > 0x7F800000u);
  const Word rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const Half h = __builtin_convertvector((rounded & ~nan) | (((u >> 16) | 0x40u) & nan), Half);
  __builtin_memcpy(y, &h, sizeof h);
#else
  for (int l = 0; l < VB / 4; ++l) y[l].bits = Bfloat16::from_float(Vec<float, VB>::lane(v, l));
#endif
}
template <int VB>
inline void narrow_vector(const typename Vec<float, VB>::type& v, Float16* y) {
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
  if constexpr (VB == 64) {
    __m512 x;
    __builtin_memcpy(&x, &v, sizeof x);
    narrow_fp16_16(x, &y->bits);
    return;
  } else if constexpr (VB == 32) {
    __m256 x;
    __builtin_memcpy(&x, &v, sizeof x);
    narrow_fp16_8(x, &y->bits);
    return;
  }
#endif
  for (int l = 0; l < VB / 4; ++l) y[l].bits = Float16::from_float(Vec<float, VB>::lane(v, l));
}

/// One value into an output of type Y, rounded as narrow_vector rounds a lane: binary16 by F16C's
/// conversion where the variant has it (Float16::from_float's steps cost several times more),
/// else by Y's own conversion.
template <int VB, class T, class Y>
inline void narrow_element(T v, Y* y) {
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
  if constexpr (VB >= 32 && std::is_same<Y, Float16>::value) {
    narrow_fp16_1(float(v), &y->bits);
    return;
  }
#endif
  *y = Y(v);
}

/// The stores of a write pass into 16-bit outputs: each vector rounded once (narrow_vector); where
/// `pairs<B>`, two vectors at once (store_pair: bf16 on AVX-512, narrow_bf16_32).
template <int VB>
struct Narrowing {
  template <class B>
  static void store(B* p, const typename Vec<float, VB>::type& v) {
    narrow_vector<VB>(v, p);
  }
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
  template <class B>
  static constexpr bool pairs = VB == 64 && std::is_same<B, Bfloat16>::value;
  static void store_pair(Bfloat16* p, const typename Vec<float, VB>::type& a, const typename Vec<float, VB>::type& b) {
    __m512 x, y;
    __builtin_memcpy(&x, &a, sizeof x);
    __builtin_memcpy(&y, &b, sizeof y);
    narrow_bf16_32(x, y, &p->bits);
  }
#else
  template <class B>
  static constexpr bool pairs = false;
  template <class B>
  static void store_pair(B*, const typename Vec<float, VB>::type&, const typename Vec<float, VB>::type&) {}
#endif
};

/// The stores of a streaming write pass into 16-bit outputs (Stream's non-temporal stores): two
/// vectors rounded as Narrowing rounds them, into one vector of VB bytes stored at p (aligned to VB).
template <int VB>
struct StreamNarrowing {
  static constexpr bool available = Stream<float, VB>::available;
  template <class B>
  static void store_pair(B* p, const typename Vec<float, VB>::type& a, const typename Vec<float, VB>::type& b) {
#if defined(KFLASH_IMPL_X86_VARIANTS) && defined(KFLASH_IMPL_VECTOR_EXT)
    if constexpr (VB == 64 && std::is_same<B, Bfloat16>::value) {  // in registers where it can
      __m512 x, y;
      __builtin_memcpy(&x, &a, sizeof x);
      __builtin_memcpy(&y, &b, sizeof y);
      if (stream_bf16_32(x, y, &p->bits)) return;
    }
#endif
    constexpr int W = VB / 4;
    alignas(VB) B h[2 * W];
    if constexpr (Narrowing<VB>::template pairs<B>) {
      Narrowing<VB>::store_pair(h, a, b);
    } else {
      Narrowing<VB>::store(h, a);
      Narrowing<VB>::store(h + W, b);
    }
    typename Vec<float, VB>::type v;
    __builtin_memcpy(&v, h, sizeof v);
    Stream<float, VB>::store(reinterpret_cast<float*>(p), v);
  }
};

/// y[0, n) = x[0, n) rounded to nearest even (narrow_vector).
template <int VB>
void narrow16(Storage16 f, const float* x, std::uint16_t* y, index_t n) {
  const auto narrow = [&](auto format) {
    using B = std::remove_pointer_t<decltype(format)>;
    B* b = reinterpret_cast<B*>(y);
    constexpr index_t W = VB / 4;
    index_t i = 0;
    for (; i + W <= n; i += W) {
      typename Vec<float, VB>::type v;
      Vec<float, VB>::load(v, x + i);
      narrow_vector<VB>(v, b + i);
    }
    for (; i < n; ++i) narrow_element<VB>(x[i], b + i);
  };
  with_storage(f, narrow);
}

}  // namespace kflash::impl::host::internal
