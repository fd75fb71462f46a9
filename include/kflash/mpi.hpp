// kflash::mpi: the online-softmax monoid across the ranks of an MPI communicator. Rows whose
// columns are sharded across ranks (vocabulary-parallel softmax and cross-entropy) take one
// MPI_Allreduce of their states; ring attention passes K/V blocks around the ranks and merges the
// partial results with the same monoid. The optional kflash::mpi CMake target (built when CMake finds
// MPI) carries this header's MPI dependency.
#pragma once

#include <kflash/cross_entropy.hpp>
#include <kflash/impl/mpi/collectives.hpp>
#include <kflash/impl/mpi/ring_attention.hpp>
#include <kflash/softmax.hpp>

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kflash::mpi {

namespace impl {

/// Every rank's states of its columns of x (rows, local columns), merged over the ranks by one
/// MPI_Allreduce; returns the states in the execution space's memory. Through host memory: the
/// states are a few bytes per row.
template <class ExecSpace, class XView>
Kokkos::View<SoftmaxState<kflash::impl::arith_t<typename XView::value_type>>*, typename ExecSpace::memory_space>
global_row_states(const ExecSpace& exec, MPI_Comm comm, const XView& x, const char* function) {
  using T = kflash::impl::arith_t<typename XView::value_type>;  // the states' type (float for 16-bit x)
  using States = Kokkos::View<SoftmaxState<T>*, typename ExecSpace::memory_space>;
  const std::string label = std::string("kflash::mpi::") + function;
  States states(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, label + " states"), x.extent(0));
  Kokkos::deep_copy(exec, states, SoftmaxState<T>::identity());
  kflash::impl::absorb_row_states(exec, kflash::impl::Rows<XView>{x}, states, label);
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), states);
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, host.data(), int(host.extent(0)), contiguous_type<SoftmaxState<T>>(),
                          merge_op_handle<SoftmaxState<T>>(), comm),
            function, "MPI_Allreduce of the row states");
  Kokkos::deep_copy(states, host);
  return states;
}

/// The agreement of a sharded row operation on x (rows, local columns): `check` runs this rank's
/// own checks; the rows must be the same on every rank.
template <class XView, class Check>
void agree_rows(MPI_Comm comm, const XView& x, const char* function, const Check& check) {
  using namespace kflash::impl;
  std::vector<std::int64_t> mine{0, 0};
  if constexpr (view_rank<XView> == 2) mine = {std::int64_t(x.extent(0)), std::int64_t(x.extent(1))};
  const auto ranks = agree(comm, mine, function, [&] {
    check();
    if (mine[0] > std::int64_t(INT_MAX))
      throw_invalid_argument(function, "'" + describe("x", x) + "' has more rows than one MPI call carries (INT_MAX)");
  });
  require_same(ranks, {0}, function, "the rows of x (rows, local columns)");
}

template <kflash::impl::RowOp Op, class ExecSpace, class XView, class YView>
void sharded_rows(const ExecSpace& exec, MPI_Comm comm, const XView& x, const YView& y) {
  using namespace kflash::impl;
  const char* fn = row_op_name(Op);
  static_check_view<ExecSpace, XView, false, true>();
  static_check_view<ExecSpace, YView, true, true>();
  static_check_same_type<XView, YView>();
  agree_rows(comm, x, fn, [&] {
    require_rank(fn, "x", x, 2, 2);
    require_same_shape(fn, "x", x, "y", y);
  });
  if constexpr (view_rank<XView> == 2 && view_rank<YView> == 2) {
    const auto states = global_row_states(exec, comm, x, fn);
    const RowPlan plan = plan_rows<arith_t<typename XView::value_type>, ScheduleTraits<ExecSpace>>(
        exec, index_t(x.extent(0)), index_t(x.extent(1)));
    write_from_states<Op>(exec, Rows<XView>{x}, Rows<YView>{y}, states, plan,
                          std::string("kflash::mpi::") + fn + " write");
    exec.fence();  // the states must outlive the kernel
  }
}

