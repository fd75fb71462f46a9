// The host kernels' attention tile: the scores by a micro-GEMM, each row's tile step (score stage,
// tile state, merge: include/kflash/impl/tile/attention_step.hpp) on vector lanes, then O = fa O +
// (fb P) V by a micro-GEMM.
#pragma once

#include "gemm.hpp"
#include "vector_lanes.hpp"

#include <kflash/impl/host/host_kernels.hpp>
#include <kflash/impl/tile/attention_step.hpp>

namespace kflash::impl::host::internal {

template <class T, int VB>
void attention_tile(const AttentionTile<T>& t) {
  constexpr int R = HostTraits::gemm_rows<VB>, NV = HostTraits::gemm_vectors, DB = HostTraits::dot_block;
  static_assert(HostTraits::attention_pad % (NV * VB / int(sizeof(T))) == 0,
                "kflash: the attention tiles' padding must be a multiple of the register block's columns");
  if (t.part != TilePart::update) {
    if (t.k != nullptr) {  // scores of the nk keys, from K's rows in place
      gemm_nt<T, VB, DB, DB>(t.q, t.D, t.k, t.ldk, t.s, t.bk, t.rows, t.nk, t.D);
    } else {  // scores for all bk columns of kt (columns past nk hold leftovers and are never read)
      gemm<T, R, NV, VB, false>(t.q, t.D, t.kt, t.bk, t.s, t.bk, t.rows, t.bk, t.D);
    }
    if (t.part == TilePart::scores) return;
  }
  for (index_t r = 0; r < t.rows; ++r) {
    T* s = t.s + r * t.bk;
    T* o = t.o + r * t.dvp;
    const OutputFactors<T> f = tile_step<VectorLanes<T, VB>, T>(t.state[r], t.keys[r], t.nk, Load<T>{s}, Store<T>{s});
    for (index_t j = 0; j < t.nk; ++j) s[j] = f.weight(s[j]);
    for (index_t d = 0; d < t.dvp; ++d) o[d] = f.kept(o[d]);
  }
  gemm<T, R, NV, VB, true>(t.s, t.bk, t.v, t.ldv, t.o, t.dvp, t.rows, t.dvp, t.nk);
}

}  // namespace kflash::impl::host::internal
