// Exact scaled-dot-product attention on the online (m, l, O) recurrence, and the merge of partial
// attention results.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/errors.hpp>
#include <kflash/impl/host_kernels.hpp>
#include <kflash/impl/rows.hpp>
#include <kflash/impl/team_attention.hpp>
#include <kflash/impl/workspace.hpp>

#include <cmath>
#include <string>
#include <type_traits>

namespace kflash {

/// Which schedule attention() runs.
enum class AttentionSchedule {
  automatic,  ///< chosen from the shapes: split_kv when there are too few query blocks to fill the machine
  prefill,    ///< a team per block of query rows, K/V tiles streamed through team scratch memory
  split_kv    ///< the keys split across teams too; partial (O, lse) merged as by merge_attention()
};

/// Options of attention(). A plain struct: set the members you need.
struct AttentionOptions {
  /// Scores are scale * q . k; 0 means 1 / sqrt(D).
  double scale = 0;
  /// Causal mask aligned bottom-right (as FlashAttention 2.1+): query i sees keys j <= i + Nk - Nq.
  /// A query that sees no key (Nq > Nk) gets O = 0 and lse = -inf.
  bool causal = false;
  /// The schedule; automatic unless forced for testing or tuning.
  AttentionSchedule schedule = AttentionSchedule::automatic;
  /// For split_kv: the number of key splits (0: chosen from the shapes).
  int num_splits = 0;
};

namespace impl {

/// Schedule parameters of the attention kernels for one execution space. A block is block_q query
/// rows of the query heads that share one K/V head (GQA: the group's Hq / Hk heads' rows one after
/// the other, so each K/V tile is read once for all of them); K/V tiles of block_k keys go through
/// team scratch memory. Hosts: a one-thread team hands each tile to the compiled tile kernel of
/// host_kernels.hpp (register-blocked products, K staged transposed). Devices: the team schedule of
/// team_attention.hpp with team_shape<T, 64, narrow> for Dv <= 64 and team_shape<T, 128, narrow>
/// for Dv <= 128, narrow (blocks of 8 rows) where a K/V head has at most 8 query rows (decoding);
/// larger Dv one thread per row, block_q rows a team.
template <class ExecSpace>
struct AttentionTraits {
  static constexpr bool is_host = RowTraits<ExecSpace>::is_host;
  static constexpr index_t block_q = 32;
  static constexpr index_t block_k = is_host ? 64 : 32;
  /// Keys per split are at least this many when the keys are split automatically.
  static constexpr index_t min_split_keys = is_host ? 4096 : 1024;
  /// Work items (teams) wanted per unit of concurrency before keys are split.
  static constexpr index_t items_per_thread = 4;
  static_assert(!is_host || block_k % host::attention_pad == 0,
                "kflash: the host tile kernel needs block_k to be a multiple of host::attention_pad");
  /// Team shapes by value type and output width (TeamAttentionShape<T, BQ, BK, TM, TN, DV>): the
  /// tiles of one team fit the 40 KiB of level-0 scratch Kokkos gives a CUDA team at D = DV.
  template <class T, int DV, bool Narrow>
  using team_shape = std::conditional_t<
      sizeof(T) == 4,
      std::conditional_t<Narrow,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 8, 32, 1, 4, 64>,
                                            TeamAttentionShape<T, 8, 16, 1, 2, 128>>,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 32, 32, 4, 8, 64>,
                                            TeamAttentionShape<T, 32, 16, 4, 4, 128>>>,
      std::conditional_t<Narrow,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 8, 16, 1, 2, 64>,
                                            TeamAttentionShape<T, 8, 8, 1, 1, 128>>,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 16, 16, 2, 4, 64>,
                                            TeamAttentionShape<T, 16, 8, 2, 2, 128>>>>;
};

/// One team computes a block of query rows against one range of keys: on host spaces through the
/// compiled tile kernel, elsewhere (head dimensions beyond the team schedule's) one thread per row.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct AttentionKernel : AttentionKernelBase<QV, KV, VV, OV, LV, Partial> {
  using Base = AttentionKernelBase<QV, KV, VV, OV, LV, Partial>;
  using typename Base::T;
  using typename Base::Row;
  using Base::p;
  using Base::q;
  using Base::k;
  using Base::v;
  using Base::scale;
  using Base::row_of;
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using scratch_space = typename ExecSpace::scratch_memory_space;
  using Tile = Kokkos::View<T**, Kokkos::LayoutRight, scratch_space, Kokkos::MemoryUnmanaged>;
  using States = Kokkos::View<SoftmaxState<T>*, scratch_space, Kokkos::MemoryUnmanaged>;