/// A fingerprint of targets: the sum over rows of a 64-bit mix of the row and its target, so that
/// ranks whose targets differ anywhere get different fingerprints (but for a 2^-64 chance), for one
/// pass over the rows.
template <class ExecSpace, class TargetsView>
std::int64_t targets_fingerprint(const ExecSpace& exec, const TargetsView& targets) {
  std::uint64_t sum = 0;
  if constexpr (kflash::impl::view_rank<TargetsView> == 1) {
    Kokkos::parallel_reduce(
        "kflash::mpi::cross_entropy targets", Kokkos::RangePolicy<ExecSpace>(exec, 0, targets.extent(0)),
        KOKKOS_LAMBDA(const std::size_t r, std::uint64_t& acc) {
          std::uint64_t z = std::uint64_t(r) * 0x9E3779B97F4A7C15ull + std::uint64_t(std::int64_t(targets(r)));
          z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finaliser
          z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
          acc += z ^ (z >> 31);
        },
        sum);
  }
  std::int64_t bits;
  std::memcpy(&bits, &sum, sizeof bits);
  return bits;
}

/// kflash::mpi::cross_entropy's work; returns the totals.
template <class ExecSpace, class LogitsView, class TargetsView, class LossView>
kflash::impl::LossTotal cross_entropy_impl(const ExecSpace& exec, MPI_Comm comm, const LogitsView& logits,
                                           const TargetsView& targets, const LossView& loss,
                                           const CrossEntropyOptions& options) {
  using namespace kflash::impl;
  const char* fn = "cross_entropy";
  std::int64_t smoothing_bits, z_bits;
  std::memcpy(&smoothing_bits, &options.label_smoothing, 8);
  std::memcpy(&z_bits, &options.z_loss, 8);
  std::vector<std::int64_t> mine{0, 0, options.ignore_index, smoothing_bits, z_bits, targets_fingerprint(exec, targets)};
  if constexpr (view_rank<LogitsView> == 2) mine[0] = std::int64_t(logits.extent(0)), mine[1] = std::int64_t(logits.extent(1));
  const auto ranks = agree(comm, mine, fn, [&] {
    check_cross_entropy<ExecSpace, true>(logits, targets, loss, options);
    if (mine[0] > std::int64_t(INT_MAX))
      throw_invalid_argument(fn, "'" + describe("logits", logits) + "' has more rows than one MPI call carries (INT_MAX)");
  });
  require_same(ranks, {0, 2, 3, 4}, fn, "the rows of logits and the options");
  require_same(ranks, {5}, fn, "targets (their fingerprint, the last value)");
  LossTotal total = LossTotal::identity();
  if constexpr (view_rank<LogitsView> == 2 && view_rank<TargetsView> == 1 && view_rank<LossView> == 1) {
    using T = arith_t<typename LogitsView::value_type>;  // the statistics' type (float for 16-bit logits)
    using Stats = LogitStats<T>;
    using memory_space = typename ExecSpace::memory_space;
    const Shard shard = shard_of(ranks, 1, comm);
    const Rows<LogitsView> rows{logits};
    const RowPlan plan = plan_rows<T, ScheduleTraits<ExecSpace>>(exec, rows.rows(), rows.cols());
    using Workspace = Kokkos::View<Stats**, memory_space, Kokkos::MemoryUnmanaged>;
    Kokkos::View<Stats*, memory_space> stats("kflash::mpi::cross_entropy stats", plan.rows);
    Kokkos::deep_copy(exec, stats, Stats::identity());
    if (plan.cols > 0) {
      const CachedWorkspace<memory_space> scratch(exec, sizeof(Stats) * std::size_t(plan.rows * plan.chunks),
                                                  "kflash::mpi::cross_entropy workspace");
      const Workspace ws(scratch.template at<Stats>(0), plan.rows, plan.chunks);
      dispatch_logit_stats(exec, rows, targets, ws, plan, shard.col0, options.label_smoothing != 0,
                           "kflash::mpi::cross_entropy stats");
      Kokkos::parallel_for("kflash::mpi::cross_entropy merge", Kokkos::RangePolicy<ExecSpace>(exec, 0, plan.rows),
                           AbsorbRowStates<decltype(stats), Workspace>{stats, ws, plan.chunks});
      exec.fence();
    }
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), stats);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, host.data(), int(host.extent(0)), contiguous_type<Stats>(),
                                  merge_op_handle<Stats>(), comm),
                    fn, "MPI_Allreduce of the row statistics");
    Kokkos::deep_copy(stats, host);
    const Workspace merged(stats.data(), plan.rows, 1);
    total = run_cross_entropy_loss(exec, merged, targets, loss, shard.cols, options.ignore_index,
                                   LossTerms{options.label_smoothing, options.z_loss}, "kflash::mpi::cross_entropy loss");
    require_targets_in(
        total, index_t(logits.extent(0)), shard.cols, [] { return std::string("the ranks' logits columns together"); },
        options.ignore_index);
  }
  return total;
}

}  // namespace impl

