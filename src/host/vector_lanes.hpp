// The lane-block policy of the host kernels: ScalarLanes' blocks of 16 lanes held as vectors of VB
// bytes, so the tile recurrence of include/kflash/impl/tile/tile_state.hpp runs on vector registers
// with the same additions in the same order. The values are read from memory: Load<T>, or
// Widened<T, B> for rows stored as 16-bit B (widened to float as they load).
#pragma once

#include "half_vectors.hpp"
#include "vector_exp.hpp"

#include <kflash/impl/traits.hpp>

#include <type_traits>

namespace kflash::impl::host::internal {

/// Element access to a row stored as B, read as T (16-bit B widened to float by its conversion,
/// Operand::element's value; callable where the tile templates are device functions too, as in
/// builds through nvcc).
template <class T, class B>
struct Widened {
  const B* p;
  KOKKOS_INLINE_FUNCTION T operator()(index_t i) const { return T(p[i]); }
};
/// The accessor of a row stored as B: Load<T> itself where B is T.
template <class T, class B>
using Elements = std::conditional_t<std::is_same<T, B>::value, Load<T>, Widened<T, B>>;

#ifdef KFLASH_IMPL_VECTOR_EXT
/// A's exp (ExpOf) computes the weights.
template <class T, int VB, ExpAccuracy A = ExpAccuracy::full>
struct VectorLanes {
  using Exp = typename ExpOf<T, VB, A>::type;
  using V = Vec<T, VB>;
  static constexpr int width = ScalarLanes<T>::width;
  static constexpr int vector_width = VB / int(sizeof(T));
  static constexpr int vectors = width / vector_width;  // vectors of a block
  static_assert(vectors >= 1 && vectors * vector_width == width, "kflash: a block's lanes must fill whole vectors");
  /// The maximum runs on HostTraits::max_vectors vectors at a time (independent chains).
  static constexpr int chains = vectors >= HostTraits::max_vectors ? 1 : HostTraits::max_vectors / vectors;

  struct Block {
    typename V::type v[vectors];
  };
  static void fill(Block& a, T x) {
    for (int u = 0; u < vectors; ++u) V::fill(a.v[u], x);
  }
  template <class X>  // Load<T> or Widened<T, B>
  static void max(Block& a, const X& x, index_t i) {
    using B = std::remove_cv_t<std::remove_pointer_t<decltype(x.p)>>;
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {
      Operand<T, VB, B>::load(t, x.p + i + u * vector_width);
      V::max(a.v[u], t);
    }
  }
  static void max(Block& a, const Block& b) {
    for (int u = 0; u < vectors; ++u) V::max(a.v[u], b.v[u]);
  }
  static T max_lanes(const Block& a) { return reduce<MaxOp>(a); }
  static void add(Block& a, const T* w) {
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {
      V::load(t, w + u * vector_width);
      a.v[u] += t;
    }
  }
  static T sum_tree(Block& a) { return reduce<AddOp>(a); }
  static void exp_block(const Load<T>& x, index_t i, T m, T* w) {
    Exp::template apply<width>(x.p + i, m, w);
  }
  template <class B>
  static void exp_block(const Widened<T, B>& x, index_t i, T m, T* w) {
    alignas(VB) T v[width];
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {
      Operand<T, VB, B>::load(t, x.p + i + u * vector_width);
      V::store(v + u * vector_width, t);
    }
    Exp::template apply<width>(v, m, w);
  }

#ifdef KFLASH_IMPL_SHUFFLES
  /// max_lanes and sum_trees reduce the blocks of each vector's worth of rows by one LaneTrees tree.
  static constexpr int rows_at_once = vector_width;
#else
  static constexpr int rows_at_once = 1;
#endif
  template <int N>
  static void max_lanes(const Block (&a)[N], T (&out)[N]) {
    reduce_rows<MaxOp>(a, out);
  }
  template <int N>
  static void sum_trees(Block (&a)[N], T (&out)[N]) {
    reduce_rows<AddOp>(a, out);
  }

 private:
  /// Block a's vectors combined into one by Op (MaxOp, AddOp), as a tree: its first levels combine
  /// vector u + h with vector u (lane l + h * vector_width with lane l).
  template <class Op>
  static void fold(const Block& a, typename V::type& out) {
    Block b = a;
    for (int h = vectors / 2; h >= 1; h /= 2)
      for (int u = 0; u < h; ++u) Op::template apply<T, VB>(b.v[u], b.v[u + h]);
    out = b.v[0];
  }
  /// The tree's last levels: the halves of the one vector left.
  template <class Op>
  static T reduce(const Block& a) {
    typename V::type v;
    fold<Op>(a, v);
    return reduce_lanes<T, VB, Op>(v);
  }
  /// out[k] = reduce<Op>(a[k]); each vector's worth of rows (N a multiple of it) by one LaneTrees
  /// tree after fold.
  template <class Op, int N>
  static void reduce_rows(const Block (&a)[N], T (&out)[N]) {
#ifdef KFLASH_IMPL_SHUFFLES
    if constexpr (N % vector_width == 0) {
      for (int k0 = 0; k0 < N; k0 += vector_width) {
        typename V::type v[vector_width], r;
        for (int k = 0; k < vector_width; ++k) fold<Op>(a[k0 + k], v[k]);
        LaneTrees<T, VB, Op>::apply(v, r);
        V::store(out + k0, r);
      }
      return;
    }
#endif
    for (int k = 0; k < N; ++k) out[k] = reduce<Op>(a[k]);
  }
};

#else
// Without vector extensions (builds through nvcc, whose tile templates are also device functions):
// the plain lanes themselves.
template <class T, int VB, ExpAccuracy A = ExpAccuracy::full>
using VectorLanes = ScalarLanes<T>;
#endif

}  // namespace kflash::impl::host::internal
