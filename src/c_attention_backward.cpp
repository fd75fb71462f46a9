// The C interface's attention gradient (include/kflash/kflash.h): kflash_attention_backward over
// kflash_array operands, through kflash::attention_backward.
#include "c_calls.hpp"

namespace {

/// An output of AttentionGrads (dsinks, dbias) as a writable OptionView of type T (q's, or float32
/// for 16-bit q), empty when absent; the C++ call checks its shape against the option's.
template <class Exec, class T>
kflash::OptionView grad_option(const char* function, const char* name, const kflash_array* a) {
  if (a == nullptr || a->data == nullptr) return {};
  const kflash_array& g = required<T>(function, name, a, a->rank, true);
  switch (g.rank) {
    case 1: return strided_view<Exec, T, 1>(g);
    case 2: return strided_view<Exec, T, 2>(g);
    case 3: return strided_view<Exec, T, 3>(g);
    case 4: return strided_view<Exec, T, 4>(g);
    default:
      fail(KFLASH_ERROR_INVALID_ARGUMENT, function,
           describe(name, g) + " must have the rank of its option: 1 (dsinks), 4 (dbias)");
  }
}

/// The arrays of an attention_backward call, as given.
struct BackwardArrays {
  const kflash_array *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv, *dsinks, *dbias;
};

/// attention_backward() with q, k, v, o and their gradients of rank R (4 dense, 3 varlen), lse of
/// rank R - 1; lse, dsinks and dbias of T's arithmetic type (float32 for 16-bit T).
template <class T, int R>
void attention_backward_call(const char* function, kflash_memory memory, const BackwardArrays& a,
                             const kflash_attention_options& options) {
  using A = kflash::impl::arith_t<T>;
  const kflash_array& q = required<T>(function, "q", a.q, R);
  const kflash_array& k = required<T>(function, "k", a.k, R);
  const kflash_array& v = required<T>(function, "v", a.v, R);
  const kflash_array& o = required<T>(function, "o", a.o, R);
  const kflash_array& lse = required<A>(function, "lse", a.lse, R - 1);
  const kflash_array& dout = required<T>(function, "dout", a.dout, R);
  const kflash_array& dq = required<T>(function, "dq", a.dq, R, true);
  const kflash_array& dk = required<T>(function, "dk", a.dk, R, true);
  const kflash_array& dv = required<T>(function, "dv", a.dv, R, true);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::AttentionOptions opt = cxx_options<Exec>(function, options);
    kflash::AttentionGrads grads;
    grads.dsinks = grad_option<Exec, A>(function, "dsinks", a.dsinks);
    grads.dbias = grad_option<Exec, A>(function, "dbias", a.dbias);
    kflash::attention_backward(exec, strided_view<Exec, const T, R>(q), strided_view<Exec, const T, R>(k),
                               strided_view<Exec, const T, R>(v), strided_view<Exec, const T, R>(o),
                               strided_view<Exec, const A, R - 1>(lse), strided_view<Exec, const T, R>(dout),
                               strided_view<Exec, T, R>(dq), strided_view<Exec, T, R>(dk), strided_view<Exec, T, R>(dv),
                               opt, grads);
    exec.fence();
  });
}

}  // namespace

extern "C" {

kflash_status kflash_attention_backward(kflash_memory memory, const kflash_array* q, const kflash_array* k,
                                        const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                                        const kflash_array* dout, const kflash_array* dq, const kflash_array* dk,
                                        const kflash_array* dv, const kflash_array* dsinks, const kflash_array* dbias,
                                        const kflash_attention_options* options) {
  const char* fn = "kflash_attention_backward";
  return guarded(fn, [&] {
    check_memory(fn, memory);
    const kflash_attention_options known =
        known_options(fn, options, kflash_attention_options_init, "kflash_attention_options_init", sizeof(double));
    const BackwardArrays arrays{q, k, v, o, lse, dout, dq, dk, dv, dsinks, dbias};
    on_float_type<true>(fn, "q", q, [&](auto t) {
      using T = decltype(t);
      if (q->rank == 4) attention_backward_call<T, 4>(fn, memory, arrays, known);
      else if (q->rank == 3) attention_backward_call<T, 3>(fn, memory, arrays, known);
      else
        fail(KFLASH_ERROR_INVALID_ARGUMENT, fn,
             describe("q", *q) + " must have rank 4 (B, Hq, Nq, D), or 3 (total_q, Hq, D) with varlen options");
    });
  });
}

}  // extern "C"