  using Valid = Kokkos::View<index_t*, scratch_space, Kokkos::MemoryUnmanaged>;
  static constexpr bool is_host = AttentionTraits<ExecSpace>::is_host;

  static std::size_t scratch_bytes(const AttentionPlan& p) {
    if (is_host) {  // q, K transposed, V, scores, O (V and O padded), states, valid keys per row
      return Tile::shmem_size(p.bq, p.D) + Tile::shmem_size(p.D, p.bk) + Tile::shmem_size(p.bk, p.dvp) +
             Tile::shmem_size(p.bq, p.bk) + Tile::shmem_size(p.bq, p.dvp) + States::shmem_size(p.bq) +
             Valid::shmem_size(p.bq);
    }
    return Tile::shmem_size(p.bq, p.D) + Tile::shmem_size(p.bk, p.D) + Tile::shmem_size(p.bk, p.Dv) +
           Tile::shmem_size(p.bq, p.bk) + Tile::shmem_size(p.bq, p.Dv) + States::shmem_size(p.bq);
  }

  KOKKOS_INLINE_FUNCTION void store(const typename Base::Block& w, Row row, const T* o_row,
                                    const SoftmaxState<T>& st) const {
    const T inv_sum = SoftmaxNormalizer<T>(st).inv_sum;
    for (index_t d = 0; d < p.Dv; ++d) this->out(w, row, d) = o_row[d] * inv_sum;
    this->store_lse(w, row, st);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const typename Base::Block w = this->block_of(team.league_rank());
#if KFLASH_IMPL_ON_HOST
    if constexpr (is_host) {
      host_block(team, w);
      return;
    }
#endif
    generic_block(team, w);
  }

