// The warp-MMA probe: attention's forward on FlashAttention 2's structure through the tensor cores,
// in plain CUDA outside kflash, to measure the rate a device schedule built on warp MMA can reach on
// the GPU at hand (fp32 through 3xTF32, which the library's schedules do not take yet; bf16 beside
// the library's warp-product schedule, schedule/warp_attention.hpp). It is a measurement, not a
// kflash kernel.
//   fp32: 3xTF32 mma.sync m16n8k8, each operand split into a TF32 part and its remainder
//         (hi*hi + hi*lo + lo*hi: about fp32's accuracy at three tensor-core products)
//   bf16: mma.sync m16n8k16 on bf16 Q, K, V, fp32 accumulation, the weights P rounded to bf16
// A block of NW warps owns 16 * NW query rows, each warp 16 in registers; K/V tiles of BK keys are
// staged in shared memory by 16-byte loads, the next tile's loads held in registers while the
// current tile is computed. D = Dv = 64, no mask. Each variant is checked against an fp64 reference
// on sampled outputs and timed with CUDA events (the best of 10 means of 20 calls).
//   warp_mma_probe [H [N [once]]]   (defaults 8 heads, 4096 rows; `once`: one call per variant, for ncu)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int D = 64;

// Fragments as PTX's mma.sync defines them, with g = lane / 4 and t = lane % 4: the accumulator
// c[0..1] is row g, columns 2t and 2t + 1 of a 16 x 8 block, c[2..3] row g + 8; m16n8k8's A holds
// (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4) and B (t, g), (t + 4, g); m16n8k16's hold pairs
// of adjacent columns (A) or rows (B) at 2t and 2t + 8.

__device__ __forceinline__ uint32_t tf32_hi(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void split(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_hi(x);
  lo = __float_as_uint(x - __uint_as_float(hi));  // its low bits are ignored by the MMA
}
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_3xtf32(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], float b0,
                                           float b1) {
  uint32_t bh[2], bl[2];
  split(b0, bh[0], bl[0]);
  split(b1, bh[1], bl[1]);
  mma_tf32(c, al, bh);
  mma_tf32(c, ah, bl);
  mma_tf32(c, ah, bh);
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Online softmax of a warp's S block (rows g: c[.][0..1], g + 8: c[.][2..3]); O rescaled.
template <int NB>
__device__ __forceinline__ void online_softmax(float (&s)[NB][4], float (&o)[8][4], float (&m)[2], float (&l)[2]) {
  float mx0 = m[0], mx1 = m[1];
#pragma unroll
  for (int n = 0; n < NB; ++n) {
    mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
    mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
  }
  mx0 = quad_max(mx0);
  mx1 = quad_max(mx1);
  const float f0 = exp2f(m[0] - mx0), f1 = exp2f(m[1] - mx1);
  m[0] = mx0;
  m[1] = mx1;
  float r0 = 0.f, r1 = 0.f;
#pragma unroll
  for (int n = 0; n < NB; ++n) {
    s[n][0] = exp2f(s[n][0] - mx0);
    s[n][1] = exp2f(s[n][1] - mx0);
    s[n][2] = exp2f(s[n][2] - mx1);
    s[n][3] = exp2f(s[n][3] - mx1);
    r0 += s[n][0] + s[n][1];
    r1 += s[n][2] + s[n][3];
  }
  l[0] = l[0] * f0 + r0;
  l[1] = l[1] * f1 + r1;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    o[n][0] *= f0;
    o[n][1] *= f0;
    o[n][2] *= f1;
    o[n][3] *= f1;
  }
}

// O / l into rows g and g + 8 of the warp's 16.
__device__ __forceinline__ void write_out(float* O, int N, int h, int row0, float (&o)[8][4], float (&l)[2], int g,
                                          int t) {
  const float i0 = 1.f / quad_sum(l[0]), i1 = 1.f / quad_sum(l[1]);
  float* r0 = O + (size_t(h) * N + row0 + g) * D;
  float* r1 = r0 + 8 * D;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    *reinterpret_cast<float2*>(r0 + n * 8 + 2 * t) = make_float2(o[n][0] * i0, o[n][1] * i0);
    *reinterpret_cast<float2*>(r1 + n * 8 + 2 * t) = make_float2(o[n][2] * i1, o[n][3] * i1);
  }
}