/// The MPI datatype of a SoftmaxState<T> (all of it: max, sum and its compensation), committed once.
template <class T>
MPI_Datatype state_type() {
  return impl::contiguous_type<SoftmaxState<T>>();
}

/// A commutative MPI_Op that merges SoftmaxState<T>'s (the monoid), created once: with state_type<T>()
/// any MPI reduction of states, e.g. MPI_Allreduce(MPI_IN_PLACE, states, n, state_type<float>(),
/// state_op<float>(), comm). The result has the same bits on every rank.
template <class T>
MPI_Op state_op() {
  return impl::merge_op_handle<SoftmaxState<T>>();
}

/// Sharded rows: x (rows, local columns) holds this rank's columns of every row; the ranks in rank
/// order hold consecutive columns (a rank's first column is the sum of the column counts of the
/// ranks before it; a rank may hold none). The rows must agree across ranks; every call is
/// collective and takes one MPI_Allreduce of the row states, plus one MPI_Allgather of the shapes,
/// which makes a mismatch throw the same std::invalid_argument on every rank. Views in host memory,
/// or in device memory (the states pass through host memory; the rows never do). Rows of float,
/// double or 16-bit storage (kflash::bhalf_t, kflash::half_t: the states and their reduction in
/// float, each output rounded once); logsumexp's out of x's type or float, cross_entropy's loss and
/// mean float for 16-bit logits.
///
/// y (rows, local columns) = softmax of the whole rows, at this rank's columns.
template <class ExecSpace, class XView, class YView>
void softmax(const ExecSpace& exec, MPI_Comm comm, const XView& x, const YView& y) {
  impl::sharded_rows<kflash::impl::RowOp::softmax>(exec, comm, x, y);
}

/// y (rows, local columns) = log_softmax of the whole rows, at this rank's columns.
template <class ExecSpace, class XView, class YView>
void log_softmax(const ExecSpace& exec, MPI_Comm comm, const XView& x, const YView& y) {
  impl::sharded_rows<kflash::impl::RowOp::log_softmax>(exec, comm, x, y);
}

/// out (rows) = logsumexp of the whole rows, on every rank.
template <class ExecSpace, class XView, class OutView>
void logsumexp(const ExecSpace& exec, MPI_Comm comm, const XView& x, const OutView& out) {
  using namespace kflash::impl;
  const char* fn = "logsumexp";
  static_check_view<ExecSpace, XView, false, true>();
  static_check_view<ExecSpace, OutView, true, true>();
  static_check_row_scalars<XView, OutView>();
  impl::agree_rows(comm, x, fn, [&] {
    require_rank(fn, "x", x, 2, 2);
    require_rank(fn, "out", out, 1, 1);
    if (out.extent(0) != x.extent(0))
      throw_invalid_argument(fn, "argument '" + describe("out", out) + "' must have one element per row of '" +
                                     describe("x", x) + "'");
  });
  if constexpr (view_rank<XView> == 2 && view_rank<OutView> == 1) {
    const auto states = impl::global_row_states(exec, comm, x, fn);
    Kokkos::parallel_for(
        "kflash::mpi::logsumexp write", Kokkos::RangePolicy<ExecSpace>(exec, 0, x.extent(0)),
        KOKKOS_LAMBDA(const std::size_t r) {
          out(r) = store_as<typename OutView::non_const_value_type>(states(r).logsumexp());
        });
    exec.fence();
  }
}

