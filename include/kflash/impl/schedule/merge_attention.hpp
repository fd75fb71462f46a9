// merge_attention's schedule: partial attention results over disjoint key sets merge exactly
// through the monoid. The row's state over its parts comes first; each part's output then weighs
// its probability under that state, so the sum over parts is one pass of independent loads.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/math.hpp>
#include <kflash/impl/schedule/sequences.hpp>
#include <kflash/impl/traits.hpp>

namespace kflash::impl {

/// How run_merge lays out its teams: a team per `width` columns of a row, team_size = lanes * groups
/// threads, of which `lanes` take columns (lane, lane + lanes, ...) and `groups` take the parts
/// (group, group + groups, ...) of each chunk of `chunk` parts.
struct MergePlan {
  index_t width = 0, blocks = 1, chunk = 1;
  int team_size = 1, lanes = 1, groups = 1;
};

/// Merges S partial results over disjoint key sets: o(b, h, i, d) and lse(b, h, i) from
/// o_parts(s, b, h, i, d) and lse_parts(s, b, h, i). A part with log-sum-exp x holds the state
/// (m, l) = (x, 1), whatever its own maximum was; the row's state st merges them, and
///   o = sum_s SoftmaxNormalizer(st).prob(x_s) * o_s,   lse = st.logsumexp(),
/// so the contract's rows hold: no visible key gives 0 and -inf, a NaN or +inf part gives NaN.
/// The sum over parts is deterministic: each group sums its parts in order, then the groups' sums
/// are added in order. Rows past their sequence's length (seq.nq(b), varlen) are left alone.
template <class ExecSpace, class OP, class LP, class OV, class LV, class Seq>
struct MergeKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Stored = typename OV::non_const_value_type;  // o's values
  using T = arith_t<Stored>;                         // the sums' (float for 16-bit o)
  using Scratch = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  OP o_parts;
  LP lse_parts;
  OV o;
  LV lse;
  bool has_lse;
  index_t S, H, N, Dv;
  MergePlan plan;
  Seq seq;

  /// Scratch of a team: the weights of one chunk, then each group's sums of its columns.
  static std::size_t scratch_bytes(const MergePlan& p) {
    return Scratch::shmem_size(p.chunk) + Scratch::shmem_size(index_t(p.groups) * p.width);
  }

  /// One group (few parts, or one thread a team): thread `rank` merges its columns rank, rank +
  /// team_size, ... itself, part after part, with no reduction across the team and no barrier.
  KOKKOS_INLINE_FUNCTION void by_columns(int rank, index_t b, index_t h, index_t i, index_t d0, index_t cols) const {
    SoftmaxState<T> st = SoftmaxState<T>::identity();
    for (index_t s = 0; s < S; ++s) st.push(lse_parts(s, b, h, i));
    const SoftmaxNormalizer<T> norm(st);
    if constexpr (std::is_same<Stored, T>::value) {  // o sums in place: each part's weight computed once
      for (index_t c = rank; c < cols; c += plan.team_size) o(b, h, i, d0 + c) = T(0);
      for (index_t s = 0; s < S; ++s) {
        const T w = norm.prob(lse_parts(s, b, h, i));
        for (index_t c = rank; c < cols; c += plan.team_size)
          o(b, h, i, d0 + c) += w * widen(o_parts(s, b, h, i, d0 + c));
      }
    } else {  // a 16-bit o is written once: each column sums in a register
      for (index_t c = rank; c < cols; c += plan.team_size) {
        T acc = T(0);
        for (index_t s = 0; s < S; ++s) acc += norm.prob(lse_parts(s, b, h, i)) * widen(o_parts(s, b, h, i, d0 + c));
        o(b, h, i, d0 + c) = store_as<Stored>(acc);
      }
    }
    if (has_lse && d0 == 0 && rank == 0) lse(b, h, i) = st.logsumexp();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const index_t item = team.league_rank();
    const index_t d0 = item % plan.blocks * plan.width;
    const index_t cols = d0 + plan.width < Dv ? plan.width : Dv - d0;
    const index_t row = item / plan.blocks;
    const index_t i = row % N;
    const index_t h = (row / N) % H;
    const index_t b = row / (N * H);
    if (i >= seq.nq(b)) return;  // the same for the whole team: no barrier is skipped by part of it
    if (plan.groups == 1) return by_columns(team.team_rank(), b, h, i, d0, cols);

    SoftmaxState<T> st;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, S), [&](index_t s, SoftmaxState<T>& acc) { acc.push(lse_parts(s, b, h, i)); },
        OnlineSoftmax<T, Kokkos::AnonymousSpace>(st));
    const SoftmaxNormalizer<T> norm(st);

    const Scratch w(team.team_scratch(0), plan.chunk);
    const Scratch sums(team.team_scratch(0), index_t(plan.groups) * plan.width);
    const int rank = team.team_rank();
    const int lane = rank % plan.lanes, group = rank / plan.lanes;
    for (index_t c = lane; c < cols; c += plan.lanes) sums(group * plan.width + c) = T(0);
    for (index_t s0 = 0; s0 < S; s0 += plan.chunk) {
      const index_t n = s0 + plan.chunk < S ? plan.chunk : S - s0;
      team.team_barrier();  // the last chunk's weights are read
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                           [&](index_t k) { w(k) = norm.prob(lse_parts(s0 + k, b, h, i)); });
      team.team_barrier();
      for (index_t c = lane; c < cols; c += plan.lanes) {
        T acc = T(0);
        for (index_t k = group; k < n; k += plan.groups) acc += w(k) * widen(o_parts(s0 + k, b, h, i, d0 + c));
        sums(group * plan.width + c) += acc;
      }
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](index_t c) {
      T sum = sums(c);
      for (int g = 1; g < plan.groups; ++g) sum += sums(g * plan.width + c);
      o(b, h, i, d0 + c) = store_as<Stored>(sum);
    });
    if (has_lse && d0 == 0) Kokkos::single(Kokkos::PerTeam(team), [&]() { lse(b, h, i) = st.logsumexp(); });
  }
};