  /// Host: staging into scratch here, the tile arithmetic in the compiled tile kernel.
  void host_block(const member_type& team, const typename Base::Block& w) const {
    const index_t b = w.b, hk = w.hk, rho0 = w.rho0, nrows = w.nrows, kb = w.kb, ke = w.ke;
    const auto& scratch = team.team_scratch(this->scratch_level);
    Tile qs(scratch, p.bq, p.D), kt(scratch, p.D, p.bk), vs(scratch, p.bk, p.dvp);
    Tile ss(scratch, p.bq, p.bk), os(scratch, p.bq, p.dvp);
    States st(scratch, p.bq);
    Valid valid(scratch, p.bq);
    const index_t shift = p.Nk - p.Nq;
    for (index_t r = 0; r < nrows; ++r) {
      const Row row = row_of(hk, rho0 + r);
      for (index_t d = 0; d < p.D; ++d) qs(r, d) = q(b, row.h, row.i, d) * scale;
      for (index_t d = 0; d < p.dvp; ++d) os(r, d) = T(0);
      st(r) = SoftmaxState<T>::identity();
    }
    for (index_t j = 0; j < p.bk; ++j)
      for (index_t d = p.Dv; d < p.dvp; ++d) vs(j, d) = T(0);
    host::AttentionTile<T> tile{qs.data(), kt.data(), vs.data(), ss.data(), os.data(), st.data(), valid.data(),
                                nrows, 0, p.bk, p.D, p.dvp};
    tile.ldv = p.dvp;
    // Rows of K and V with unit stride are read in place (V when no padding is needed): K by dot
    // products for blocks of at most dot_rows query rows (decode), where staging K transposed would
    // cost more than the products; V always.
    const bool k_in_place = k.stride(3) == 1 && nrows <= host::dot_rows;
    const bool v_in_place = v.stride(3) == 1 && p.Dv == p.dvp;
    for (index_t t0 = kb; t0 < ke; t0 += p.bk) {
      tile.nk = ke - t0 < p.bk ? ke - t0 : p.bk;
      if (k_in_place) {
        tile.k = &k(b, hk, t0, 0);
        tile.ldk = index_t(k.stride(2));
      } else {
        for (index_t j = 0; j < tile.nk; ++j)
          for (index_t d = 0; d < p.D; ++d) kt(d, j) = k(b, hk, t0 + j, d);
      }
      if (v_in_place) {
        tile.v = &v(b, hk, t0, 0);
        tile.ldv = index_t(v.stride(2));
      } else {
        for (index_t j = 0; j < tile.nk; ++j)
          for (index_t d = 0; d < p.Dv; ++d) vs(j, d) = v(b, hk, t0 + j, d);
      }
      for (index_t r = 0; r < nrows; ++r) {
        const index_t seen = p.causal ? row_of(hk, rho0 + r).i + shift + 1 - t0 : tile.nk;  // keys row r sees
        valid(r) = seen < 0 ? 0 : (seen < tile.nk ? seen : tile.nk);
      }
      if (k_in_place && v_in_place) {  // the next tile's rows, asked for while this one is computed
        const index_t next_end = t0 + 2 * p.bk < ke ? t0 + 2 * p.bk : ke;
        for (index_t j = t0 + p.bk; j < next_end; ++j) {
          host::prefetch(&k(b, hk, j, 0), p.D * index_t(sizeof(T)));
          host::prefetch(&v(b, hk, j, 0), p.Dv * index_t(sizeof(T)));
        }
      }
      host::run(tile);
    }
    for (index_t r = 0; r < nrows; ++r) store(w, row_of(hk, rho0 + r), &os(r, 0), st(r));
  }

  /// Devices: one thread of the team per query row.
  KOKKOS_INLINE_FUNCTION void generic_block(const member_type& team, const typename Base::Block& w) const {
    const index_t b = w.b, hk = w.hk, rho0 = w.rho0, nrows = w.nrows, kb = w.kb, ke = w.ke;
    const index_t shift = p.Nk - p.Nq;
    const auto& scratch = team.team_scratch(this->scratch_level);
    Tile qs(scratch, p.bq, p.D), ks(scratch, p.bk, p.D), vs(scratch, p.bk, p.Dv);
    Tile ss(scratch, p.bq, p.bk), os(scratch, p.bq, p.Dv);
    States st(scratch, p.bq);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](index_t r) {
      const Row row = row_of(hk, rho0 + r);
      for (index_t d = 0; d < p.D; ++d) qs(r, d) = q(b, row.h, row.i, d) * scale;
      for (index_t d = 0; d < p.Dv; ++d) os(r, d) = T(0);
      st(r) = SoftmaxState<T>::identity();
    });

    for (index_t t0 = kb; t0 < ke; t0 += p.bk) {
      const index_t nk = ke - t0 < p.bk ? ke - t0 : p.bk;
      team.team_barrier();  // the previous tile is no longer read
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nk), [&](index_t j) {
        for (index_t d = 0; d < p.D; ++d) ks(j, d) = k(b, hk, t0 + j, d);
        for (index_t d = 0; d < p.Dv; ++d) vs(j, d) = v(b, hk, t0 + j, d);
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](index_t r) {
        const index_t last = p.causal ? row_of(hk, rho0 + r).i + shift : p.Nk - 1;  // last key row r sees
        for (index_t j = 0; j < nk; ++j) {
          T score = 0;
          for (index_t d = 0; d < p.D; ++d) score += qs(r, d) * ks(j, d);
          ss(r, j) = t0 + j <= last ? score : -infinity<T>();
        }
        // The tile's (m, l) and weights exp(s - m_tile), then the monoid merge into the row's
        // state; O merges with the same factors.
        // (one thread per row, vector length 1 on every backend: plain loops)
        const SoftmaxState<T> tile = serial_tile_state<T>(
            index_t(0), nk, [&](index_t j) { return ss(r, j); }, [&](index_t j, T w) { ss(r, j) = w; });
        SoftmaxState<T> row = st(r);
        T fa, fb;
        row.merge(tile, fa, fb);
        st(r) = row;
        for (index_t d = 0; d < p.Dv; ++d) os(r, d) *= fa;
        for (index_t j = 0; j < nk; ++j) {
          const T w = fb * ss(r, j);
          for (index_t d = 0; d < p.Dv; ++d) os(r, d) += w * vs(j, d);
        }
      });
    }

    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows),
                         [&](index_t r) { store(w, row_of(hk, rho0 + r), &os(r, 0), st(r)); });
  }
};

