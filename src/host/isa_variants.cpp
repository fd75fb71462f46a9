// The host kernels' entry points: one variant of every kernel per instruction set, each in its own
// namespace (the same template bodies, inlined whole by `flatten` under the set's target
// attribute), and the dispatch to the variant in use.
#include "attention_tile.hpp"
#include "half_rows.hpp"
#include "isa.hpp"
#include "row_grads.hpp"
#include "row_passes.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kflash::impl::host {

#define KFLASH_IMPL_VARIANT(isa_namespace, attributes, vector_bytes)                                          \
  namespace isa_namespace {                                                                                   \
  attributes SoftmaxState<float> row_state(const float* x, index_t n) {                                       \
    return internal::row_state<float, vector_bytes>(x, n);                                                    \
  }                                                                                                           \
  attributes SoftmaxState<double> row_state(const double* x, index_t n) {                                     \
    return internal::row_state<double, vector_bytes>(x, n);                                                   \
  }                                                                                                           \
  attributes void run_logit_rows(const LogitBlock<float>& b) {                                                \
    internal::run_logit_rows<float, vector_bytes>(b);                                                         \
  }                                                                                                           \
  attributes void run_logit_rows(const LogitBlock<double>& b) {                                               \
    internal::run_logit_rows<double, vector_bytes>(b);                                                        \
  }                                                                                                           \
  attributes void write_row(RowOp op, const float* x, float* y, index_t n, const SoftmaxNormalizer<float>& norm, \
                            bool stream) {                                                                    \
    internal::write_row<float, vector_bytes>(op, x, y, n, norm, stream);                                      \
  }                                                                                                           \
  attributes void write_row(RowOp op, const double* x, double* y, index_t n,                                  \
                            const SoftmaxNormalizer<double>& norm, bool stream) {                             \
    internal::write_row<double, vector_bytes>(op, x, y, n, norm, stream);                                     \
  }                                                                                                           \
  attributes void write_scaled_exp(const float* x, float* y, index_t n, float shift, float scale,             \
                                   float offset) {                                                            \
    internal::write_scaled_exp<float, vector_bytes>(x, y, n, shift, scale, offset);                           \
  }                                                                                                           \
  attributes void write_scaled_exp(const double* x, double* y, index_t n, double shift, double scale,         \
                                   double offset) {                                                           \
    internal::write_scaled_exp<double, vector_bytes>(x, y, n, shift, scale, offset);                          \
  }                                                                                                           \
  attributes void write_lse_grad(const float* x, float* dx, index_t n, float lse, float dlse, bool stream) {  \
    internal::write_lse_grad<float, vector_bytes>(x, dx, n, lse, dlse, stream);                               \
  }                                                                                                           \
  attributes void write_lse_grad(const double* x, double* dx, index_t n, double lse, double dlse,             \
                                 bool stream) {                                                               \
    internal::write_lse_grad<double, vector_bytes>(x, dx, n, lse, dlse, stream);                              \
  }                                                                                                           \
  attributes void run_rows(const RowBlock<float>& b) { internal::run_rows<float, vector_bytes>(b); }          \
  attributes SoftmaxState<float> grad_sum(RowOp op, const float* a, const float* b, index_t n) {              \
    return internal::grad_sum<float, vector_bytes>(op, a, b, n);                                              \
  }                                                                                                           \
  attributes SoftmaxState<double> grad_sum(RowOp op, const double* a, const double* b, index_t n) {           \
    return internal::grad_sum<double, vector_bytes>(op, a, b, n);                                             \
  }                                                                                                           \
  attributes void write_grad(RowOp op, const float* a, const float* b, float* dx, index_t n, float s,          \
                            bool stream) {                                                                    \
    internal::write_grad<float, vector_bytes>(op, a, b, dx, n, s, stream);                                    \
  }                                                                                                           \
  attributes void write_grad(RowOp op, const double* a, const double* b, double* dx, index_t n, double s,      \
                            bool stream) {                                                                    \
    internal::write_grad<double, vector_bytes>(op, a, b, dx, n, s, stream);                                   \
  }                                                                                                           \
  attributes void run_rows(const RowBlock<double>& b) { internal::run_rows<double, vector_bytes>(b); }        \
  attributes void widen16(Storage16 f, const std::uint16_t* x, float* y, index_t n) {                         \
    internal::widen16<vector_bytes>(f, x, y, n);                                                              \
  }                                                                                                           \
  attributes void narrow16(Storage16 f, const float* x, std::uint16_t* y, index_t n) {                        \
    internal::narrow16<vector_bytes>(f, x, y, n);                                                             \
  }                                                                                                           \
  attributes SoftmaxState<float> row_state16(Storage16 f, const std::uint16_t* x, index_t n) {                \
    return internal::row_state16<vector_bytes>(f, x, n);                                                      \
  }                                                                                                           \
  attributes void write_row16(Storage16 f, RowOp op, const std::uint16_t* x, std::uint16_t* y, index_t n,     \
                              const SoftmaxNormalizer<float>& norm, bool stream) {                            \
    internal::write_row16<vector_bytes>(f, op, x, y, n, norm, stream);                                        \
  }                                                                                                           \
  attributes void run_rows16(const RowBlock16& b) { internal::run_rows16<vector_bytes>(b); }                  \
  attributes SoftmaxState<float> grad_sum16(Storage16 f, RowOp op, const std::uint16_t* a,                   \
                                            const std::uint16_t* b, index_t n) {                              \
    return internal::grad_sum16<vector_bytes>(f, op, a, b, n);                                                \
  }                                                                                                           \
  attributes void write_grad16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b,         \
                               std::uint16_t* dx, index_t n, float s, bool stream) {                          \
    internal::write_grad16<vector_bytes>(f, op, a, b, dx, n, s, stream);                                      \
  }                                                                                                           \
  attributes void write_lse_grad16(Storage16 f, const std::uint16_t* x, std::uint16_t* dx, index_t n,         \
                                   float lse, float dlse, bool stream) {                                      \
    internal::write_lse_grad16<vector_bytes>(f, x, dx, n, lse, dlse, stream);                                 \
  }                                                                                                           \
  attributes void write_scaled_exp16(Storage16 f, const std::uint16_t* x, std::uint16_t* y, index_t n,       \
                                     float shift, float scale, float offset) {                                \
    internal::write_scaled_exp16<vector_bytes>(f, x, y, n, shift, scale, offset);                             \
  }                                                                                                           \
  attributes void run_logit_rows16(Storage16 f, const std::uint16_t* x, index_t ldx, LogitStats<float>* out,    \
                                   index_t ldout, index_t rows, index_t cols, bool sum_logits) {              \
    internal::run_logit_rows16<vector_bytes>(f, x, ldx, out, ldout, rows, cols, sum_logits);                  \
  }                                                                                                           \
  attributes void attention_tile(const AttentionTile<float>& t) {                                             \
    internal::attention_tile<float, vector_bytes>(t);                                                         \
  }                                                                                                           \
  attributes void attention_tile(const AttentionTile<double>& t) {                                            \
    internal::attention_tile<double, vector_bytes>(t);                                                        \
  }                                                                                                           \
  attributes void key_pairs(const std::uint16_t* k, index_t ld, index_t n, index_t D, index_t d16,              \
                           std::uint16_t* out, index_t ldo) {                                                 \
    internal::key_pairs<vector_bytes>(k, ld, n, D, d16, out, ldo);                                            \
  }                                                                                                           \
  attributes void row_pairs(const std::uint16_t* a, const std::uint16_t* b, index_t n, index_t n_pad,          \
                            std::uint16_t* out) {                                                             \
    internal::row_pairs<vector_bytes>(a, b, n, n_pad, out);                                                   \
  }                                                                                                           \
  attributes void tile_product(const TileProduct<float>& t) { internal::tile_product<float, vector_bytes>(t); } \
  attributes void tile_product(const TileProduct<double>& t) {                                                \
    internal::tile_product<double, vector_bytes>(t);                                                          \
  }                                                                                                           \
  attributes void backward_tile(const BackwardTile<float>& t) { internal::backward_tile<float, vector_bytes>(t); } \
  attributes void backward_tile(const BackwardTile<double>& t) {                                              \
    internal::backward_tile<double, vector_bytes>(t);                                                         \
  }                                                                                                           \
  }

