// Row schedules for devices (softmax, log_softmax, logsumexp), reading a row that fits a team
// from memory once and writing it once:
//  - lanes: a short row per team thread, over the thread's vector lanes (a warp on CUDA), several
//    rows per team; the row is staged in the thread's scratch between the passes;
//  - team:  a row per team of threads (vector length 1), each thread holding Regs elements of the
//    row in registers: 16-byte chunks rank, rank + team_size, ... where the rows lie on chunk
//    boundaries, else the elements rank, rank + team_size, ...; rows longer than a team holds are
//    split into chunks of such teams, and read twice.
// Both reduce with the monoid: lanes by vector reductions, threads by the team reduction.
#pragma once

#include <kflash/impl/schedule/row_kernel.hpp>
#include <kflash/impl/workspace.hpp>

#include <string>

namespace kflash::impl {

/// The write of one element of a row whose state gave `n`: `w` is the element's weight
/// exp(x - max) for softmax, the element x itself for log_softmax.
template <RowOp Op, class T>
KOKKOS_INLINE_FUNCTION T row_output(const SoftmaxNormalizer<T>& n, T w_or_x) {
  if constexpr (Op == RowOp::softmax) {
    return n.prob_of_weight(w_or_x);
  } else {
    return n.log_prob(w_or_x);
  }
}

/// A short row per team thread: thread t of team g takes row g * team_size + t.
template <class ExecSpace, class XRows, class YRows, RowOp Op>
struct LaneRowKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = std::remove_cv_t<typename decltype(XRows::v)::value_type>;
  using Buffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

  XRows x;
  YRows y;
  index_t rows, cols;

  static std::size_t thread_scratch_bytes(index_t cols) { return Buffer::shmem_size(cols); }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const index_t r = index_t(team.league_rank()) * team.team_size() + team.team_rank();
    if (r >= rows) return;  // only vector-level collectives below: no team barrier to miss
    const Buffer buf(team.thread_scratch(0), cols);
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols), [&](index_t i) { buf(i) = x(r, i); });
    // Each lane reads back the elements it staged (the same lanes take the same indices); softmax
    // keeps the weights in their place.
    auto staged = [&](index_t i) { return buf(i); };
    const VectorRangeLanes<T, member_type> lanes(team);
    const SoftmaxState<T> state =
        Op == RowOp::softmax ? lanes.tile_state(0, cols, staged, [&](index_t i, T w) { buf(i) = w; })
                             : lanes.tile_state(0, cols, staged, NoStore<T>{});
    if constexpr (Op == RowOp::logsumexp) {
      Kokkos::single(Kokkos::PerThread(team), [&]() { y(r, 0) = state.logsumexp(); });
    } else {
      const SoftmaxNormalizer<T> n(state, Op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols),
                           [&](index_t i) { y(r, i) = row_output<Op>(n, buf(i)); });
    }
  }
};