// A K/V tile's 16-byte chunks as one thread of NT loads them (its u-th item threadIdx.x + u * NT:
// row item / C of the tile, chunk item % C of that row), held in registers from their loads to
// their stores in shared memory.
template <class E, int NT, int PF>
struct TileChunks {
  static constexpr int C = D * int(sizeof(E)) / 16;
  uint4 k[PF], v[PF];
  __device__ static int row(int u) { return (int(threadIdx.x) + u * NT) / C; }
  __device__ static int chunk(int u) { return (int(threadIdx.x) + u * NT) % C; }
  __device__ void load(const E* kg, const E* vg, int t0) {
#pragma unroll
    for (int u = 0; u < PF; ++u) {
      k[u] = __ldg(reinterpret_cast<const uint4*>(kg + size_t(t0 + row(u)) * D) + chunk(u));
      v[u] = __ldg(reinterpret_cast<const uint4*>(vg + size_t(t0 + row(u)) * D) + chunk(u));
    }
  }
};

// ---------------------------------------------------------------- fp32, 3xTF32
template <int BK, int NW>
__global__ void __launch_bounds__(NW * 32)
    fwd_fp32(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
             float* __restrict__ O, int N, float scale_log2) {
  constexpr int NT = NW * 32, BQ = NW * 16;
  constexpr int LD = D + 4;            // rows start 4 banks apart: conflict-free fragment reads
  constexpr int PF = BK * D / 4 / NT;  // float4 of K (and of V) per thread per tile
  __shared__ __align__(16) float ks[BK * LD];
  __shared__ __align__(16) float vs[BK * LD];
  const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * BQ + warp * 16;
  const float* q = Q + (size_t(h) * N + row0) * D;
  uint32_t qh[8][4], ql[8][4];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    split(q[g * D + 8 * k + t] * scale_log2, qh[k][0], ql[k][0]);
    split(q[(g + 8) * D + 8 * k + t] * scale_log2, qh[k][1], ql[k][1]);
    split(q[g * D + 8 * k + t + 4] * scale_log2, qh[k][2], ql[k][2]);
    split(q[(g + 8) * D + 8 * k + t + 4] * scale_log2, qh[k][3], ql[k][3]);
  }
  const float* kg = K + size_t(h) * N * D;
  const float* vg = V + size_t(h) * N * D;
  TileChunks<float, NT, PF> next;
  float o[8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  next.load(kg, vg, 0);
  for (int t0 = 0; t0 < N; t0 += BK) {
    __syncthreads();
#pragma unroll
    for (int u = 0; u < PF; ++u) {
      *reinterpret_cast<uint4*>(ks + next.row(u) * LD + 4 * next.chunk(u)) = next.k[u];
      *reinterpret_cast<uint4*>(vs + next.row(u) * LD + 4 * next.chunk(u)) = next.v[u];
    }
    __syncthreads();
    if (t0 + BK < N) next.load(kg, vg, t0 + BK);
    float s[BK / 8][4] = {};
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float* kr = ks + (n * 8 + g) * LD + 8 * k + t;
        mma_3xtf32(s[n], qh[k], ql[k], kr[0], kr[4]);
      }
    online_softmax(s, o, m, l);
    // P's key j of an 8-block is column 2t (t < 4) or 2t + 1 of the C fragment: taken as the A
    // fragment's columns t and t + 4, with V's rows 2t and 2t + 1 as B's rows t and t + 4.
#pragma unroll
    for (int kb = 0; kb < BK / 8; ++kb) {
      uint32_t ph[4], pl[4];
      split(s[kb][0], ph[0], pl[0]);
      split(s[kb][2], ph[1], pl[1]);
      split(s[kb][1], ph[2], pl[2]);
      split(s[kb][3], ph[3], pl[3]);
      const float* v0 = vs + (kb * 8 + 2 * t) * LD + g;
#pragma unroll
      for (int n = 0; n < 8; ++n) mma_3xtf32(o[n], ph, pl, v0[n * 8], v0[LD + n * 8]);
    }
  }
  write_out(O, N, h, row0, o, l, g, t);
}