KFLASH_IMPL_VARIANT(baseline, KFLASH_IMPL_FLATTEN, 16)
#ifdef KFLASH_IMPL_X86_VARIANTS
KFLASH_IMPL_VARIANT(avx2, __attribute__((target("avx2,fma,f16c"), flatten)), 32)
#define KFLASH_IMPL_AVX512 "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c"
KFLASH_IMPL_VARIANT(avx512, __attribute__((target(KFLASH_IMPL_AVX512), flatten)), 64)
// The variants with the hardware's bf16 products: AVX-512's, but for attention's tiles in bf16
// pairs (the dispatch below sends every other kernel to avx512).
namespace avx512bf16 {
__attribute__((target(KFLASH_IMPL_AVX512 ",avx512bf16"), flatten)) void attention_tile(const AttentionTile<float>& t) {
  internal::attention_tile<float, 64, internal::TilePairs<internal::BlockPairs<internal::DotPairs>>>(t);
}
}  // namespace avx512bf16
namespace amx {
__attribute__((target(KFLASH_IMPL_AVX512 ",avx512bf16,amx-tile,amx-bf16"), flatten)) void attention_tile(
    const AttentionTile<float>& t) {
  internal::attention_tile<float, 64, internal::TilePairs<internal::AmxPairs>>(t);
}
}  // namespace amx
#undef KFLASH_IMPL_AVX512
#endif
#undef KFLASH_IMPL_VARIANT

