// The C interface's attention calls for one value type T of q, k, v and o, once the type is
// known: declared here for c_attention.cpp, defined in c_attention_typed.hpp and compiled by value
// type in c_attention_fp.cpp (float, double) and c_attention_16.cpp (bhalf_t, half_t), so that the
// compiler takes their kernels in parallel (nvcc needs minutes for each type's).
#pragma once

#include <kflash/kflash.h>

namespace kflash::c_interface {

template <class T>
struct AttentionCalls {
  /// kflash_attention on q of rank 4 (B, Hq, Nq, D; dense or paged K/V) or 3 (varlen).
  static void attention(const char* function, kflash_memory memory, const kflash_array* q, const kflash_array* k,
                        const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                        const kflash_attention_options& options);
  /// kflash_merge_attention.
  static void merge(const char* function, kflash_memory memory, const kflash_array* o_parts,
                    const kflash_array* lse_parts, const kflash_array* o, const kflash_array* lse);
};

}  // namespace kflash::c_interface
