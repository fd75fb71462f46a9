// The lane-block policy of the host kernels: ScalarLanes' blocks of 16 lanes held as vectors of VB
// bytes, so the tile recurrence of include/kflash/impl/tile/tile_state.hpp runs on vector registers
// with the same additions in the same order. The values are read from memory (Load).
#pragma once

#include "vector_exp.hpp"

#include <kflash/impl/traits.hpp>

namespace kflash::impl::host::internal {

#ifdef KFLASH_IMPL_VECTOR_EXT
template <class T, int VB>
struct VectorLanes {
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
  static void max(Block& a, const Load<T>& x, index_t i) {
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {
      V::load(t, x.p + i + u * vector_width);
      V::max(a.v[u], t);
    }
  }
  static void max(Block& a, const Block& b) {
    for (int u = 0; u < vectors; ++u) V::max(a.v[u], b.v[u]);
  }
  static T max_lanes(Block a) {
    for (int h = vectors / 2; h >= 1; h /= 2)
      for (int u = 0; u < h; ++u) V::max(a.v[u], a.v[u + h]);
    return reduce_lanes<T, VB, MaxOp>(a.v[0]);
  }
  static void add(Block& a, const T* w) {
    typename V::type t;
    for (int u = 0; u < vectors; ++u) {
      V::load(t, w + u * vector_width);
      a.v[u] += t;
    }
  }
  /// The tree's first levels add vector u + h to vector u (lane l + h * vector_width to lane l),
  /// its last levels the halves of the one vector left.
  static T sum_tree(Block& a) {
    for (int h = vectors / 2; h >= 1; h /= 2)
      for (int u = 0; u < h; ++u) a.v[u] += a.v[u + h];
    return reduce_lanes<T, VB, AddOp>(a.v[0]);
  }
  static void exp_block(const Load<T>& x, index_t i, T m, T* w) {
    LaneExp<T, VB>::template apply<width>(x.p + i, m, w);
  }

#ifdef KFLASH_IMPL_SHUFFLES
  /// The blocks of each vector's worth of rows (N a multiple of it) are reduced by one LaneTrees
  /// tree, after each block's vectors are combined into one (sum_tree's first levels).
  static constexpr int rows_at_once = vector_width;
#else
  static constexpr int rows_at_once = 1;
#endif
  template <int N>
  static void max_lanes(const Block (&a)[N], T (&out)[N]) {
#ifdef KFLASH_IMPL_SHUFFLES
    if constexpr (N % vector_width == 0) {
      for (int k0 = 0; k0 < N; k0 += vector_width) {
        typename V::type v[vector_width], r;
        for (int k = 0; k < vector_width; ++k) {
          v[k] = a[k0 + k].v[0];
          for (int u = 1; u < vectors; ++u) V::max(v[k], a[k0 + k].v[u]);
        }
        LaneTrees<T, VB, MaxOp>::apply(v, r);
        V::store(out + k0, r);
      }
      return;
    }
#endif
    for (int k = 0; k < N; ++k) out[k] = max_lanes(a[k]);
  }
  template <int N>
  static void sum_trees(Block (&a)[N], T (&out)[N]) {
#ifdef KFLASH_IMPL_SHUFFLES
    if constexpr (N % vector_width == 0) {
      for (int k0 = 0; k0 < N; k0 += vector_width) {
        typename V::type v[vector_width], r;
        for (int k = 0; k < vector_width; ++k) {
          Block& b = a[k0 + k];
          for (int h = vectors / 2; h >= 1; h /= 2)
            for (int u = 0; u < h; ++u) b.v[u] += b.v[u + h];
          v[k] = b.v[0];
        }
        LaneTrees<T, VB, AddOp>::apply(v, r);
        V::store(out + k0, r);
      }
      return;
    }
#endif
    for (int k = 0; k < N; ++k) out[k] = sum_tree(a[k]);
  }
};

#else
// Without vector extensions (builds through nvcc, whose tile templates are also device functions):
// the plain lanes themselves.
template <class T, int VB>
using VectorLanes = ScalarLanes<T>;
#endif

}  // namespace kflash::impl::host::internal
