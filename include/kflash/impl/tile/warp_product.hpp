// The product of attention's warp schedule (schedule/warp_attention.hpp): C += A B^T on a block of
// 16 rows x 8 columns over 16 of k, for A (16 x 16) and B (8 x 16) in team scratch, both read along
// k, stored as 16-bit values or fp32, with the result in fp32 as the 32 lanes of a warp hold it
// (WarpBlock). On CUDA devices of compute capability 8.0 and newer it takes the warp matrix
// instructions (fp32 accumulation), whose operands each lane loads from scratch: for 16-bit values
// one mma.sync m16n8k16; for fp32 two m16n8k8 steps on TF32 operands, each value split into a
// TF32 part and the TF32 part of its remainder and the three products that matter summed
// (3xTF32: about fp32's accuracy). Elsewhere (other devices, and the host teams that run the device
// schedules in the tests) each lane forms its four sums itself, in fp32 FMAs, from the same scratch.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstdint>
#include <type_traits>

namespace kflash::impl {

/// The warp product's block and where its values lie: lane l holds C's rows row(l, i) and columns
/// col(l, i) for i < 4 (rows l / 4 and l / 4 + 8, columns 2 (l % 4) and the next).
struct WarpBlock {
  static constexpr int lanes = 32, rows = 16, cols = 8, depth = 16;
  KOKKOS_INLINE_FUNCTION static constexpr int row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
  KOKKOS_INLINE_FUNCTION static constexpr int col(int lane, int i) { return lane % 4 * 2 + i % 2; }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/// x rounded to TF32 (10 bits of mantissa, to nearest, ties away), as the instruction's bits.
__device__ inline std::uint32_t to_tf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
/// x as TF32 parts: big, then the remainder x - big (exact in fp32) rounded to TF32.
__device__ inline void tf32_parts(float x, std::uint32_t& big, std::uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(x - __uint_as_float(big));
}
/// c += a b on TF32 operands by one mma.sync m16n8k8 (fp32 accumulation).
__device__ inline void mma_tf32(float (&c)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

/// c (lane `lane`'s part of a WarpBlock) += a b^T over depth k: a's rows start lda elements apart,
/// b's ldb; for 16-bit S both even, and a and b 4-byte aligned (the instruction's operands are pairs
/// along k). On CUDA every lane of the warp calls it together, with the same a, b, lda and ldb.
template <class S>
KOKKOS_INLINE_FUNCTION void warp_product(float (&c)[4], const S* a, int lda, const S* b, int ldb, int lane) {
  static_assert(is_half_type<S> || std::is_same<S, float>::value,
                "kflash: the warp product takes 16-bit or fp32 operands");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int g = lane >> 2, t = lane & 3;
  if constexpr (std::is_same<S, float>::value) {
    // PTX's m16n8k8 on TF32: A's registers hold (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B's
    // (k = t, n = g) and (t + 4, g). The small parts' products first, the large one's last.
    KFLASH_IMPL_UNROLL for (int k = 0; k < WarpBlock::depth; k += 8) {
      std::uint32_t ab[4], as[4], bb[2], bs[2];
      tf32_parts(a[g * lda + k + t], ab[0], as[0]);
      tf32_parts(a[(g + 8) * lda + k + t], ab[1], as[1]);
      tf32_parts(a[g * lda + k + t + 4], ab[2], as[2]);
      tf32_parts(a[(g + 8) * lda + k + t + 4], ab[3], as[3]);
      tf32_parts(b[g * ldb + k + t], bb[0], bs[0]);
      tf32_parts(b[g * ldb + k + t + 4], bb[1], bs[1]);
      mma_tf32(c, as, bb);
      mma_tf32(c, ab, bs);
      mma_tf32(c, ab, bb);
    }
  } else {
    // PTX's m16n8k16: A's registers hold (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8) and the
    // next column of each; B's (k = 2t, n = g) and (2t + 8, g) and the next k of each.
    const int t2 = 2 * t;
    const auto pair = [](const S* p) { return *reinterpret_cast<const std::uint32_t*>(p); };
    const std::uint32_t a0 = pair(a + g * lda + t2), a1 = pair(a + (g + 8) * lda + t2);
    const std::uint32_t a2 = pair(a + g * lda + t2 + 8), a3 = pair(a + (g + 8) * lda + t2 + 8);
    const std::uint32_t b0 = pair(b + g * ldb + t2), b1 = pair(b + g * ldb + t2 + 8);
    if constexpr (std::is_same<S, half_t>::value) {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
#else
  KFLASH_IMPL_UNROLL for (int i = 0; i < 4; ++i) {
    const S* ar = a + WarpBlock::row(lane, i) * lda;
    const S* br = b + WarpBlock::col(lane, i) * ldb;
    float sum = c[i];
    for (int k = 0; k < WarpBlock::depth; ++k) sum += widen(ar[k]) * widen(br[k]);
    c[i] = sum;
  }
#endif
}

}  // namespace kflash::impl
