// The plan of an attention call (its shapes, block shape, team shape and key splits, decided once
// under the space's traits) and the parts of every attention kernel that do not depend on the
// schedule: which rows, keys and split a team stands for, and where its outputs go.
#pragma once

#include <kflash/impl/schedule/sequences.hpp>
#include <kflash/impl/tile/attention_step.hpp>
#include <kflash/impl/traits.hpp>

#include <type_traits>

namespace kflash::impl {

struct AttentionPlan {
  index_t B = 0, Hq = 0, Hk = 0, Nq = 0, Nk = 0, D = 0, Dv = 0;  // Nq, Nk: the longest sequences
  index_t window_left = -1, window_right = -1;                   // as KeyMask's left and right
  bool ragged = false;       // sequences of their own lengths (varlen, paged): Sequences gives them
  bool at_offset = false;    // row i's diagonal key is i + query_offset (streams), else bottom-right
  index_t query_offset = 0;
  index_t key_run = 0;       // > 0: keys sit in runs of this many (pages); splits start on a run
  index_t fixed_splits = 0;  // > 0: the keys split into this many ranges (at most Nk)
  index_t min_splits = 1;    // otherwise at least this many, more where blocks are too few
  index_t group = 1;         // query heads per K/V head
  index_t bq = 0, bk = 0;    // rows per block, keys per tile
  index_t nqb = 0;           // blocks per K/V head: group * Nq rows
  index_t dvp = 0;           // host kernels: Dv padded to attention_pad
  index_t nsplits = 1, split_len = 0;
  index_t team_size = 1;     // threads per team
  int team_dv = 0;           // team schedule: the shape's output width (0: AttentionKernel)
  bool team_narrow = false;  // team schedule: the shape of 8-row blocks
  index_t packed_ld = 0;     // host kernels: > 0 where K is packed transposed once per K/V head
                             // (host::PackKeys), each head's D rows this many keys apart
};

/// Splits the keys across teams where there are too few blocks to fill the machine (or as p's
/// fixed_splits and min_splits ask); p's block shape is set.
template <class Traits, class ExecSpace>
AttentionPlan plan_splits(const ExecSpace& exec, AttentionPlan p) {
  p.group = p.Hq / p.Hk;
  p.nqb = (p.group * p.Nq + p.bq - 1) / p.bq;
  if constexpr (Traits::host_kernels)
    p.dvp = (p.Dv + Traits::attention_pad - 1) / Traits::attention_pad * Traits::attention_pad;
  const index_t items = p.B * p.Hk * p.nqb;
  const index_t threads = exec.concurrency() > 0 ? index_t(exec.concurrency()) : 1;
  const index_t teams_available = threads / p.team_size;
  const index_t wanted = Traits::items_per_thread * (teams_available > 0 ? teams_available : 1);
  index_t splits = 1;
  if (p.fixed_splits > 0) {
    splits = p.fixed_splits;
  } else {
    if (items < wanted && p.Nk >= 2 * Traits::min_split_keys) {
      splits = (wanted + items - 1) / items;
      if (splits > p.Nk / Traits::min_split_keys) splits = p.Nk / Traits::min_split_keys;
    }
    if (splits < p.min_splits) splits = p.min_splits;
  }
  if (splits > p.Nk) splits = p.Nk;
  if (splits < 1) splits = 1;
  p.split_len = p.Nk > 0 ? (p.Nk + splits - 1) / splits : 0;
  if (p.key_run > 0) p.split_len = (p.split_len + p.key_run - 1) / p.key_run * p.key_run;
  p.nsplits = p.Nk > 0 ? (p.Nk + p.split_len - 1) / p.split_len : 1;
  return p;
}

/// The block shape of a schedule: Shape = void for the per-row schedules (AttentionKernel, the host
/// kernels), else a TeamAttentionShape or a WarpAttentionShape.
template <class Traits, class Shape>
AttentionPlan with_shape(AttentionPlan p) {
  if constexpr (std::is_void<Shape>::value) {
    p.bq = Traits::block_q;
    p.bk = Traits::block_k;
    p.team_size = Traits::host_kernels ? 1 : Traits::block_q;
  } else {
    p.bq = Shape::BQ;
    p.bk = Shape::BK;
    p.team_size = Shape::team_size;
  }
  return p;
}

/// The shape of the schedule for storage S at output width DV: the traits' warp shape where they
/// have one (16-bit and fp32 storage), else their team shape of S's arithmetic type (16-bit storage: float's,
/// its tiles staged widened).
template <class Traits, class S, int DV, bool Narrow>
using shape_of = std::conditional_t<std::is_void<typename Traits::template warp_shape<S, DV, Narrow>>::value,
                                    typename Traits::template team_shape<arith_t<S>, DV, Narrow>,
                                    typename Traits::template warp_shape<S, DV, Narrow>>;

/// Calls f with a pointer of the schedule's shape type for plan p (void* for the per-row ones), S
/// the storage type (shape_of).
template <class S, class Traits, class F>
void with_team_shape(const AttentionPlan& p, F&& f) {
  if constexpr (Traits::host_kernels) {
    f(static_cast<void*>(nullptr));
  } else {
    constexpr int small = Traits::team_dv_small, large = Traits::team_dv_large;
    using Small = shape_of<Traits, S, small, false>;
    using SmallNarrow = shape_of<Traits, S, small, true>;
    using Large = shape_of<Traits, S, large, false>;
    using LargeNarrow = shape_of<Traits, S, large, true>;
    if (p.team_dv == small && p.team_narrow) f(static_cast<SmallNarrow*>(nullptr));
    else if (p.team_dv == small) f(static_cast<Small*>(nullptr));
    else if (p.team_dv == large && p.team_narrow) f(static_cast<LargeNarrow*>(nullptr));
    else if (p.team_dv == large) f(static_cast<Large*>(nullptr));
    else f(static_cast<void*>(nullptr));
  }
}

/// The plan of a call whose shapes are in p: its schedule (p.team_dv: 0 for the per-row schedules,
/// else the team shape's output width; p.team_narrow for blocks of 8 rows where a K/V head has at
/// most 8 query rows), block shape and key splits.
template <class T, class Traits, class ExecSpace>
AttentionPlan plan_attention(const ExecSpace& exec, AttentionPlan p) {
  if constexpr (!Traits::host_kernels) {
    p.team_dv = p.Dv <= Traits::team_dv_small ? Traits::team_dv_small
                                               : p.Dv <= Traits::team_dv_large ? Traits::team_dv_large : 0;
  }
  p.team_narrow = (p.Hq / p.Hk) * p.Nq <= 8;
  with_team_shape<T, Traits>(p, [&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    p = with_shape<Traits, Shape>(p);
  });
  if constexpr (Traits::host_kernels && std::is_same<T, bhalf_t>::value) {
    p.bq = Traits::block_q_bf16;
    p.bk = Traits::block_k_bf16;
  }
  p = plan_splits<Traits>(exec, p);
  // The host kernels' blocks of more than dot_rows rows read K transposed. Where a K/V head has
  // several blocks, K is packed once for all of them rather than staged by each (dense keys only:
  // varlen and paged keys are staged). The keys run past Nk by a tile of zeros, so that every tile
  // reads bk packed keys whatever key it starts at.
  if constexpr (Traits::host_kernels)
    if (!p.ragged && p.nqb > 1) p.packed_ld = (p.Nk + p.bk - 1) / p.bk * p.bk + p.bk;
  return p;
}

/// A block mask (a hint for speed): blocks(b, h, i / rows, j / keys) false says that no pair of that
/// block of rows x keys is visible, so tiles that only such blocks cover are skipped.
struct BlockMask {
  Strided<bool> blocks;
  index_t rows = 1, keys = 1;
  /// Whether every pair of the rows [rho0, rho0 + nr) of a head group with the keys [t0, t0 + nk)
  /// is hidden (the tile is then skipped), where row rho is query row rho % nq of head
  /// h0 + rho / nq. Every thread of a team gets the same answer.
  KOKKOS_INLINE_FUNCTION bool hides(index_t b, index_t h0, index_t nq, index_t rho0, index_t nr, index_t t0,
                                    index_t nk) const {
    if (!blocks.on()) return false;
    const index_t k0 = t0 / keys, k1 = (t0 + nk - 1) / keys;
    index_t last_h = -1, last_qb = -1;
    for (index_t rho = rho0; rho < rho0 + nr; ++rho) {
      const index_t h = h0 + rho / nq, qb = (rho % nq) / rows;
      if (h == last_h && qb == last_qb) continue;
      last_h = h, last_qb = qb;
      for (index_t kb = k0; kb <= k1; ++kb)
        if (blocks(b, h, qb, kb)) return false;
    }
    return true;
  }
};

/// Row r of a tile in scratch, as a function of the column.
template <class Tile>
struct TileRow {
  Tile tile;
  index_t r;
  KOKKOS_INLINE_FUNCTION auto operator()(index_t d) const { return tile(r, d); }
};

/// The parts of an attention kernel that do not depend on the schedule: which rows, keys and split
/// a team's league rank stands for, the score stage, and where a row's output goes. With Partial, a
/// key split's normalised output and lse go to o(split, ...) and lse(split, ...), in the format
/// merge_attention() takes; otherwise to the final o and lse.
template <class ExecSpace, class Stage, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct AttentionKernelBase {
  using S = std::remove_cv_t<typename QV::value_type>;  // what q, k and v hold
  using T = arith_t<S>;                                 // what the kernels compute in (float for 16-bit S)
  using Out = typename OV::non_const_value_type;        // o's values: S, or T for split K/V's parts
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using scratch_space = typename ExecSpace::scratch_memory_space;
  /// Tiles and per-row states in team scratch.
  using Tile = Kokkos::View<T**, Kokkos::LayoutRight, scratch_space, Kokkos::MemoryUnmanaged>;
  using States = Kokkos::View<SoftmaxState<T>*, scratch_space, Kokkos::MemoryUnmanaged>;

  QV q;
  KV k;
  VV v;
  OV o;
  LV lse;
  bool has_lse;
  AttentionPlan p;
  T scale;
  Stage stage;
  Strided<T> sinks;  // one logit per query head, joining each row's denominator (off when null)
  BlockMask block_mask;
  int scratch_level;

  Sequences<typename ExecSpace::memory_space> seq;

  /// The team's block of scratch of `bytes` bytes at scratch_level, 16-byte aligned. Each branch
  /// names its level as a constant: Kokkos' allocator picks a level's pointers by reference, and a
  /// run-time level keeps the allocator in local memory (a stack frame on CUDA).
  KOKKOS_INLINE_FUNCTION char* scratch_block(const member_type& team, std::size_t bytes) const {
    return static_cast<char*>(scratch_level == 0 ? team.team_scratch(0).get_shmem_aligned(bytes, 16, 0)
                                                 : team.team_scratch(1).get_shmem_aligned(bytes, 16, 1));
  }

  /// A team's work: rows [rho0, rho0 + nrows) of K/V head hk of batch b, against keys [kb, ke);
  /// batch b's sequences have nq queries and nk keys, and mask says which keys each row sees.
  struct Block {
    index_t b, hk, rho0, nrows, kb, ke, split, nq, nk;
    KeyMask mask;
  };
  KOKKOS_INLINE_FUNCTION Block block_of(index_t item) const {
    Block w;
    w.split = item % p.nsplits;
    item /= p.nsplits;
    const index_t qb = item % p.nqb;
    item /= p.nqb;
    w.hk = item % p.Hk;
    w.b = item / p.Hk;
    w.nq = seq.nq(w.b);
    w.nk = seq.nk(w.b);
    w.mask = KeyMask{w.nk, p.at_offset ? p.query_offset : w.nk - w.nq, p.window_left, p.window_right};
    const index_t rows = p.group * w.nq;
    w.rho0 = qb * p.bq;
    w.nrows = rows - w.rho0 < p.bq ? (rows > w.rho0 ? rows - w.rho0 : 0) : p.bq;
    w.kb = w.split * p.split_len;
    w.ke = w.kb + p.split_len < w.nk ? w.kb + p.split_len : w.nk;
    if (w.nrows == 0) {
      w.ke = w.kb;
      return w;
    }
    // The tiles no row of the block sees are skipped.
    const KeyRange seen = w.mask.keys_of_group_rows(w.nq, w.rho0, w.nrows);
    if (seen.begin > w.kb) w.kb = seen.begin;
    if (seen.end < w.ke) w.ke = seen.end;
    if (w.ke < w.kb) w.ke = w.kb;
    return w;
  }

  /// Query head and row of block w's row rho: row rho of K/V head hk is query row rho % nq of head
  /// hk * group + rho / nq.
  struct Row {
    index_t h, i;
  };
  KOKKOS_INLINE_FUNCTION Row row_of(const Block& w, index_t rho) const {
    return Row{w.hk * p.group + rho / w.nq, rho % w.nq};
  }

  /// Whether the block mask hides every pair of block w's rows with keys [t0, t0 + nk).
  KOKKOS_INLINE_FUNCTION bool tile_hidden(const Block& w, index_t t0, index_t nk) const {
    return block_mask.hides(w.b, w.hk * p.group, w.nq, w.rho0, w.nrows, t0, nk);
  }

  /// For schedules whose tiles start at w.kb, bk keys apart: the keys of the tile from t0, and the
  /// first tile start t0 >= t that the block mask does not hide (or w.ke).
  KOKKOS_INLINE_FUNCTION static index_t keys_at(const Block& w, index_t t0, index_t bk) {
    return w.ke - t0 < bk ? w.ke - t0 : bk;
  }
  KOKKOS_INLINE_FUNCTION index_t next_tile(const Block& w, index_t t, index_t bk) const {
    for (; t < w.ke; t += bk)
      if (!tile_hidden(w, t, keys_at(w, t, bk))) return t;
    return w.ke;
  }

  /// The keys query row i of block w sees.
  KOKKOS_INLINE_FUNCTION KeyRange keys_of(const Block& w, index_t i) const { return w.mask.keys_of(i); }
  /// Where block w's row `row` is, for the score stage.
  KOKKOS_INLINE_FUNCTION RowAt at(const Block& w, Row row) const {
    return RowAt{w.b, row.h, row.i, row.i + w.mask.shift};
  }

  KOKKOS_INLINE_FUNCTION Out& out(const Block& w, Row row, index_t d) const {
    if constexpr (Partial) return o(w.split, w.b, row.h, row.i, d);
    else return o(w.b, row.h, row.i, d);
  }
  /// Finishes row `row`'s state st (the sink joins it, in the first key split only) and returns the
  /// factor that turns its running O into the output.
  KOKKOS_INLINE_FUNCTION T finish(const Block& w, Row row, SoftmaxState<T>& st) const {
    const bool with_sink = sinks.on() && w.split == 0;
    return finish_row(st, with_sink, with_sink ? sinks(row.h) : T(0));
  }
  KOKKOS_INLINE_FUNCTION void store_lse(const Block& w, Row row, const SoftmaxState<T>& st) const {
    if (!has_lse) return;
    if constexpr (Partial) lse(w.split, w.b, row.h, row.i) = st.logsumexp();
    else lse(w.b, row.h, row.i) = st.logsumexp();
  }
  /// Row `row`'s output and lse, from its running O (o_col(d), d < Dv) and state.
  template <class OCol>
  KOKKOS_INLINE_FUNCTION void store(const Block& w, Row row, const OCol& o_col, SoftmaxState<T> st) const {
    const T factor = finish(w, row, st);
    for (index_t d = 0; d < p.Dv; ++d) out(w, row, d) = store_as<Out>(o_col(d) * factor);
    store_lse(w, row, st);
  }
};

}  // namespace kflash::impl