namespace {

#ifdef KFLASH_IMPL_X86_VARIANTS
/// Whether the CPU's AVX512-BF16 dot products out-run its fp32 multiply-adds in attention. Not on
/// Intel's cores: they issue vdpbf16ps on one port where they issue multiply-adds on two (the same
/// flops a cycle), and the bf16 blocks add the rounding and pairing of P and V, so K/V widened into
/// the fp32 products is faster (1.4-1.6x on a Xeon without AMX). AMD's Zen 4 issues vdpbf16ps at
/// its multiply-add rate, with twice the flops.
bool fast_bf16_dots() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  const bool intel = ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu;  // "GenuineIntel"
  return !intel;
}
#endif

/// The best set the CPU supports, the one in use, and whether KFLASH_HOST_ISA named it.
struct Detected {
  Isa best, chosen;
  bool named;
};

Detected detect_isa() {
  Isa best = Isa::baseline;
#ifdef KFLASH_IMPL_X86_VARIANTS
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // F16C: CPUID leaf 1, ECX (a name clang 14's builtin lacks)
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) best = Isa::avx2;
  if (best == Isa::avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
    best = Isa::avx512;
  // AVX512-BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5. AMX-BF16 and AMX-TILE: leaf 7, EDX bits 22
  // and 24, usable once the kernel grants the process the tile data (XFEATURE_XTILEDATA, 18).
  if (best == Isa::avx512 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0)
    best = Isa::avx512bf16;
#ifdef __linux__
  if (best == Isa::avx512bf16 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 22)) != 0 &&
      (edx & (1u << 24)) != 0 && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0)
    best = Isa::amx;
#endif
#endif
  // The default: the best set, but avx512 where the bf16 dot products are the slower path (avx512bf16
  // differs from avx512 only in them); KFLASH_HOST_ISA may still ask for any set the CPU supports.
  Isa chosen = best;
#ifdef KFLASH_IMPL_X86_VARIANTS
  if (best == Isa::avx512bf16 && !fast_bf16_dots()) chosen = Isa::avx512;
#endif
  const char* wanted = std::getenv("KFLASH_HOST_ISA");
  if (wanted == nullptr || *wanted == '\0') return {best, chosen, false};
  for (Isa candidate : {Isa::baseline, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx}) {
    if (std::strcmp(wanted, isa_name(candidate)) != 0) continue;
    if (int(candidate) <= int(best)) return {best, candidate, true};
    std::fprintf(stderr, "kflash: KFLASH_HOST_ISA=%s is not supported by this CPU or build; using %s\n", wanted,
                 isa_name(chosen));
    return {best, chosen, false};
  }
  std::fprintf(stderr, "kflash: KFLASH_HOST_ISA=%s is not one of baseline, avx2, avx512, avx512bf16, amx; using %s\n",
               wanted, isa_name(chosen));
  return {best, chosen, false};
}

