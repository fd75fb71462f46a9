// The definitions of AttentionCalls (c_attention_calls.hpp), included by the files that compile
// them for their value types.
#pragma once

#include "c_attention_calls.hpp"
#include "c_calls.hpp"

namespace {

/// attention() with q, k, v, o of rank R (4 dense or paged, 3 varlen) and lse of rank R - 1.
template <class T, int R>
void attention_call(const char* function, kflash_memory memory, const kflash_array& q, const kflash_array* k,
                    const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                    const kflash_attention_options& options) {
  const kflash_array& kk = required<T>(function, "k", k, R);
  const kflash_array& vv = required<T>(function, "v", v, R);
  const kflash_array& oo = required<T>(function, "o", o, R, true);
  const bool has_lse = lse != nullptr && lse->data != nullptr;
  if (has_lse) required<kflash::impl::arith_t<T>>(function, "lse", lse, R - 1, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::AttentionOptions opt = cxx_options<Exec>(function, options);
    const auto qv = strided_view<Exec, const T, R>(q);
    const auto kv = strided_view<Exec, const T, R>(kk);
    const auto vv_ = strided_view<Exec, const T, R>(vv);
    const auto ov = strided_view<Exec, T, R>(oo);
    if (has_lse)
      kflash::attention(exec, qv, kv, vv_, ov, opt, strided_view<Exec, kflash::impl::arith_t<T>, R - 1>(*lse));
    else
      kflash::attention(exec, qv, kv, vv_, ov, opt);
    exec.fence();
  });
}

}  // namespace

namespace kflash::c_interface {

template <class T>
void AttentionCalls<T>::attention(const char* function, kflash_memory memory, const kflash_array* q,
                                  const kflash_array* k, const kflash_array* v, const kflash_array* o,
                                  const kflash_array* lse, const kflash_attention_options& options) {
  if (q->rank == 4)
    attention_call<T, 4>(function, memory, *q, k, v, o, lse, options);
  else if (q->rank == 3)
    attention_call<T, 3>(function, memory, *q, k, v, o, lse, options);
  else
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
         describe("q", *q) + " must have rank 4 (B, Hq, Nq, D), or 3 (total_q, Hq, D) with varlen options");
}

template <class T>
void AttentionCalls<T>::merge(const char* function, kflash_memory memory, const kflash_array* o_parts,
                              const kflash_array* lse_parts, const kflash_array* o, const kflash_array* lse) {
  const kflash_array& op = required<T>(function, "o_parts", o_parts, 5);
  using A = kflash::impl::arith_t<T>;  // lse_parts' and lse's type: float32 for 16-bit parts
  const kflash_array& lp = required<A>(function, "lse_parts", lse_parts, 4);
  const kflash_array& ov = required<T>(function, "o", o, 4, true);
  const kflash_array& lv = required<A>(function, "lse", lse, 3, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    kflash::merge_attention(exec, strided_view<Exec, const T, 5>(op), strided_view<Exec, const A, 4>(lp),
                            strided_view<Exec, T, 4>(ov), strided_view<Exec, A, 3>(lv));
    exec.fence();
  });
}

}  // namespace kflash::c_interface