/// Merges S partial results over disjoint key sets: o(b, h, i, d) and lse(b, h, i) from
/// o_parts(s, b, h, i, d) and lse_parts(s, b, h, i), with the SoftmaxState merge. A work item is
/// `width` columns of one row (the whole row, or one column where few rows would leave the
/// machine idle: split-K/V decoding); each item merges its row's states itself.
template <class OP, class LP, class OV, class LV>
struct MergeKernel {
  using T = typename OV::non_const_value_type;
  OP o_parts;
  LP lse_parts;
  OV o;
  LV lse;
  bool has_lse;
  index_t S, H, N, Dv, width;

  KOKKOS_INLINE_FUNCTION void operator()(index_t item) const {
    const index_t blocks = Dv > 0 ? (Dv + width - 1) / width : 1;
    const index_t d0 = item % blocks * width;
    const index_t d1 = d0 + width < Dv ? d0 + width : Dv;
    const index_t row = item / blocks;
    const index_t i = row % N;
    const index_t h = (row / N) % H;
    const index_t b = row / (N * H);
    for (index_t d = d0; d < d1; ++d) o(b, h, i, d) = T(0);
    SoftmaxState<T> st = SoftmaxState<T>::identity();
    for (index_t s = 0; s < S; ++s) {
      // A part with log-sum-exp x holds (m, l) = (x, 1), whatever its own maximum was.
      T fa, fb;
      st.merge(SoftmaxState<T>::of(lse_parts(s, b, h, i)), fa, fb);
      for (index_t d = d0; d < d1; ++d) o(b, h, i, d) = o(b, h, i, d) * fa + fb * o_parts(s, b, h, i, d);
    }
    const T inv = SoftmaxNormalizer<T>(st).inv_sum;
    for (index_t d = d0; d < d1; ++d) o(b, h, i, d) *= inv;
    if (has_lse && d0 == 0) lse(b, h, i) = st.logsumexp();
  }
};

template <class ExecSpace, class OP, class LP, class OV, class LV>
void run_merge(const ExecSpace& exec, const OP& o_parts, const LP& lse_parts, const OV& o, const LV& lse,
               bool has_lse) {
  const index_t S = o_parts.extent(0), B = o.extent(0), H = o.extent(1), N = o.extent(2),
                Dv = o.extent(3);
  const index_t rows = B * H * N;
  if (rows == 0) return;
  // Whole rows per item while there are rows for every thread; else a column per item.
  const index_t width = rows >= index_t(exec.concurrency()) && Dv > 0 ? Dv : 1;
  const index_t items = rows * (Dv > 0 ? (Dv + width - 1) / width : 1);
  Kokkos::parallel_for("kflash::merge_attention", Kokkos::RangePolicy<ExecSpace>(exec, 0, items),
                       MergeKernel<OP, LP, OV, LV>{o_parts, lse_parts, o, lse, has_lse, S, H, N, Dv, width});
}