/// A row (or a chunk of one) per team, Regs elements of it in each thread's registers (index_of);
/// the team reduction merges the threads' maxima, then their sums of weights (logsumexp: their
/// states, in one reduction). Phases as RowPhase:
/// whole rows; the state of each chunk into ws(r, c); the merge of a row's chunk states, then the
/// chunk's outputs (x read again). Chunked: the rows of x, and of y where this kernel writes rows,
/// start on 16-byte boundaries, as does every chunk of a split row (run_team_rows); each thread
/// then reads and writes its elements by 16-byte accesses, a warp's access being 512 contiguous
/// bytes. (A template parameter: one kernel holding both access paths needs more registers.)
template <class ExecSpace, class XRows, class YRows, RowOp Op, int Regs, bool Chunked>
struct TeamRowKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = std::remove_cv_t<typename decltype(XRows::v)::value_type>;
  using Workspace = Kokkos::View<SoftmaxState<T>**, typename ExecSpace::memory_space, Kokkos::MemoryUnmanaged>;
  static constexpr int W = Chunk<T>::n;
  static_assert(Regs % W == 0, "kflash: a thread's registers hold whole 16-byte chunks");

  XRows x;
  YRows y;
  Workspace ws;
  RowPlan plan;
  RowPhase phase;
  index_t items_per_row;  // teams per row in this phase: 1 or plan.chunks

  /// The index, in the row's chunk, of the element register k of thread `rank` holds: chunks
  /// rank, rank + size, ... of W elements where Chunked, else elements rank, rank + size, ....
  /// Increasing in k.
  KOKKOS_INLINE_FUNCTION static index_t index_of(int k, index_t rank, index_t size) {
    return Chunked ? (rank + k / W * size) * W + k % W : rank + k * size;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const index_t item = team.league_rank();
    const index_t r = item / items_per_row, c = item % items_per_row;
    const index_t begin = c * plan.chunk_len;
    const index_t n = (begin + plan.chunk_len < plan.cols ? begin + plan.chunk_len : plan.cols) - begin;
    const index_t rank = team.team_rank(), size = team.team_size();
    T v[Regs];
    if constexpr (Chunked) {
      const T* const row = &x(r, begin);
      KFLASH_IMPL_UNROLL for (int q = 0; q < Regs / W; ++q) {
        const index_t i0 = (rank + q * size) * W;
        Chunk<T> chunk;
        if (i0 + W <= n) {
          chunk = load_chunk(row + i0);
        } else {
          KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) chunk.x[e] = i0 + e < n ? row[i0 + e] : -infinity<T>();
        }
        KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) v[q * W + e] = chunk.x[e];
      }
    } else {
      for (int k = 0; k < Regs; ++k) {
        const index_t i = rank + k * size;
        v[k] = i < n ? x(r, begin + i) : -infinity<T>();
      }
    }
    SoftmaxState<T> state;
    if (phase == RowPhase::finish) {
      state = ws(r, plan.chunks);  // the row's state, merged from its chunks' by RowStateMerge
    } else if constexpr (Op == RowOp::logsumexp) {
      // Only the state is wanted: each thread's own, then one merge across the team (the monoid),
      // so that the elements are no longer held during the team's reduction (held there, they
      // spilled under Kokkos 4.6's 1024-thread launch).
      T m = -infinity<T>();
      KFLASH_IMPL_UNROLL for (int k = 0; k < Regs; ++k) m = v[k] > m ? v[k] : m;
      SoftmaxState<T> sum = SoftmaxState<T>::identity();
      KFLASH_IMPL_UNROLL for (int k = 0; k < Regs; ++k)
        if (index_of(k, rank, size) < n) sum.add_term(SoftmaxState<T>::weight(v[k], m));
      state = SoftmaxState<T>::of_weights(m, sum);
      team.team_reduce(OnlineSoftmax<T, Kokkos::AnonymousSpace>(state));
    } else {
      // The tile recurrence over the team: the maximum, then the weights against it, each reduced
      // across the team's threads (sums merged compensated).
      T m = -infinity<T>();
      for (int k = 0; k < Regs; ++k) m = v[k] > m ? v[k] : m;
      team.team_reduce(MaxOf<T>(m));
      SoftmaxState<T> sum = SoftmaxState<T>::identity();
      // Unrolled, the registers past the row's end predicated off: v stays in registers.
      KFLASH_IMPL_UNROLL for (int k = 0; k < Regs; ++k) {
        const T w = SoftmaxState<T>::weight(v[k], m);
        if constexpr (Op == RowOp::softmax) v[k] = w;
        if (index_of(k, rank, size) < n) sum.add_term(w);
      }
      team.team_reduce(OnlineSoftmax<T, Kokkos::AnonymousSpace>(sum));
      state = SoftmaxState<T>::of_weights(m, sum);
    }
    if (phase == RowPhase::partial) {
      if (rank == 0) ws(r, c) = state;
    } else if constexpr (Op == RowOp::logsumexp) {
      if (rank == 0) y(r, 0) = state.logsumexp();
    } else {
      const SoftmaxNormalizer<T> norm(state, Op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
      KFLASH_IMPL_UNROLL for (int k = 0; k < Regs; ++k)
        v[k] = Op == RowOp::softmax && phase == RowPhase::finish ? norm.prob(v[k]) : row_output<Op>(norm, v[k]);
      if constexpr (Chunked) {
        T* const row = &y(r, begin);
        KFLASH_IMPL_UNROLL for (int q = 0; q < Regs / W; ++q) {
          const index_t i0 = (rank + q * size) * W;
          Chunk<T> chunk;
          KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) chunk.x[e] = v[q * W + e];
          if (i0 + W <= n) {
            store_chunk(row + i0, chunk);
          } else {
            KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) if (i0 + e < n) row[i0 + e] = chunk.x[e];
          }
        }
      } else {
        for (int k = 0; k < Regs; ++k) {
          const index_t i = rank + k * size;
          if (i >= n) break;
          y(r, begin + i) = v[k];
        }
      }
    }
  }
};

