// make_block_mask()'s kernel: one work item per block of rows x keys, which asks the user's
// mask_mod pair by pair until one is visible.
#pragma once

#include <kflash/impl/math.hpp>

namespace kflash::impl {

template <class MaskMod, class View>
struct BlockMaskKernel {
  MaskMod mask_mod;
  View blocks;  // (B, Hq, ceil(Nq / rows), ceil(Nk / keys))
  index_t Nq, Nk, rows, keys;

  KOKKOS_INLINE_FUNCTION void operator()(index_t item) const {
    const index_t nbq = index_t(blocks.extent(2)), nbk = index_t(blocks.extent(3)), H = index_t(blocks.extent(1));
    const index_t kb = item % nbk, qb = (item / nbk) % nbq, h = (item / (nbk * nbq)) % H, b = item / (nbk * nbq * H);
    const index_t i1 = (qb + 1) * rows < Nq ? (qb + 1) * rows : Nq, j1 = (kb + 1) * keys < Nk ? (kb + 1) * keys : Nk;
    bool any = false;
    for (index_t i = qb * rows; i < i1 && !any; ++i)
      for (index_t j = kb * keys; j < j1 && !any; ++j) any = mask_mod(b, h, i, j);
    blocks(b, h, qb, kb) = any;
  }
};

}  // namespace kflash::impl