/// Splits the keys across teams where there are too few blocks to fill the machine (or as the
/// options force); p's block shape is set.
template <class ExecSpace>
AttentionPlan plan_splits(const ExecSpace& exec, AttentionPlan p, const AttentionOptions& opt) {
  using traits = AttentionTraits<ExecSpace>;
  p.group = p.Hq / p.Hk;
  p.nqb = (p.group * p.Nq + p.bq - 1) / p.bq;
  p.dvp = (p.Dv + host::attention_pad - 1) / host::attention_pad * host::attention_pad;
  const index_t items = p.B * p.Hk * p.nqb;
  const index_t threads = exec.concurrency() > 0 ? index_t(exec.concurrency()) : 1;
  const index_t teams_available = threads / p.team_size;
  const index_t wanted = traits::items_per_thread * (teams_available > 0 ? teams_available : 1);
  index_t splits = 1;
  if (opt.schedule == AttentionSchedule::split_kv && opt.num_splits > 0) {
    splits = opt.num_splits;
  } else if (opt.schedule != AttentionSchedule::prefill) {
    if (items < wanted && p.Nk >= 2 * traits::min_split_keys) {
      splits = (wanted + items - 1) / items;
      if (splits > p.Nk / traits::min_split_keys) splits = p.Nk / traits::min_split_keys;
    }
    if (opt.schedule == AttentionSchedule::split_kv && splits < 2) splits = 2;
  }
  if (splits > p.Nk) splits = p.Nk;
  if (splits < 1) splits = 1;
  p.split_len = p.Nk > 0 ? (p.Nk + splits - 1) / splits : 0;
  p.nsplits = p.Nk > 0 ? (p.Nk + p.split_len - 1) / p.split_len : 1;
  return p;
}

/// The block shape of a schedule: Shape = void for AttentionKernel, else a TeamAttentionShape.
template <class ExecSpace, class Shape>
AttentionPlan with_shape(AttentionPlan p) {
  if constexpr (std::is_void<Shape>::value) {
    using traits = AttentionTraits<ExecSpace>;
    p.bq = traits::block_q;
    p.bk = traits::block_k;
    p.team_size = traits::is_host ? 1 : traits::block_q;
  } else {
    p.bq = Shape::BQ;
    p.bk = Shape::BK;
    p.team_size = Shape::team_size;
  }
  return p;
}

/// Calls f with a value of the schedule's shape type for plan p (void* for AttentionKernel).
template <class T, class ExecSpace, class F>
void with_team_shape(const AttentionPlan& p, F&& f) {
  using traits = AttentionTraits<ExecSpace>;
  using S = void*;
  if (p.team_dv == 64 && p.team_narrow) f(typename traits::template team_shape<T, 64, true>());
  else if (p.team_dv == 64) f(typename traits::template team_shape<T, 64, false>());
  else if (p.team_dv == 128 && p.team_narrow) f(typename traits::template team_shape<T, 128, true>());
  else if (p.team_dv == 128) f(typename traits::template team_shape<T, 128, false>());
  else f(S());
}

/// The plan of a call: its schedule (p.team_dv: 0 for AttentionKernel, 64 or 128 for the team
/// shapes of AttentionTraits, p.team_narrow for their 8-row blocks), block shape and key splits.
template <class T, class ExecSpace>
AttentionPlan plan_attention(const ExecSpace& exec, AttentionPlan p, const AttentionOptions& opt) {
  using traits = AttentionTraits<ExecSpace>;
  p.team_dv = traits::is_host ? 0 : p.Dv <= 64 ? 64 : p.Dv <= 128 ? 128 : 0;
  p.team_narrow = (p.Hq / p.Hk) * p.Nq <= 8;
  with_team_shape<T, ExecSpace>(p, [&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    p = with_shape<ExecSpace, Shape>(p);
  });
  return plan_splits(exec, p, opt);
}