/// Between the partial and finish phases of split rows: ws(r, chunks) = the merge of row r's chunk
/// states ws(r, 0 .. chunks - 1), over a team's threads and lanes.
template <class ExecSpace, class Workspace>
struct RowStateMerge {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = typename Workspace::value_type::value_type;
  Workspace ws;
  index_t chunks;

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const index_t r = team.league_rank();
    SoftmaxState<T> s;
    Kokkos::parallel_reduce(
        Kokkos::TeamVectorRange(team, chunks), [&](index_t j, SoftmaxState<T>& acc) { acc.merge(ws(r, j)); },
        OnlineSoftmax<T, Kokkos::AnonymousSpace>(s));
    Kokkos::single(Kokkos::PerTeam(team), [&]() { ws(r, chunks) = s; });
  }
};

/// Which device row schedule a call of rows x cols takes, and its team shape.
struct TeamRowPlan {
  enum Tier { none, lanes, team } tier = none;
  int team_size = 1;
  int vector_length = 1;
};

/// The tier for rows (or chunks) of `cols` elements: lanes up to Traits::lane_cols where allowed
/// (whole rows), else a team per row while Regs registers per thread of at most max_team_size
/// threads hold the row.
template <class Traits, int Regs>
TeamRowPlan plan_team_rows(index_t cols, int max_team_size, bool lanes_allowed) {
  TeamRowPlan p;
  if (lanes_allowed && cols <= Traits::lane_cols) {
    p.tier = TeamRowPlan::lanes;
    p.team_size = Traits::lane_team_size;
    p.vector_length = Traits::vector_length;
    return p;
  }
  const index_t threads = (cols + Regs - 1) / Regs;
  if (threads > max_team_size) return p;
  // At least min_team_size threads, a multiple of team_multiple (whole warps), at most max_team_size.
  index_t size = threads < Traits::min_team_size ? Traits::min_team_size : threads;
  size = (size + Traits::team_multiple - 1) / Traits::team_multiple * Traits::team_multiple;
  if (size > max_team_size) size = max_team_size;
  p.tier = TeamRowPlan::team;
  p.team_size = int(size);
  return p;
}

