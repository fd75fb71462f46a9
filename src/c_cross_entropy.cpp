// The C interface's cross-entropy calls (include/kflash/kflash.h): the loss and its gradient over
// kflash_array logits and integer targets, through kflash::cross_entropy and
// kflash::cross_entropy_backward.
#include "c_calls.hpp"

namespace {

/// A rank-1 array of integer class targets: calls f(I()) for its type, int32 or int64.
template <class F>
void on_targets(const char* function, const kflash_array* targets, F&& f) {
  if (targets == nullptr) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, "targets is NULL");
  check_array(function, "targets", *targets);
  if (targets->rank != 1)
    fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe("targets", *targets) + " must have rank 1 (rows)");
  if (targets->dtype == KFLASH_INT32) f(std::int32_t());
  else if (targets->dtype == KFLASH_INT64) f(std::int64_t());
  else fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe("targets", *targets) + " must be int32 or int64");
}

kflash::CrossEntropyOptions cxx_options(const kflash_cross_entropy_options& c) {
  kflash::CrossEntropyOptions o;
  o.ignore_index = c.ignore_index;
  o.label_smoothing = c.label_smoothing;
  o.z_loss = c.z_loss;
  return o;
}

/// Checks the logits, the targets and the options as the C++ calls do, then every target's range:
/// so that a call that fails has written nothing (the C++ forward writes the rows before the bad one).
template <class Exec, class Logits, class Targets>
void check_cross_entropy_input(const char* function, const Exec& exec, const Logits& logits, const Targets& targets,
                               const kflash::CrossEntropyOptions& options) {
  kflash::impl::check_logits_and_targets<Exec, true>(function, logits, targets, options);
  const auto total = kflash::impl::check_targets(exec, targets, kflash::impl::index_t(logits.extent(1)),
                                                 options.ignore_index, "kflash::cross_entropy check_targets");
  kflash::impl::require_targets_in(total, kflash::impl::index_t(logits.extent(0)),
                                   kflash::impl::index_t(logits.extent(1)),
                                   kflash::impl::vocabulary_of(logits), options.ignore_index,
                                   function, "nothing was written");
}

template <class T, class I>
void cross_entropy_typed(const char* function, kflash_memory memory, const kflash_array& logits,
                         const kflash_array& targets, const kflash_array* loss, const kflash_array* mean,
                         const kflash_cross_entropy_options& options) {
  using A = kflash::impl::arith_t<T>;  // the loss's type
  const kflash_array& lg = required<T>(function, "logits", &logits, 2);
  const kflash_array& ls = required<A>(function, "loss", loss, 1, true);
  const bool has_mean = mean != nullptr && mean->data != nullptr;
  if (has_mean) {
    required<A>(function, "mean", mean, 1, true);
    if (mean->extent[0] != 1) fail(KFLASH_ERROR_INVALID_ARGUMENT, function, describe("mean", *mean) + " must have one element");
  }
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::CrossEntropyOptions opt = cxx_options(options);
    const auto lv = strided_view<Exec, const T, 2>(lg);
    const auto tv = strided_view<Exec, const I, 1>(targets);
    const auto lossv = strided_view<Exec, A, 1>(ls);
    check_cross_entropy_input(function, exec, lv, tv, opt);
    if (has_mean) {
      const Kokkos::View<A, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> mv(
          static_cast<A*>(mean->data));
      kflash::impl::require_disjoint(function, "mean", mv, "logits", lv);
      kflash::impl::require_disjoint(function, "mean", mv, "targets", tv);
      kflash::impl::require_disjoint(function, "mean", mv, "loss", lossv);
      kflash::cross_entropy(exec, lv, tv, lossv, mv, opt);
    } else {
      kflash::cross_entropy(exec, lv, tv, lossv, opt);
    }
    exec.fence();
  });
}

template <class T, class I>
void cross_entropy_backward_typed(const char* function, kflash_memory memory, const kflash_array& logits,
                                  const kflash_array& targets, const kflash_array* dloss, const kflash_array* dlogits,
                                  const kflash_array* lse, const kflash_cross_entropy_options& options) {
  using A = kflash::impl::arith_t<T>;  // dloss's and lse's type
  const kflash_array& lg = required<T>(function, "logits", &logits, 2);
  const kflash_array& dl = required<A>(function, "dloss", dloss, 1);
  const kflash_array& dg = required<T>(function, "dlogits", dlogits, 2, true);
  const bool has_lse = lse != nullptr && lse->data != nullptr;
  if (has_lse) required<A>(function, "lse", lse, 1);
  on_memory(function, memory, [&](const auto& exec) {
    using Exec = std::decay_t<decltype(exec)>;
    const kflash::CrossEntropyOptions opt = cxx_options(options);
    const auto lv = strided_view<Exec, const T, 2>(lg);
    const auto tv = strided_view<Exec, const I, 1>(targets);
    const auto dlv = strided_view<Exec, const A, 1>(dl);
    const auto dgv = strided_view<Exec, T, 2>(dg);
    if (has_lse) kflash::cross_entropy_backward(exec, lv, tv, dlv, dgv, opt, strided_view<Exec, const A, 1>(*lse));
    else kflash::cross_entropy_backward(exec, lv, tv, dlv, dgv, opt);
    exec.fence();
  });
}

/// The frame both calls share: the memory kind, the caller's options, then
/// typed(T(), I(), options) for the logits' floating type T and the targets' integer type I.
template <class F>
kflash_status cross_entropy_call(const char* fn, kflash_memory memory, const kflash_array* logits,
                                 const kflash_array* targets, const kflash_cross_entropy_options* options, F&& typed) {
  return guarded(fn, [&] {
    check_memory(fn, memory);
    const kflash_cross_entropy_options known =
        known_options(fn, options, kflash_cross_entropy_options_init, "kflash_cross_entropy_options_init",
                      sizeof(std::int64_t));
    on_float_type<true>(fn, "logits", logits, [&](auto t) { on_targets(fn, targets, [&](auto i) { typed(t, i, known); }); });
  });
}

}  // namespace

extern "C" {

void kflash_cross_entropy_options_init(kflash_cross_entropy_options* options) {
  if (options == nullptr) return;
  *options = kflash_cross_entropy_options{};
  options->struct_size = sizeof(kflash_cross_entropy_options);
  options->ignore_index = kflash::CrossEntropyOptions().ignore_index;
}

kflash_status kflash_cross_entropy(kflash_memory memory, const kflash_array* logits, const kflash_array* targets,
                                   const kflash_array* loss, const kflash_array* mean,
                                   const kflash_cross_entropy_options* options) {
  const char* fn = "kflash_cross_entropy";
  return cross_entropy_call(fn, memory, logits, targets, options, [&](auto t, auto i, const auto& known) {
    cross_entropy_typed<decltype(t), decltype(i)>(fn, memory, *logits, *targets, loss, mean, known);
  });
}

kflash_status kflash_cross_entropy_backward(kflash_memory memory, const kflash_array* logits,
                                            const kflash_array* targets, const kflash_array* dloss,
                                            const kflash_array* dlogits, const kflash_array* lse,
                                            const kflash_cross_entropy_options* options) {
  const char* fn = "kflash_cross_entropy_backward";
  return cross_entropy_call(fn, memory, logits, targets, options, [&](auto t, auto i, const auto& known) {
    cross_entropy_backward_typed<decltype(t), decltype(i)>(fn, memory, *logits, *targets, dloss, dlogits, lse, known);
  });
}

}  // extern "C"
