// The host kernels of 16-bit rows (kflash::bhalf_t, kflash::half_t by their bits): each block of a
// row is widened to float in a buffer that stays in the L1 cache, goes through the float row
// passes, and its outputs are rounded back once, to nearest even (GUIDE §9). The conversions are
// vector code: bf16 by integer shifts and the rounding's carry, fp16 by the F16C / AVX-512
// conversion instructions where the variant has them, else element by element through kflash's
// own types (impl/half_types.hpp), which the conversions reproduce bit for bit.
#pragma once

#include "row_grads.hpp"
#include "row_passes.hpp"

#include <kflash/impl/half_types.hpp>

#include <cstdint>

namespace kflash::impl::host::internal {

constexpr index_t block16 = HostTraits::widened_block;

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
__attribute__((target("avx512f"))) inline void narrow_fp16_16(const float* x, std::uint16_t* y) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(x),
                                                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("avx,f16c"))) inline void widened_fp16_8(const std::uint16_t* x, __m256& y) {
  y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
__attribute__((target("avx,f16c"))) inline void narrow_fp16_8(const float* x, std::uint16_t* y) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y),
                   _mm256_cvtps_ph(_mm256_loadu_ps(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

/// bfloat16 operands widened to float as they load: by integer shifts.
template <int VB>
struct Operand<float, VB, Bfloat16> {
  static void load(typename Vec<float, VB>::type& v, const Bfloat16* p) {
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
  if (f == Storage16::bf16) widen(static_cast<const Bfloat16*>(nullptr));
  else widen(static_cast<const Float16*>(nullptr));
}

/// y[0, n) = x[0, n) rounded to nearest even (NaN stays NaN, quiet, its sign kept).
template <int VB>
void narrow16(Storage16 f, const float* x, std::uint16_t* y, index_t n) {
  index_t i = 0;
#ifdef KFLASH_IMPL_VECTOR_EXT
  constexpr index_t W = VB / 4;
  if (f == Storage16::bf16) {  // Bfloat16::from_float, by lanes
    using Half = typename Words16<VB>::half;
    using Word = typename Words16<VB>::word;
    for (; i + W <= n; i += W) {
      Word u;
      __builtin_memcpy(&u, x + i, sizeof u);
      const Word nan = (Word)((u & 0x7FFFFFFFu) > 0x7F800000u);
      const Word rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
      const Half h = __builtin_convertvector((rounded & ~nan) | (((u >> 16) | 0x40u) & nan), Half);
      __builtin_memcpy(y + i, &h, sizeof h);
    }
  }
#if defined(KFLASH_IMPL_X86_VARIANTS)
  if constexpr (VB >= 32) {
    if (f == Storage16::fp16) {
      for (; i + W <= n; i += W) {
        if constexpr (VB == 64) narrow_fp16_16(x + i, y + i);
        else narrow_fp16_8(x + i, y + i);
      }
    }
  }
#endif
#endif
  for (; i < n; ++i) y[i] = f == Storage16::bf16 ? Bfloat16::from_float(x[i]) : Float16::from_float(x[i]);
}

template <int VB>
SoftmaxState<float> row_state16(Storage16 f, const std::uint16_t* x, index_t n) {
  alignas(64) float buf[block16];
  SoftmaxState<float> s = SoftmaxState<float>::identity();
  for (index_t i = 0; i < n; i += block16) {
    const index_t m = n - i < block16 ? n - i : block16;
    widen16<VB>(f, x + i, buf, m);
    s.merge(row_state<float, VB>(buf, m));
  }
  return s;
}

template <int VB>
void write_row16(Storage16 f, RowOp op, const std::uint16_t* x, std::uint16_t* y, index_t n,
                 const SoftmaxNormalizer<float>& norm) {
  alignas(64) float buf[block16];
  for (index_t i = 0; i < n; i += block16) {
    const index_t m = n - i < block16 ? n - i : block16;
    widen16<VB>(f, x + i, buf, m);
    write_row<float, VB>(op, buf, buf, m, norm, false);
    narrow16<VB>(f, buf, y + i, m);
  }
}

/// The sum of softmax's or log_softmax's gradient over a 16-bit chunk, widened as it loads.
template <int VB>
SoftmaxState<float> grad_sum16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, index_t n) {
  if (f == Storage16::bf16) {
    return grad_sum<float, VB, Bfloat16>(op, reinterpret_cast<const Bfloat16*>(a), reinterpret_cast<const Bfloat16*>(b),
                                         n);
  }
  return grad_sum<float, VB, Float16>(op, reinterpret_cast<const Float16*>(a), reinterpret_cast<const Float16*>(b), n);
}

/// The gradient's write pass over a 16-bit chunk, block by block (dx may be b).
template <int VB>
void write_grad16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* dx, index_t n,
                  float s) {
  alignas(64) float ab[block16], bb[block16];
  for (index_t i = 0; i < n; i += block16) {
    const index_t m = n - i < block16 ? n - i : block16;
    widen16<VB>(f, a + i, ab, m);
    widen16<VB>(f, b + i, bb, m);
    grad_chunk(op, ab, bb, bb, m, s);
    narrow16<VB>(f, bb, dx + i, m);
  }
}

/// write_scaled_exp over a 16-bit chunk, block by block (y may be x).
template <int VB>
void write_scaled_exp16(Storage16 f, const std::uint16_t* x, std::uint16_t* y, index_t n, float shift, float scale,
                        float offset) {
  alignas(64) float buf[block16];
  for (index_t i = 0; i < n; i += block16) {
    const index_t m = n - i < block16 ? n - i : block16;
    widen16<VB>(f, x + i, buf, m);
    write_scaled_exp<float, VB>(buf, buf, m, shift, scale, offset);
    narrow16<VB>(f, buf, y + i, m);
  }
}

/// Whole 16-bit rows (RowBlock16).
template <int VB>
void run_rows16(const RowBlock16& b) {
  const index_t n = b.cols;
  auto store_lse = [&](index_t r, float lse) {
    if (b.out != nullptr) b.out[r * b.ldout] = lse;
    else narrow16<VB>(b.format, &lse, b.out16 + r * b.ldout, 1);
  };
  alignas(64) float block[block16];
  float* const buf = b.buffer != nullptr ? b.buffer : block;
  const index_t room = b.buffer != nullptr ? b.buffer_elements : block16;
  if (n > room || (b.buffer == nullptr && n > block16 / 2)) {
    for (index_t r = 0; r < b.rows; ++r) {
      const SoftmaxState<float> s = row_state16<VB>(b.format, b.x + r * b.ldx, n);
      if (b.op == RowOp::logsumexp) {
        store_lse(r, s.logsumexp());
      } else {
        const SoftmaxNormalizer<float> norm(s, b.op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
        write_row16<VB>(b.format, b.op, b.x + r * b.ldx, b.y + r * b.ldy, n, norm);
      }
    }
    return;
  }
  float lse[block16];
  const index_t fit = room / (n > 0 ? n : 1), group = fit < block16 ? fit : block16;
  for (index_t r0 = 0; r0 < b.rows; r0 += group) {
    const index_t g = b.rows - r0 < group ? b.rows - r0 : group;
    for (index_t i = 0; i < g; ++i) widen16<VB>(b.format, b.x + (r0 + i) * b.ldx, buf + i * n, n);
    run_rows<float, VB>(RowBlock<float>{b.op, buf, n, buf, n, lse, 1, g, n, false, WeightsAt::output});
    if (b.op == RowOp::logsumexp) {
      for (index_t i = 0; i < g; ++i) store_lse(r0 + i, lse[i]);
    } else {
      for (index_t i = 0; i < g; ++i) narrow16<VB>(b.format, buf + i * n, b.y + (r0 + i) * b.ldy, n);
    }
  }
}

/// Cross-entropy's statistics of 16-bit rows (run_logit_rows' layout): rows of up to block16 / 2
/// elements several at a time through the buffer, longer rows block by block, merged.
template <int VB>
void run_logit_rows16(Storage16 f, const std::uint16_t* x, index_t ldx, LogitStats<float>* out, index_t ldout,
                      index_t rows, index_t n) {
  alignas(64) float buf[block16];
  if (n > block16 / 2) {
    for (index_t r = 0; r < rows; ++r) {
      LogitStats<float> s = LogitStats<float>::identity();
      for (index_t i = 0; i < n; i += block16) {
        const index_t m = n - i < block16 ? n - i : block16;
        widen16<VB>(f, x + r * ldx + i, buf, m);
        LogitStats<float> part;
        run_logit_rows<float, VB>(LogitBlock<float>{buf, m, &part, 1, 1, m});
        s.merge(part);
      }
      out[r * ldout] = s;
    }
    return;
  }
  const index_t group = block16 / (n > 0 ? n : 1);
  for (index_t r0 = 0; r0 < rows; r0 += group) {
    const index_t g = rows - r0 < group ? rows - r0 : group;
    for (index_t i = 0; i < g; ++i) widen16<VB>(f, x + (r0 + i) * ldx, buf + i * n, n);
    run_logit_rows<float, VB>(LogitBlock<float>{buf, n, out + r0 * ldout, ldout, g, n});
  }
}

}  // namespace kflash::impl::host::internal
