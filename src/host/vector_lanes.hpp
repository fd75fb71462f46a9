// The lane-block policy of the host kernels: ScalarLanes' blocks of 16 lanes held as vectors of VB
// bytes, so the tile recurrence of include/kflash/impl/tile/tile_state.hpp runs on vector registers
// with the same additions in the same order, but for a row's last values after its whole blocks:
// one more block here (padded_tail), one by one there. The values are read from memory: Load<T>, or
// Widened<T, B> for rows stored as 16-bit B (widened to float as they load).
#pragma once

#include "half_vectors.hpp"
#include "vector_exp.hpp"

#include <kflash/impl/traits.hpp>

#include <cstdint>
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
  /// A row's last count < width values as one more block (tail_max, tail_block): its exps and its
  /// sums then run on vectors rather than one value after another.
  static constexpr bool padded_tail = true;

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
  /// The values [i, e) after the whole blocks from b, e - i < width, into a's maxima.
  template <class X>
  static void tail_max(Block& a, const X& x, index_t b, index_t i, index_t e) {
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {
      if (i - b < width) padded_vector(x, i, e, u, t);
      else last_block_vector(x, i, e, u, t);
      V::max(a.v[u], t);
    }
  }
  /// terms' weights of the values [i, e) after the whole blocks from b (e - i < width) into w's lanes
  /// [first, first + e - i), 0s into the others; returns first. The values read past the end (or
  /// before i) are -inf to the terms.
  template <class Terms>
  static int tail_block(const Terms& terms, index_t b, index_t i, index_t e, T* w) {
    alignas(VB) T v[width];
    if (i - b < width) {
      pad(terms.value, i, e, v);
      terms.template block_of<VectorLanes>(v, w);
      return 0;
    }
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {  // stored as whole vectors: the block's loads take them from the stores
      last_block_vector(terms.value, i, e, u, t);
      V::store(v + u * vector_width, t);
    }
    terms.template block_of<VectorLanes>(v, w);
    return int(width - (e - i));
  }
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
  /// Vector u of the block x(i), ..., x(e - 1), then -inf (for rows shorter than a block: nothing is
  /// read at or past e).
  template <class X>
  static void padded_vector(const X& x, index_t i, index_t e, int u, typename V::type& t) {
    using B = std::remove_cv_t<std::remove_pointer_t<decltype(x.p)>>;
    const index_t count = e - i - u * vector_width;
    if (count <= 0) {
      V::fill(t, -infinity<T>());
      return;
    }
    PartialOperand<T, VB, B>::load(t, x.p + i + u * vector_width, count);
  }
  /// The same block into v's width lanes, as whole vectors (the block's loads take them from the stores).
  template <class X>
  static void pad(const X& x, index_t i, index_t e, T* v) {
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {
      padded_vector(x, i, e, u, t);
      V::store(v + u * vector_width, t);
    }
  }
  /// Vector u of the block that ends at e (x's elements from e - width on are readable), its lanes
  /// before i set to -inf: the values [i, e) without a load past the row's end.
  template <class X>
  static void last_block_vector(const X& x, index_t i, index_t e, int u, typename V::type& t) {
    using B = std::remove_cv_t<std::remove_pointer_t<decltype(x.p)>>;
    using Index = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
    typedef Index index_type __attribute__((vector_size(VB)));
    const index_t s = e - width + u * vector_width;  // the element in lane 0
    Operand<T, VB, B>::load(t, x.p + s);
    index_type lane;
    for (int l = 0; l < vector_width; ++l) lane[l] = Index(l);
    typename V::type ninf;
    V::fill(ninf, -infinity<T>());
    t = lane >= index_type{} + Index(i - s) ? t : ninf;
  }
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
