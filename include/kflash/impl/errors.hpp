// Argument checking shared by every kflash entry point.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

namespace kflash::impl {

/// "name (e0, e1, ...)" for the first `rank` extents. Compiled in src/errors.cpp.
std::string describe_extents(const char* name, int rank, const std::size_t* extents);

/// Throws std::invalid_argument("kflash::<function>: <message>").
[[noreturn]] void throw_invalid_argument(const char* function, const std::string& message);

/// Throws std::runtime_error("kflash::<function>: Kokkos is not initialized ...") unless called
/// between Kokkos::initialize and Kokkos::finalize. Every entry point checks it first.
void require_initialized(const char* function);

/// Why this host thread cannot launch `space`'s kernels (Kokkos before 4.4 runs them only from the
/// thread that initialised it), and the std::runtime_error("kflash::<function>: <why>") that says so.
/// Compiled in src/errors.cpp.
std::string wrong_thread_message(const char* space);
[[noreturn]] void throw_wrong_thread(const char* function, const char* space);

/// The lock that serialises kflash's calls where Kokkos does not serialise host threads itself
/// (recursive: a call may make another, as a stream's update makes attention's).
std::recursive_mutex& call_lock();

/// What every call that launches kernels on ExecSpace holds for its duration: made first, it checks
/// that Kokkos is initialized and that this host thread may launch on ExecSpace, and with Kokkos
/// before 4.4 it holds call_lock(), so that calls from several host threads run one at a time.
template <class ExecSpace>
class CallScope {
 public:
  explicit CallScope(const char* function) {
    require_initialized(function);
    if (!launches_from_this_thread<ExecSpace>()) throw_wrong_thread(function, ExecSpace::name());
    if constexpr (!kokkos_serialises_host_threads) lock_ = std::unique_lock<std::recursive_mutex>(call_lock());
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

/// The default instance of an execution space, for the calls made without one; checks that Kokkos
/// is initialized before the instance is made.
template <class ExecSpace>
ExecSpace initialized_space(const char* function) {
  require_initialized(function);
  return ExecSpace();
}
template <class View>
typename View::execution_space default_space(const char* function) {
  return initialized_space<typename View::execution_space>(function);
}

template <class View>
std::string describe(const char* name, const View& v) {
  constexpr int rank = view_rank<View>;
  std::size_t extents[rank > 0 ? rank : 1] = {};
  if constexpr (rank > 0) {
    for (int i = 0; i < rank; ++i) extents[i] = v.extent(i);
  }
  return describe_extents(name, rank, extents);
}

template <class A, class B>
bool same_extents(const A& a, const B& b) {
  if constexpr (view_rank<A> != view_rank<B>) {
    return false;
  } else {
    for (int i = 0; i < view_rank<A>; ++i)
      if (a.extent(i) != b.extent(i)) return false;
    return true;
  }
}

/// Throws unless `v` has one of the ranks in [lo, hi].
template <class View>
void require_rank(const char* function, const char* name, const View& v, int lo, int hi) {
  constexpr int rank = view_rank<View>;
  if (rank < lo || rank > hi) {
    throw_invalid_argument(function, "argument '" + describe(name, v) + "' has rank " +
                                         std::to_string(rank) + ", expected rank " +
                                         (lo == hi ? std::to_string(lo)
                                                   : std::to_string(lo) + " or " + std::to_string(hi)));
  }
}

/// Throws unless `b` has the rank and extents of `a`.
template <class A, class B>
void require_same_shape(const char* function, const char* name_a, const A& a, const char* name_b,
                        const B& b) {
  if (!same_extents(a, b)) {
    throw_invalid_argument(function, "argument '" + describe(name_b, b) + "' must have the shape of '" +
                                         describe(name_a, a) + "'");
  }
}

/// The bytes from a View's first element to the end of its last: 0 when it has no element. (A
/// strided View's span() may count past its last element.)
template <class View>
std::size_t footprint_bytes(const View& v) {
  if (v.size() == 0 || v.data() == nullptr) return 0;
  std::size_t last = 0;
  for (int i = 0; i < view_rank<View>; ++i) last += (v.extent(i) - 1) * v.stride(i);
  return (last + 1) * sizeof(typename View::value_type);
}

/// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool bytes_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a), b0 = reinterpret_cast<std::uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

/// Whether the memory of two Views, from the first element to the end of the last of each, shares
/// a byte. Views in different memory spaces never do.
template <class A, class B>
bool overlap(const A& a, const B& b) {
  if constexpr (!std::is_same<typename A::memory_space, typename B::memory_space>::value) {
    return false;
  } else {
    return bytes_overlap(a.data(), footprint_bytes(a), b.data(), footprint_bytes(b));
  }
}

/// Throws std::invalid_argument: output `out` (described) overlaps input `in` (described).
[[noreturn]] inline void throw_aliased(const char* function, const std::string& out, const std::string& in) {
  throw_invalid_argument(function,
                         "argument '" + out + "' overlaps '" + in + "' in memory: an output must not alias an input");
}

/// Throws unless the output `out` and the input `in` occupy disjoint memory.
template <class Out, class In>
void require_disjoint(const char* function, const char* out_name, const Out& out, const char* in_name, const In& in) {
  if (overlap(out, in)) throw_aliased(function, describe(out_name, out), describe(in_name, in));
}

/// Throws unless `y` is either the View `x` itself (the same data, extents and strides: in place)
/// or disjoint from it; a partial overlap would read elements the call has already written.
template <class X, class Y>
void require_same_or_disjoint(const char* function, const char* x_name, const X& x, const char* y_name,
                              const Y& y) {
  if (!overlap(x, y)) return;
  bool same = static_cast<const void*>(x.data()) == static_cast<const void*>(y.data()) && same_extents(x, y);
  if constexpr (view_rank<X> == view_rank<Y>) {
    for (int i = 0; i < view_rank<X>; ++i) same = same && (x.extent(i) <= 1 || x.stride(i) == y.stride(i));
  }
  if (!same) {
    throw_invalid_argument(function, "argument '" + describe(y_name, y) + "' overlaps '" + describe(x_name, x) +
                                         "' in memory without being the same View: pass the same View to work "
                                         "in place, or disjoint memory");
  }
}

/// Compile-time checks every View argument goes through. Takes16: the call also takes 16-bit
/// storage (kflash::bhalf_t, kflash::half_t).
template <class ExecSpace, class View, bool Writable, bool Takes16 = false>
constexpr void static_check_view() {
  static_assert(Kokkos::is_execution_space<ExecSpace>::value,
                "kflash: the first argument must be a Kokkos execution space instance");
  static_assert(Kokkos::is_view<View>::value, "kflash: arguments must be Kokkos::View");
  using value_type = typename View::value_type;
  static_assert(Takes16 || !is_half_type<std::remove_cv_t<value_type>>,
                "kflash: this argument takes float or double Views; 16-bit ones (kflash::bhalf_t, kflash::half_t) are "
                "taken for rows, logits, q, k, v, o and their gradients, with float losses, lse and options");
  static_assert(std::is_floating_point<std::remove_cv_t<value_type>>::value ||
                    (Takes16 && is_half_type<std::remove_cv_t<value_type>>),
                "kflash: View value type must be float or double (or kflash::bhalf_t, kflash::half_t where the "
                "call takes 16-bit storage)");
  static_assert(!Writable || !std::is_const<value_type>::value,
                "kflash: an output View must not have a const value type");
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, typename View::memory_space>::accessible,
                "kflash: View memory space is not accessible from the execution space");
}

/// Compile-time check that two View arguments of a call have the same value type.
template <class A, class B>
constexpr void static_check_same_type() {
  static_assert(std::is_same<std::remove_cv_t<typename A::value_type>, std::remove_cv_t<typename B::value_type>>::value,
                "kflash: every View of a call must have the same value type");
}

/// Compile-time check that a View of per-row values (an lse, a loss, its upstream gradient) has
/// the value type of the rows' View X, or float where X holds 16-bit values.
template <class X, class PerRow>
constexpr void static_check_row_scalars() {
  using XS = std::remove_cv_t<typename X::value_type>;
  using RS = std::remove_cv_t<typename PerRow::value_type>;
  static_assert(std::is_same<XS, RS>::value || (is_half_type<XS> && std::is_same<RS, float>::value),
                "kflash: a View of one value per row (lse, dlse, dloss) must have the rows' value type, or float "
                "where the rows hold kflash::bhalf_t or kflash::half_t");
}

}  // namespace kflash::impl