/// The teams of a merge of S parts into rows of Dv columns under Traits: whole rows per team while
/// there are enough teams for every thread (columns split, down to Traits::merge_min_columns,
/// where there are not).
template <class Traits>
MergePlan plan_merge(index_t rows, index_t S, index_t Dv, index_t concurrency) {
  MergePlan p;
  p.team_size = Traits::merge_team_size;
  p.width = Dv < Traits::merge_columns ? Dv : Traits::merge_columns;
  const auto blocks = [&](index_t width) { return width > 0 ? (Dv + width - 1) / width : 1; };
  while (p.width > Traits::merge_min_columns && rows * blocks(p.width) * p.team_size < concurrency) {
    const index_t half = (p.width + 1) / 2;
    p.width = half < Traits::merge_min_columns ? Traits::merge_min_columns : half;
  }
  p.blocks = blocks(p.width);
  p.lanes = p.width > 0 && p.width < p.team_size ? int(p.width) : p.team_size;
  // No more groups than parts, and one (no reduction across the team, no barrier) for at most
  // Traits::merge_serial_parts parts: a split prefill merges a few parts into many rows, where a
  // team's reductions and barriers would cost more than its loads.
  p.groups = p.team_size / p.lanes;
  if (S <= Traits::merge_serial_parts) p.groups = 1;
  else if (S < p.groups) p.groups = int(S);
  p.team_size = p.lanes * p.groups;
  p.chunk = S < Traits::merge_chunk ? (S > 0 ? S : 1) : Traits::merge_chunk;
  return p;
}

template <class ExecSpace, class OP, class LP, class OV, class LV, class Mem = typename ExecSpace::memory_space>
void run_merge(const ExecSpace& exec, const OP& o_parts, const LP& lse_parts, const OV& o, const LV& lse,
               bool has_lse, Sequences<Mem> seq = {}) {
  const index_t S = o_parts.extent(0), B = o.extent(0), H = o.extent(1), N = o.extent(2),
                Dv = o.extent(3);
  const index_t rows = B * H * N;
  if (rows == 0) return;
  if (!seq.ragged()) seq.Nq = N;
  using Kernel = MergeKernel<ExecSpace, OP, LP, OV, LV, Sequences<Mem>>;
  const MergePlan plan = plan_merge<ScheduleTraits<ExecSpace>>(rows, S, Dv, index_t(exec.concurrency()));
  Kokkos::parallel_for("kflash::merge_attention",
                       Kokkos::TeamPolicy<ExecSpace>(exec, int(rows * plan.blocks), plan.team_size, 1)
                           .set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes(plan))),
                       Kernel{o_parts, lse_parts, o, lse, has_lse, S, H, N, Dv, plan, seq});
}

}  // namespace kflash::impl
