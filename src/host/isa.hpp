// Which instruction-set variants this build compiles (isa_variants.cpp), and the attributes that
// make each variant inline its whole body.
#pragma once

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define KFLASH_IMPL_X86_VARIANTS 1
#include <cpuid.h>
#include <immintrin.h>
#endif
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define KFLASH_IMPL_FLATTEN __attribute__((flatten))
#else
#define KFLASH_IMPL_FLATTEN
#endif