// ---------------------------------------------------------------- bf16, m16n8k16
// V staged transposed (vt[col][key]) so that B's pairs of keys are one 32-bit read.
template <int BK, int NW>
__global__ void __launch_bounds__(NW * 32)
    fwd_bf16(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
             const __nv_bfloat16* __restrict__ V, float* __restrict__ O, int N, float scale_log2) {
  constexpr int NT = NW * 32, BQ = NW * 16;
  constexpr int LDK = D + 8;   // bf16 elements: rows 16 bytes apart beyond 128 -> 4 banks
  constexpr int LDV = BK + 8;  // V transposed: a row per column of V
  constexpr int PF = BK * D / 8 / NT;
  __shared__ __align__(16) __nv_bfloat16 ks[BK * LDK];
  __shared__ __align__(16) __nv_bfloat16 vt[D * LDV];
  const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * BQ + warp * 16;
  const __nv_bfloat16* q = Q + (size_t(h) * N + row0) * D;
  // Q scaled in fp32 and rounded to bf16 once (scores then carry log2 e / sqrt(D)).
  uint32_t qa[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    auto at = [&](int r, int c) { return __bfloat162float(q[r * D + c]) * scale_log2; };
    qa[k][0] = pack_bf16(at(g, 16 * k + 2 * t), at(g, 16 * k + 2 * t + 1));
    qa[k][1] = pack_bf16(at(g + 8, 16 * k + 2 * t), at(g + 8, 16 * k + 2 * t + 1));
    qa[k][2] = pack_bf16(at(g, 16 * k + 2 * t + 8), at(g, 16 * k + 2 * t + 9));
    qa[k][3] = pack_bf16(at(g + 8, 16 * k + 2 * t + 8), at(g + 8, 16 * k + 2 * t + 9));
  }
  const __nv_bfloat16* kg = K + size_t(h) * N * D;
  const __nv_bfloat16* vg = V + size_t(h) * N * D;
  TileChunks<__nv_bfloat16, NT, PF> next;
  float o[8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  next.load(kg, vg, 0);
  for (int t0 = 0; t0 < N; t0 += BK) {
    __syncthreads();
#pragma unroll
    for (int u = 0; u < PF; ++u) {
      const int r = next.row(u), c = next.chunk(u);
      *reinterpret_cast<uint4*>(ks + r * LDK + 8 * c) = next.k[u];
      const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&next.v[u]);
#pragma unroll
      for (int x = 0; x < 8; ++x) vt[(8 * c + x) * LDV + r] = e[x];
    }
    __syncthreads();
    if (t0 + BK < N) next.load(kg, vg, t0 + BK);
    float s[BK / 8][4] = {};
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const __nv_bfloat16* kr = ks + (n * 8 + g) * LDK + 16 * k + 2 * t;
        mma_bf16(s[n], qa[k], *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
      }
    online_softmax(s, o, m, l);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const __nv_bfloat16* vr = vt + (n * 8 + g) * LDV + 16 * kk + 2 * t;
        mma_bf16(o[n], pa, *reinterpret_cast<const uint32_t*>(vr), *reinterpret_cast<const uint32_t*>(vr + 8));
      }
    }
  }
  write_out(O, N, h, row0, o, l, g, t);
}

// ---------------------------------------------------------------- host
static double reference_row(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V,
                            int N, int h, int i, int c, double scale) {
  std::vector<double> s(N);
  double mx = -INFINITY;
  for (int j = 0; j < N; ++j) {
    double x = 0;
    for (int d = 0; d < D; ++d) x += double(Q[(size_t(h) * N + i) * D + d]) * K[(size_t(h) * N + j) * D + d];
    s[j] = x * scale;
    mx = std::max(mx, s[j]);
  }
  double l = 0, o = 0;
  for (int j = 0; j < N; ++j) {
    const double p = std::exp(s[j] - mx);
    l += p;
    o += p * V[(size_t(h) * N + j) * D + c];
  }
  return o / l;
}

static bool once = false;  // one launch per variant (for ncu)

template <class Launch>
static double time_ms(Launch&& launch, int reps) {
  if (once) reps = 1;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  launch();
  CK(cudaDeviceSynchronize());
  if (once) return 0;
  float best = 1e30f;
  for (int it = 0; it < (once ? 0 : 10); ++it) {
    CK(cudaEventRecord(a));
    for (int r = 0; r < reps; ++r) launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms / reps);
  }
  CK(cudaGetLastError());
  return best;
}

static void check(const char* name, const std::vector<float>& Qh, const std::vector<float>& Kh,
                  const std::vector<float>& Vh, const std::vector<float>& out, int H, int N, double scale) {
  double err = 0, ref_max = 0;
  std::mt19937 gen(7);
  for (int s = 0; s < 48; ++s) {
    const int h = gen() % H, i = gen() % N, c = gen() % D;
    const double r = reference_row(Qh, Kh, Vh, N, h, i, c, scale);
    err = std::max(err, std::fabs(out[(size_t(h) * N + i) * D + c] - r));
    ref_max = std::max(ref_max, std::fabs(r));
  }
  std::printf("%s: max |O - ref| %.3g over 48 samples (max |ref| %.3g)\n", name, err, ref_max);
}