const Detected& detected() {
  static const Detected value = detect_isa();
  return value;
}

}  // namespace

Isa isa() { return detected().chosen; }

bool bf16_rounding_instruction() {
  const Detected& d = detected();
  return int(d.best) >= int(Isa::avx512bf16) && (!d.named || int(d.chosen) >= int(Isa::avx512bf16));
}

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::amx: return "amx";
    case Isa::avx512bf16: return "avx512bf16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "baseline";
  }
}

// Calls the variant `which` of a kernel.
#ifdef KFLASH_IMPL_X86_VARIANTS
#define KFLASH_IMPL_DISPATCH(which, call)      \
  switch (which) {                             \
    case Isa::amx:                             \
    case Isa::avx512bf16:                      \
    case Isa::avx512: return avx512::call;     \
    case Isa::avx2: return avx2::call;         \
    default: return baseline::call;            \
  }
#else
#define KFLASH_IMPL_DISPATCH(which, call) \
  (void)which;                            \
  return baseline::call;
#endif

SoftmaxState<float> row_state(Isa which, const float* x, index_t n) { KFLASH_IMPL_DISPATCH(which, row_state(x, n)) }
SoftmaxState<double> row_state(Isa which, const double* x, index_t n) { KFLASH_IMPL_DISPATCH(which, row_state(x, n)) }
SoftmaxState<float> row_state(const float* x, index_t n) { return row_state(isa(), x, n); }
SoftmaxState<double> row_state(const double* x, index_t n) { return row_state(isa(), x, n); }
void run_logit_rows(const LogitBlock<float>& b) { KFLASH_IMPL_DISPATCH(isa(), run_logit_rows(b)) }
void run_logit_rows(const LogitBlock<double>& b) { KFLASH_IMPL_DISPATCH(isa(), run_logit_rows(b)) }
void write_row(RowOp op, const float* x, float* y, index_t n, const SoftmaxNormalizer<float>& norm, bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_row(op, x, y, n, norm, stream))
}
void write_row(RowOp op, const double* x, double* y, index_t n, const SoftmaxNormalizer<double>& norm,
               bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_row(op, x, y, n, norm, stream))
}
void write_scaled_exp(const float* x, float* y, index_t n, float shift, float scale, float offset) {
  KFLASH_IMPL_DISPATCH(isa(), write_scaled_exp(x, y, n, shift, scale, offset))
}
void write_scaled_exp(const double* x, double* y, index_t n, double shift, double scale, double offset) {
  KFLASH_IMPL_DISPATCH(isa(), write_scaled_exp(x, y, n, shift, scale, offset))
}
void write_lse_grad(const float* x, float* dx, index_t n, float lse, float dlse, bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_lse_grad(x, dx, n, lse, dlse, stream))
}
void write_lse_grad(const double* x, double* dx, index_t n, double lse, double dlse, bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_lse_grad(x, dx, n, lse, dlse, stream))
}
void run_rows(const RowBlock<float>& block) { KFLASH_IMPL_DISPATCH(isa(), run_rows(block)) }
SoftmaxState<float> grad_sum(RowOp op, const float* a, const float* b, index_t n) {
  KFLASH_IMPL_DISPATCH(isa(), grad_sum(op, a, b, n))
}
SoftmaxState<double> grad_sum(RowOp op, const double* a, const double* b, index_t n) {
  KFLASH_IMPL_DISPATCH(isa(), grad_sum(op, a, b, n))
}
void write_grad(RowOp op, const float* a, const float* b, float* dx, index_t n, float s, bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_grad(op, a, b, dx, n, s, stream))
}
void write_grad(RowOp op, const double* a, const double* b, double* dx, index_t n, double s, bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_grad(op, a, b, dx, n, s, stream))
}
void run_rows(const RowBlock<double>& block) { KFLASH_IMPL_DISPATCH(isa(), run_rows(block)) }
void widen16(Isa which, Storage16 f, const std::uint16_t* x, float* y, index_t n) {
  KFLASH_IMPL_DISPATCH(which, widen16(f, x, y, n))
}
void narrow16(Isa which, Storage16 f, const float* x, std::uint16_t* y, index_t n) {
  KFLASH_IMPL_DISPATCH(which, narrow16(f, x, y, n))
}
SoftmaxState<float> row_state16(Storage16 f, const std::uint16_t* x, index_t n) {
  KFLASH_IMPL_DISPATCH(isa(), row_state16(f, x, n))
}
void write_row16(Storage16 f, RowOp op, const std::uint16_t* x, std::uint16_t* y, index_t n,
                 const SoftmaxNormalizer<float>& norm, bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_row16(f, op, x, y, n, norm, stream))
}
void run_rows16(const RowBlock16& block) { KFLASH_IMPL_DISPATCH(isa(), run_rows16(block)) }
SoftmaxState<float> grad_sum16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, index_t n) {
  KFLASH_IMPL_DISPATCH(isa(), grad_sum16(f, op, a, b, n))
}
void write_grad16(Storage16 f, RowOp op, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* dx, index_t n,
                  float s, bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_grad16(f, op, a, b, dx, n, s, stream))
}
void write_lse_grad16(Storage16 f, const std::uint16_t* x, std::uint16_t* dx, index_t n, float lse, float dlse,
                      bool stream) {
  KFLASH_IMPL_DISPATCH(isa(), write_lse_grad16(f, x, dx, n, lse, dlse, stream))
}
void write_scaled_exp16(Storage16 f, const std::uint16_t* x, std::uint16_t* y, index_t n, float shift, float scale,
                        float offset) {
  KFLASH_IMPL_DISPATCH(isa(), write_scaled_exp16(f, x, y, n, shift, scale, offset))
}
void run_logit_rows16(Storage16 f, const std::uint16_t* x, index_t ldx, LogitStats<float>* out, index_t ldout,
                      index_t rows, index_t cols, bool sum_logits) {
  KFLASH_IMPL_DISPATCH(isa(), run_logit_rows16(f, x, ldx, out, ldout, rows, cols, sum_logits))
}
void attention_tile(Isa which, const AttentionTile<float>& tile) {
#ifdef KFLASH_IMPL_X86_VARIANTS
  if (tile.q16 != nullptr && which == Isa::amx) return amx::attention_tile(tile);
  if (tile.q16 != nullptr && which == Isa::avx512bf16) return avx512bf16::attention_tile(tile);
#endif
  KFLASH_IMPL_DISPATCH(which, attention_tile(tile))
}
void attention_tile(Isa which, const AttentionTile<double>& tile) { KFLASH_IMPL_DISPATCH(which, attention_tile(tile)) }
void attention_tile(const AttentionTile<float>& tile) { attention_tile(isa(), tile); }
void attention_tile(const AttentionTile<double>& tile) { attention_tile(isa(), tile); }
void key_pairs(const std::uint16_t* k, index_t ld, index_t n, index_t D, index_t d16, std::uint16_t* out,
               index_t ldo) {
  KFLASH_IMPL_DISPATCH(isa(), key_pairs(k, ld, n, D, d16, out, ldo))
}
void row_pairs(const std::uint16_t* a, const std::uint16_t* b, index_t n, index_t n_pad, std::uint16_t* out) {
  KFLASH_IMPL_DISPATCH(isa(), row_pairs(a, b, n, n_pad, out))
}
void tile_product(const TileProduct<float>& product) { KFLASH_IMPL_DISPATCH(isa(), tile_product(product)) }
void tile_product(const TileProduct<double>& product) { KFLASH_IMPL_DISPATCH(isa(), tile_product(product)) }
void backward_tile(const BackwardTile<float>& tile) { KFLASH_IMPL_DISPATCH(isa(), backward_tile(tile)) }
void backward_tile(const BackwardTile<double>& tile) { KFLASH_IMPL_DISPATCH(isa(), backward_tile(tile)) }
#undef KFLASH_IMPL_DISPATCH

}  // namespace kflash::impl::host