/// Runs a planned call with the kernel of Shape (void: AttentionKernel).
template <class Shape, class ExecSpace, class QV, class KV, class VV, class OV, class LV>
void run_attention(const ExecSpace& exec, const AttentionPlan& p, typename OV::non_const_value_type scale,
                   const QV& q, const KV& k, const VV& v, const OV& o, const LV& lse, bool has_lse) {
  using T = typename OV::non_const_value_type;
  const std::size_t league = std::size_t(p.B * p.Hk * p.nqb * p.nsplits);
  auto launch = [&](const char* label, auto kernel) {
    using Kernel = decltype(kernel);
    const std::size_t bytes = Kernel::scratch_bytes(p);
    kernel.scratch_level = bytes <= std::size_t(Kokkos::TeamPolicy<ExecSpace>::scratch_size_max(0)) ? 0 : 1;
    Kokkos::parallel_for(label,
                         Kokkos::TeamPolicy<ExecSpace>(exec, int(league), int(p.team_size), 1)
                             .set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes)),
                         kernel);
  };
  auto make = [&](auto o_view, auto lse_view, bool with_lse, auto partial) {
    constexpr bool Partial = decltype(partial)::value;
    using O = decltype(o_view);
    using L = decltype(lse_view);
    using Kernel = std::conditional_t<std::is_void<Shape>::value, AttentionKernel<ExecSpace, QV, KV, VV, O, L, Partial>,
                                      TeamAttentionKernel<ExecSpace, Shape, QV, KV, VV, O, L, Partial>>;
    return Kernel{{q, k, v, o_view, lse_view, with_lse, p, scale, 0}};
  };
  if (p.nsplits == 1) {
    launch("kflash::attention", make(o, lse, has_lse, std::false_type()));
    return;
  }
  // Split K/V: partial results of each key range, then the exact merge.
  using mem = typename OV::memory_space;
  using Parts = Kokkos::View<T*****, Kokkos::LayoutRight, mem, Kokkos::MemoryUnmanaged>;
  using PartsLse = Kokkos::View<T****, Kokkos::LayoutRight, mem, Kokkos::MemoryUnmanaged>;
  using Scratch = CachedWorkspace<mem>;
  const std::size_t lse_count = std::size_t(p.nsplits * p.B * p.Hq * p.Nq);
  const std::size_t o_offset = Scratch::aligned(sizeof(T) * lse_count);
  const Scratch scratch(exec, o_offset + sizeof(T) * lse_count * std::size_t(p.Dv), "kflash::attention parts");
  const Parts o_parts(scratch.template at<T>(o_offset), p.nsplits, p.B, p.Hq, p.Nq, p.Dv);
  const PartsLse lse_parts(scratch.template at<T>(0), p.nsplits, p.B, p.Hq, p.Nq);
  launch("kflash::attention split_kv", make(o_parts, lse_parts, true, std::true_type()));
  run_merge(exec, o_parts, lse_parts, o, lse, has_lse);
  exec.fence();  // the workspace must outlive the kernels
}