/// A device copy of v.
template <class E>
static const E* upload(const std::vector<E>& v) {
  E* d;
  CK(cudaMalloc(&d, v.size() * sizeof(E)));
  CK(cudaMemcpy(d, v.data(), v.size() * sizeof(E), cudaMemcpyHostToDevice));
  return d;
}

int main(int argc, char** argv) {
  const int H = argc > 1 ? std::atoi(argv[1]) : 8, N = argc > 2 ? std::atoi(argv[2]) : 4096;
  once = argc > 3;
  if (H < 1 || N < 128 || N % 128 != 0) {
    std::printf("warp_mma_probe: H (%d) must be positive and N (%d) a positive multiple of 128\n", H, N);
    return 2;
  }
  const size_t n = size_t(H) * N * D;
  std::vector<float> Qh(n), Kh(n), Vh(n);
  std::mt19937 gen(1);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (auto* v : {&Qh, &Kh, &Vh})
    for (auto& x : *v) x = dist(gen);
  float* O;
  CK(cudaMalloc(&O, n * 4));
  const float *Q = upload(Qh), *K = upload(Kh), *V = upload(Vh);
  const double scale = 1.0 / std::sqrt(double(D));
  const float scale_log2 = float(scale * 1.4426950408889634);
  const double flop = 4.0 * H * double(N) * N * D;
  std::vector<float> out(n);
  std::printf("probe: H %d, N %d, D %d; %.1f GFLOP per call\n", H, N, D, flop * 1e-9);

  // One variant on the device inputs q, k, v, checked against fp64 on the values qr, kr, vr.
  const auto run = [&](auto kernel, int NW, const char* name, auto q, auto k, auto v, const std::vector<float>& qr,
                       const std::vector<float>& kr, const std::vector<float>& vr) {
    const dim3 grid(N / (16 * NW), H);
    CK(cudaMemset(O, 0, n * 4));
    const double ms = time_ms([&] { kernel<<<grid, NW * 32>>>(q, k, v, O, N, scale_log2); }, 20);
    CK(cudaMemcpy(out.data(), O, n * 4, cudaMemcpyDeviceToHost));
    std::printf("%s: %.3f ms, %.1f TFLOP/s\n", name, ms, flop / ms * 1e-9);
    check(name, qr, kr, vr, out, H, N, scale);
  };
  run(fwd_fp32<32, 4>, 4, "fp32 3xTF32 BK=32 4 warps", Q, K, V, Qh, Kh, Vh);
  run(fwd_fp32<64, 4>, 4, "fp32 3xTF32 BK=64 4 warps", Q, K, V, Qh, Kh, Vh);
  run(fwd_fp32<32, 8>, 8, "fp32 3xTF32 BK=32 8 warps", Q, K, V, Qh, Kh, Vh);
  run(fwd_fp32<64, 8>, 8, "fp32 3xTF32 BK=64 8 warps", Q, K, V, Qh, Kh, Vh);

  // bf16: the same values rounded to bf16, the reference on the rounded values.
  std::vector<__nv_bfloat16> Qb(n), Kb(n), Vb(n);
  std::vector<float> Qr(n), Kr(n), Vr(n);
  for (size_t i = 0; i < n; ++i) {
    Qb[i] = __float2bfloat16(Qh[i]);
    Kb[i] = __float2bfloat16(Kh[i]);
    Vb[i] = __float2bfloat16(Vh[i]);
    Qr[i] = __bfloat162float(Qb[i]);
    Kr[i] = __bfloat162float(Kb[i]);
    Vr[i] = __bfloat162float(Vb[i]);
  }
  const __nv_bfloat16 *Qd = upload(Qb), *Kd = upload(Kb), *Vd = upload(Vb);
  run(fwd_bf16<32, 4>, 4, "bf16 mma BK=32 4 warps", Qd, Kd, Vd, Qr, Kr, Vr);
  run(fwd_bf16<64, 4>, 4, "bf16 mma BK=64 4 warps", Qd, Kd, Vd, Qr, Kr, Vr);
  run(fwd_bf16<64, 8>, 8, "bf16 mma BK=64 8 warps", Qd, Kd, Vd, Qr, Kr, Vr);
  return 0;
}
