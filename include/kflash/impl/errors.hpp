// Argument checking shared by every kflash entry point.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

namespace kflash::impl {

/// "name (e0, e1, ...)" for the first `rank` extents. Compiled in src/errors.cpp.
std::string describe_extents(const char* name, int rank, const std::size_t* extents);

/// Throws std::invalid_argument("kflash::<function>: <message>").
[[noreturn]] void throw_invalid_argument(const char* function, const std::string& message);

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

/// Compile-time checks every View argument goes through.
template <class ExecSpace, class View, bool Writable>
constexpr void static_check_view() {
  static_assert(Kokkos::is_execution_space<ExecSpace>::value,
                "kflash: the first argument must be a Kokkos execution space instance");
  static_assert(Kokkos::is_view<View>::value, "kflash: arguments must be Kokkos::View");
  using value_type = typename View::value_type;
  static_assert(std::is_floating_point<std::remove_cv_t<value_type>>::value,
                "kflash: View value type must be float or double");
  static_assert(!Writable || !std::is_const<value_type>::value,
                "kflash: an output View must not have a const value type");
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, typename View::memory_space>::accessible,
                "kflash: View memory space is not accessible from the execution space");
}

}  // namespace kflash::impl