/// Vocabulary-parallel cross-entropy: logits (rows, local vocabulary) hold this rank's classes of
/// every row, sharded as for softmax; targets (rows) are classes of the whole vocabulary and the same
/// on every rank (their fingerprints are compared: targets that differ throw on every rank); loss
/// (rows) is the whole rows' loss on every rank, with kflash::cross_entropy's options and rules (a
/// target outside the whole vocabulary throws on every rank). One MPI_Allreduce carries each row's
/// statistics: its (m, l), its logits' sum and its target's logit.
template <class ExecSpace, class LogitsView, class TargetsView, class LossView>
void cross_entropy(const ExecSpace& exec, MPI_Comm comm, const LogitsView& logits, const TargetsView& targets,
                   const LossView& loss, const CrossEntropyOptions& options = {}) {
  impl::cross_entropy_impl(exec, comm, logits, targets, loss, options);
}

/// The same, and mean() = the mean loss over the rows not ignored (NaN if none), on every rank.
template <class ExecSpace, class LogitsView, class TargetsView, class LossView, class MeanView,
          std::enable_if_t<Kokkos::is_view<MeanView>::value, int> = 0>
void cross_entropy(const ExecSpace& exec, MPI_Comm comm, const LogitsView& logits, const TargetsView& targets,
                   const LossView& loss, const MeanView& mean, const CrossEntropyOptions& options = {}) {
  using T = typename LossView::value_type;
  kflash::impl::static_check_view<ExecSpace, MeanView, true>();
  static_assert(std::is_same<typename MeanView::value_type, T>::value,
                "kflash::mpi::cross_entropy: mean must have the value type of loss");
  kflash::impl::require_rank("cross_entropy", "mean", mean, 0, 0);
  const auto total = impl::cross_entropy_impl(exec, comm, logits, targets, loss, options);
  const T value = total.counted > 0 ? T(total.sum / double(total.counted)) : kflash::impl::quiet_nan<T>();
  if constexpr (kflash::impl::view_rank<MeanView> == 0) Kokkos::deep_copy(mean, value);
}

/// Ring attention: the sequence is sharded across the ranks of comm, queries and keys alike, and
/// attention runs over the whole sequence. q (B, Hq, Nq, D), k (B, Hk, Nk, D), v (B, Hk, Nk, Dv),
/// o (B, Hq, Nq, Dv) and lse (B, Hq, Nq) are this rank's positions, any layout, in the execution
/// space's memory; every rank has the same local shapes and options. The ranks hold the sequence as
/// sequence_pieces() says: consecutive blocks (rank r: positions [r Nq, (r + 1) Nq) of queries and
/// [r Nk, (r + 1) Nk) of keys), or, with options.causal, the zigzag layout (Nq = Nk, even), which
/// balances the causal work. Each rank's K/V block travels around the ring, one hop a step, with
/// nonblocking sends and receives overlapping the attention on the block at hand; each query row's
/// (m, l, O) absorbs every block it sees (blocks it cannot see are skipped) through AttentionStream,
/// so the result equals attention() over the whole sequence within rounding. Options as
/// AttentionStream takes them (scale, causal, windows, softcap, ALiBi, sinks), positions being
/// those of the whole sequence; bias, mask, block_mask, varlen and paged options are refused.
/// 16-bit q, k, v, o (kflash::bhalf_t, kflash::half_t): K/V blocks travel as their 16 bits, the
/// rows' states in float, lse and the option arrays float, o rounded once.
/// Device Views go to MPI as they are: that needs a CUDA-aware MPI. Collective; a shape or option
/// that differs between ranks throws the same std::invalid_argument on every rank.
template <class ExecSpace, class QView, class KView, class VView, class OView>
void ring_attention(const ExecSpace& exec, MPI_Comm comm, const QView& q, const KView& k, const VView& v,
                    const OView& o, const AttentionOptions& options = {}) {
  impl::ring_attention_impl(
      exec, comm, q, k, v, o, options,
      Kokkos::View<kflash::impl::arith_t<typename OView::value_type>***, typename ExecSpace::memory_space>(), false);
}
template <class ExecSpace, class QView, class KView, class VView, class OView, class LView>
void ring_attention(const ExecSpace& exec, MPI_Comm comm, const QView& q, const KView& k, const VView& v,
                    const OView& o, const AttentionOptions& options, const LView& lse) {
  impl::ring_attention_impl(exec, comm, q, k, v, o, options, lse, true);
}

}  // namespace kflash::mpi