/// Checks attention()'s arguments and returns the call's shapes (p.B ... p.Dv, p.causal); throws
/// std::invalid_argument naming the argument and the extents.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
AttentionPlan attention_args(const QV& q, const KV& k, const VV& v, const OV& o, const AttentionOptions& opt,
                             const LV& lse, bool has_lse) {
  const char* fn = "attention";
  static_check_view<ExecSpace, QV, false>();
  static_check_view<ExecSpace, KV, false>();
  static_check_view<ExecSpace, VV, false>();
  static_check_view<ExecSpace, OV, true>();
  static_check_view<ExecSpace, LV, true>();
  using T = typename OV::non_const_value_type;
  static_assert(std::is_same<std::remove_cv_t<typename QV::value_type>, T>::value &&
                    std::is_same<std::remove_cv_t<typename KV::value_type>, T>::value &&
                    std::is_same<std::remove_cv_t<typename VV::value_type>, T>::value &&
                    std::is_same<typename LV::non_const_value_type, T>::value,
                "kflash::attention: q, k, v, o and lse must have the same value type");
  static_assert(view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                    view_rank<LV> == 3,
                "kflash::attention: q, k, v, o must be rank-4 Views and lse a rank-3 View");
  auto fail = [&](const std::string& what) { throw_invalid_argument(fn, what); };
  const std::string shapes = " (" + describe("q", q) + ", " + describe("k", k) + ", " + describe("v", v) + ")";
  AttentionPlan p;
  p.B = q.extent(0), p.Hq = q.extent(1), p.Nq = q.extent(2), p.D = q.extent(3);
  p.Hk = k.extent(1), p.Nk = k.extent(2), p.Dv = v.extent(3);
  p.causal = opt.causal;
  if (index_t(k.extent(0)) != p.B || index_t(v.extent(0)) != p.B)
    fail("q, k and v must have the same batch extent B" + shapes);
  if (index_t(v.extent(1)) != p.Hk) fail("k and v must have the same number of heads Hk" + shapes);
  if (p.Hk == 0 || p.Hq % p.Hk != 0) fail("the query heads Hq must be a multiple of the key/value heads Hk" + shapes);
  if (index_t(k.extent(3)) != p.D) fail("q and k must have the same head dimension D" + shapes);
  if (index_t(v.extent(2)) != p.Nk) fail("k and v must have the same number of keys Nk" + shapes);
  if (p.D < 1 || p.Dv < 1) fail("head dimensions D and Dv must be at least 1" + shapes);
  if (index_t(o.extent(0)) != p.B || index_t(o.extent(1)) != p.Hq || index_t(o.extent(2)) != p.Nq ||
      index_t(o.extent(3)) != p.Dv)
    fail("argument '" + describe("o", o) + "' must have extents (B, Hq, Nq, Dv)" + shapes);
  if (has_lse &&
      (index_t(lse.extent(0)) != p.B || index_t(lse.extent(1)) != p.Hq || index_t(lse.extent(2)) != p.Nq))
    fail("argument '" + describe("lse", lse) + "' must have extents (B, Hq, Nq)" + shapes);
  if (!std::isfinite(opt.scale)) fail("options.scale must be finite, got " + std::to_string(opt.scale));
  if (opt.num_splits < 0) fail("options.num_splits must be >= 0, got " + std::to_string(opt.num_splits));
  return p;
}

template <class T>
T attention_scale(const AttentionOptions& opt, index_t D) {
  return static_cast<T>(opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(D)));
}

template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
void attention_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                    const AttentionOptions& opt, const LV& lse, bool has_lse) {
  using T = typename OV::non_const_value_type;
  require_rank("attention", "q", q, 4, 4);
  require_rank("attention", "k", k, 4, 4);
  require_rank("attention", "v", v, 4, 4);
  require_rank("attention", "o", o, 4, 4);
  if (has_lse) require_rank("attention", "lse", lse, 3, 3);
  if constexpr (view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                view_rank<LV> == 3) {
    AttentionPlan p = attention_args<ExecSpace>(q, k, v, o, opt, lse, has_lse);
    if (p.B * p.Hq * p.Nq == 0) return;
    p = plan_attention<T>(exec, p, opt);
    const T scale = attention_scale<T>(opt, p.D);
    with_team_shape<T, ExecSpace>(p, [&](auto shape) {
      using Shape = std::remove_pointer_t<decltype(shape)>;
      run_attention<Shape>(exec, p, scale, q, k, v, o, lse, has_lse);
    });
  }
}

/// attention() through the team schedule of the given TeamAttentionShape on any execution space,
/// whatever the traits choose: the tests run the device schedule on host teams with it.
template <class Shape, class ExecSpace, class QV, class KV, class VV, class OV, class LV>
void attention_with_shape(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                          const AttentionOptions& opt, const LV& lse) {
  using T = typename OV::non_const_value_type;
  AttentionPlan p = attention_args<ExecSpace>(q, k, v, o, opt, lse, true);
  if (p.Dv > Shape::DV)
    throw_invalid_argument("attention", "Dv = " + std::to_string(p.Dv) + " exceeds the team shape's " +
                                            std::to_string(Shape::DV));
  if (p.B * p.Hq * p.Nq == 0) return;
  p = plan_splits(exec, with_shape<ExecSpace, Shape>(p), opt);
  run_attention<Shape>(exec, p, attention_scale<T>(opt, p.D), q, k, v, o, lse, true);
}

}  // namespace impl