/// run_team_rows with the team tier's access path fixed (TeamRowKernel's Chunked).
template <RowOp Op, class Traits, int Regs, bool Chunked, class ExecSpace, class XRows, class YRows>
bool run_team_rows_by(const ExecSpace& exec, const XRows& x, const YRows& y, const RowPlan& plan,
                      const std::string& label) {
  using T = std::remove_cv_t<typename decltype(XRows::v)::value_type>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  // Teams of more threads than the compiler's register use allows are launched with bounds that
  // make it fit Traits::max_team_size<T> threads: only where a row needs them, and only by chunks
  // (the element path under those bounds spills; its rows take the portable row kernel instead).
  using BoundedPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::LaunchBounds<Traits::template max_team_size<T>, 1>>;
  using Team = TeamRowKernel<ExecSpace, XRows, YRows, Op, Regs, Chunked>;
  const index_t rows = plan.rows, cols = plan.cols;
  const auto team_of = [&](const typename Team::Workspace& ws, RowPhase phase, index_t per_row) {
    return Team{x, y, ws, plan, phase, per_row};
  };
  const Team probe = team_of({}, RowPhase::whole, 1);
  const int free_size = Policy(exec, 1, 1, 1).team_size_max(probe, Kokkos::ParallelForTag());
  TeamRowPlan p = plan_team_rows<Traits, Regs>(plan.chunk_len, free_size, plan.chunks == 1);
  const bool bounded = Chunked && p.tier == TeamRowPlan::none;
  if constexpr (Chunked) {
    const int bounded_size = BoundedPolicy(exec, 1, 1, 1).team_size_max(probe, Kokkos::ParallelForTag());
    if (bounded) p = plan_team_rows<Traits, Regs>(plan.chunk_len, bounded_size, false);
  }
  if (p.tier == TeamRowPlan::lanes) {
    using Lanes = LaneRowKernel<ExecSpace, XRows, YRows, Op>;
    const index_t league = (rows + p.team_size - 1) / p.team_size;
    Kokkos::parallel_for(label, Policy(exec, int(league), p.team_size, p.vector_length)
                                    .set_scratch_size(0, Kokkos::PerThread(Lanes::thread_scratch_bytes(cols))),
                         Lanes{x, y, rows, cols});
    return true;
  }
  if (p.tier == TeamRowPlan::none) return false;
  auto launch = [&](const std::string& name, index_t league, const Team& kernel) {
    if constexpr (Chunked) {
      if (bounded) return Kokkos::parallel_for(name, BoundedPolicy(exec, int(league), p.team_size, 1), kernel);
    }
    Kokkos::parallel_for(name, Policy(exec, int(league), p.team_size, 1), kernel);
  };
  if (plan.chunks == 1) {
    launch(label, rows, team_of({}, RowPhase::whole, 1));
    return true;
  }
  // Several teams per row: chunk states into a workspace, then merge them and write. logsumexp
  // writes one value per row, so its finish phase has one item per row.
  using memory_space = typename ExecSpace::memory_space;
  const CachedWorkspace<memory_space> scratch(
      exec, sizeof(SoftmaxState<T>) * std::size_t(rows * (plan.chunks + 1)), label + " workspace");
  const typename Team::Workspace ws(scratch.template at<SoftmaxState<T>>(0), rows, plan.chunks + 1);
  launch(label + " partial", rows * plan.chunks, team_of(ws, RowPhase::partial, plan.chunks));
  Kokkos::parallel_for(label + " merge", Policy(exec, int(rows), Kokkos::AUTO, Traits::vector_length),
                       RowStateMerge<ExecSpace, typename Team::Workspace>{ws, plan.chunks});
  if constexpr (Op == RowOp::logsumexp) {
    Kokkos::parallel_for(label + " finish", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows),
                         KOKKOS_LAMBDA(index_t r) { y(r, 0) = ws(r, plan.chunks).logsumexp(); });
  } else {
    launch(label + " finish", rows * plan.chunks, team_of(ws, RowPhase::finish, plan.chunks));
  }
  exec.fence();  // the workspace must outlive the kernels
  return true;
}

/// Runs rows through the device row schedules of Traits (ScheduleTraits, or a test's), Regs registers
/// per thread in the team tier: whole rows (plan.chunks == 1) by lanes or by teams, split rows by
/// teams per chunk (their states in a workspace, merged, then x read again for the outputs); the
/// team tier by 16-byte accesses where every row, and every chunk of a split row, starts on a
/// 16-byte boundary. Returns false, running nothing, when no tier holds the rows or their chunks.
template <RowOp Op, class Traits, int Regs, class ExecSpace, class XRows, class YRows>
bool run_team_rows(const ExecSpace& exec, const XRows& x, const YRows& y, const RowPlan& plan,
                   const std::string& label) {
  using T = std::remove_cv_t<typename decltype(XRows::v)::value_type>;
  constexpr index_t W = Chunk<T>::n;
  bool chunked = rows_in_chunks(x.v, W) && (plan.chunks == 1 || plan.chunk_len % W == 0);
  if constexpr (Op != RowOp::logsumexp) chunked = chunked && rows_in_chunks(y.v, W);
  return chunked ? run_team_rows_by<Op, Traits, Regs, true>(exec, x, y, plan, label)
                 : run_team_rows_by<Op, Traits, Regs, false>(exec, x, y, plan, label);
}

}  // namespace kflash::impl
