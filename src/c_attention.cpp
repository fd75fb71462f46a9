// The C interface's attention calls (include/kflash/kflash.h): kflash_attention and
// kflash_merge_attention over kflash_array operands, through kflash::attention and
// kflash::merge_attention (AttentionCalls, compiled by value type).
#include "c_attention_calls.hpp"
#include "c_calls.hpp"

using kflash::c_interface::AttentionCalls;

extern "C" {

void kflash_attention_options_init(kflash_attention_options* options) {
  if (options == nullptr) return;
  *options = kflash_attention_options{};
  options->struct_size = sizeof(kflash_attention_options);
  options->window_left = options->window_right = -1;
  options->schedule = KFLASH_SCHEDULE_AUTOMATIC;
}

kflash_status kflash_attention(kflash_memory memory, const kflash_array* q, const kflash_array* k,
                               const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                               const kflash_attention_options* options) {
  const char* fn = "kflash_attention";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    const kflash_attention_options known =
        known_options(fn, options, kflash_attention_options_init, "kflash_attention_options_init", sizeof(double));
    on_float_type<true>(fn, "q", q,
                        [&](auto t) { AttentionCalls<decltype(t)>::attention(fn, memory, q, k, v, o, lse, known); });
  });
}

kflash_status kflash_merge_attention(kflash_memory memory, const kflash_array* o_parts,
                                     const kflash_array* lse_parts, const kflash_array* o,
                                     const kflash_array* lse) {
  const char* fn = "kflash_merge_attention";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    on_float_type<true>(fn, "o_parts", o_parts,
                        [&](auto t) { AttentionCalls<decltype(t)>::merge(fn, memory, o_parts, lse_parts, o, lse); });
  });
}

}  // extern "C"