/// o = softmax(scale * q k^T) v per batch and query head, computed tile by tile with the online
/// (m, l, O) recurrence: the Nq x Nk score matrix never exists.
///   q (B, Hq, Nq, D), k (B, Hk, Nk, D), v (B, Hk, Nk, Dv), o (B, Hq, Nq, Dv); Hq a multiple of Hk
///   (query head h reads K/V head h / (Hq / Hk): GQA, MQA for Hk = 1). Views of any layout: memory
///   held as (B, N, H, D) is passed as LayoutStride Views. lse (B, Hq, Nq) receives the log-sum-exp
///   of each row's scaled scores. Bad shapes throw std::invalid_argument.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options, const LV& lse) {
  impl::attention_impl(exec, q, k, v, o, options, lse, true);
}

template <class ExecSpace, class QV, class KV, class VV, class OV,
          std::enable_if_t<Kokkos::is_execution_space<ExecSpace>::value, int> = 0>
void attention(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options = AttentionOptions()) {
  using T = typename OV::non_const_value_type;
  impl::attention_impl(exec, q, k, v, o, options, Kokkos::View<T***, typename OV::memory_space>(), false);
}

/// Combines attention results over disjoint key sets exactly (split-K/V decoding, KV-cache chunks,
/// ring attention): o_parts (S, B, H, N, Dv) and lse_parts (S, B, H, N), each part normalised over
/// its own keys, give o (B, H, N, Dv) and lse (B, H, N) over all keys. A part with lse = -inf (it
/// saw no key) contributes nothing. o must not alias o_parts.
template <class ExecSpace, class OP, class LP, class OV, class LV>
void merge_attention(const ExecSpace& exec, const OP& o_parts, const LP& lse_parts, const OV& o,
                     const LV& lse) {
  using namespace impl;
  const char* fn = "merge_attention";
  static_check_view<ExecSpace, OP, false>();
  static_check_view<ExecSpace, LP, false>();
  static_check_view<ExecSpace, OV, true>();
  static_check_view<ExecSpace, LV, true>();
  require_rank(fn, "o_parts", o_parts, 5, 5);
  require_rank(fn, "lse_parts", lse_parts, 4, 4);
  require_rank(fn, "o", o, 4, 4);
  require_rank(fn, "lse", lse, 3, 3);
  if constexpr (view_rank<OP> == 5 && view_rank<LP> == 4 && view_rank<OV> == 4 && view_rank<LV> == 3) {
    bool ok = lse_parts.extent(0) == o_parts.extent(0);
    for (int i = 0; i < 4; ++i) ok = ok && o.extent(i) == o_parts.extent(i + 1);
    for (int i = 0; i < 3; ++i) ok = ok && lse.extent(i) == o.extent(i) && lse_parts.extent(i + 1) == o.extent(i);
    if (!ok) {
      throw_invalid_argument(fn, "expected o_parts (S, B, H, N, Dv), lse_parts (S, B, H, N), o (B, H, N, Dv), "
                                 "lse (B, H, N); got " + describe("o_parts", o_parts) + ", " +
                                     describe("lse_parts", lse_parts) + ", " + describe("o", o) + ", " +
                                     describe("lse", lse));
    }
    run_merge(exec, o_parts, lse_parts, o, lse, true);
  }
}

/// The same, on the default execution space of o's View.
template <class QV, class KV, class VV, class OV,
          std::enable_if_t<Kokkos::is_view<QV>::value, int> = 0>
void attention(const QV& q, const KV& k, const VV& v, const OV& o,
               const AttentionOptions& options = AttentionOptions()) {
  attention(typename OV::execution_space(), q, k, v, o, options);
}
template <class QV, class KV, class VV, class OV, class LV,
          std::enable_if_t<Kokkos::is_view<QV>::value, int> = 0>
void attention(const QV& q, const KV& k, const VV& v, const OV& o, const AttentionOptions& options,
               const LV& lse) {
  attention(typename OV::execution_space(), q, k, v, o, options, lse);
}
template <class OP, class LP, class OV, class LV>
void merge_attention(const OP& o_parts, const LP& lse_parts, const OV& o, const LV& lse) {
  merge_attention(typename OV::execution_space(), o_parts, lse_parts, o, lse);
}

}  // namespace kflash
