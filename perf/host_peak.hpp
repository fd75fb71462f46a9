// The host CPU's limits that need instructions Kokkos kernels do not give: the arithmetic peak
// (independent multiply-add chains held in vector registers, no memory traffic, compiled once per
// x86-64 instruction set as the library's host kernels are, and run with the best set the CPU has)
// and the copy and triad bandwidth with non-temporal stores.
#pragma once

#include <string>

namespace kflash_bench {

/// Instruction sets of the peak kernels, best last.
enum class PeakIsa { baseline, avx2, avx512 };

/// The best set this CPU runs ("baseline": SSE2, no fused multiply-add), and its name.
PeakIsa best_peak_isa();
const char* peak_isa_name(PeakIsa isa);

/// Runs `iterations` steps of the fp32 (bytes = 4) or fp64 (bytes = 8) chains on the calling thread
/// with `isa`; returns the floating-point operations done (2 per multiply-add). The result of the
/// chains goes to a volatile sink.
double run_fma_chains(PeakIsa isa, int bytes, long iterations);

/// Whether the CPU has AVX512-BF16, and `iterations` steps of vdpbf16ps chains (4 operations per
/// fp32 lane: two bf16 products added to the accumulator); 0 operations without it.
bool has_bf16_dot();
double run_bf16_dot_chains(long iterations);

/// Whether kflash's host kernels run AMX-BF16 tiles here (the CPU has them and Linux granted the
/// tile data: kflash::impl::host::isa()), and `iterations` steps of four tile products (16 x 16
/// floats, 16 pairs deep, 2 operations a product); 0 operations where they do not.
bool has_amx();
double run_amx_tiles(long iterations);

/// b[i] = a[i] and a[i] = b[i] + s c[i] for i < n, written with non-temporal stores: a plain store
/// first reads the line it writes, so a plain copy of arrays beyond the last-level cache moves 3
/// bytes for every 2 it counts, while kflash's row kernels stream their large outputs.
void stream_copy(const double* a, double* b, long n);
void stream_triad(double* a, const double* b, const double* c, double s, long n);

}  // namespace kflash_bench
