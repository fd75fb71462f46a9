// kflash::mpi: the online-softmax monoid across the ranks of an MPI communicator. Rows whose
// columns are sharded across ranks (vocabulary-parallel softmax and cross-entropy) take one
// MPI_Allreduce of their states; ring attention passes K/V blocks around the ranks and merges the
// partial results with the same monoid. The optional kflash::mpi CMake target (built when CMake finds
// MPI) carries this header's MPI dependency.
#pragma once

#include <kflash/attention_stream.hpp>
#include <kflash/cross_entropy.hpp>
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

/// A piece of a sequence that a rank holds: positions [offset, offset + length) of the whole
/// sequence, at [local, local + length) of the rank's View.
struct SequencePiece {
  std::int64_t offset = 0, local = 0, length = 0;
};

/// The pieces of a sequence that rank `rank` of `size` holds with n_local positions:
///  - contiguous (zigzag false): [rank n_local, (rank + 1) n_local);
///  - zigzag (n_local even): the sequence cut into 2 size chunks of n_local / 2; rank r holds chunk r
///    and then chunk 2 size - 1 - r. Under a causal mask every rank then has the same number of
///    visible (query, key) pairs: an early chunk with few keys before it, a late one with many.
inline std::vector<SequencePiece> sequence_pieces(int rank, int size, std::int64_t n_local, bool zigzag) {
  if (!zigzag) return {SequencePiece{std::int64_t(rank) * n_local, 0, n_local}};
  const std::int64_t c = n_local / 2;
  return {SequencePiece{std::int64_t(rank) * c, 0, c}, SequencePiece{std::int64_t(2 * size - 1 - rank) * c, c, c}};
}

namespace impl {

using kflash::impl::index_t;

template <class T>
MPI_Datatype scalar_type() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value, "kflash::mpi: T is float or double");
  return std::is_same<T, float>::value ? MPI_FLOAT : MPI_DOUBLE;
}

/// A committed contiguous datatype of `count` T's, created once per process.
template <class V>
MPI_Datatype contiguous_type() {
  using T = typename V::value_type;
  static_assert(sizeof(V) % sizeof(T) == 0 && std::is_trivially_copyable<V>::value,
                "kflash::mpi: a state must be a plain array of its scalars");
  static const MPI_Datatype type = [] {
    MPI_Datatype t;
    MPI_Type_contiguous(int(sizeof(V) / sizeof(T)), scalar_type<T>(), &t);
    MPI_Type_commit(&t);
    return t;
  }();
  return type;
}

/// The merge of two monoid elements in an order fixed by their values, so that a ∘ b and b ∘ a have
/// the same bits: MPI may combine the ranks' contributions in a different order on each rank, and
/// every rank must still get the same result.
template <class V>
V merge_symmetric(const V& a, const V& b) {
  char ab[sizeof(V)], bb[sizeof(V)];
  std::memcpy(ab, &a, sizeof(V));
  std::memcpy(bb, &b, sizeof(V));
  V r = std::memcmp(ab, bb, sizeof(V)) <= 0 ? a : b;
  r.merge(std::memcmp(ab, bb, sizeof(V)) <= 0 ? b : a);
  return r;
}

template <class V>
void merge_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const V* a = static_cast<const V*>(in);
  V* b = static_cast<V*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = merge_symmetric(a[i], b[i]);
}

/// A commutative MPI_Op merging V's, created once per process.
template <class V>
MPI_Op merge_op_handle() {
  static const MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&merge_op<V>, 1, &o);
    return o;
  }();
  return op;
}

/// Throws std::invalid_argument unless `call` succeeded (MPI's default handler aborts first, unless
/// the communicator returns errors).
inline void check_mpi(int code, const char* function, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  kflash::impl::throw_invalid_argument(function, std::string(call) + " failed: " + std::string(text, std::size_t(len)));
}

/// The one small agreement of a call: runs `check` (this rank's own argument checks), then gathers
/// every rank's `mine` (the same count on every rank) and whether its check passed, on every rank.
/// A rank whose check failed rethrows its exception and the others throw one naming that rank, so
/// no rank is left waiting in a later collective; every rank then checks the same gathered values,
/// so a mismatch between ranks raises the same exception on every rank.
template <class Check>
std::vector<std::vector<std::int64_t>> agree(MPI_Comm comm, std::vector<std::int64_t> mine, const char* function,
                                             const Check& check) {
  std::string error;
  try {
    check();
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  mine.push_back(error.empty() ? 0 : 1);
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<std::int64_t> all(mine.size() * std::size_t(size));
  check_mpi(MPI_Allgather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, comm),
            function, "MPI_Allgather of the shapes");
  if (!error.empty()) throw std::invalid_argument(error);
  std::vector<std::vector<std::int64_t>> per_rank(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto first = all.begin() + std::ptrdiff_t(std::size_t(r) * mine.size());
    if (*(first + std::ptrdiff_t(mine.size() - 1)) != 0)
      kflash::impl::throw_invalid_argument(function, "rank " + std::to_string(r) +
                                                         " refused its arguments (its exception names them)");
    per_rank[std::size_t(r)].assign(first, first + std::ptrdiff_t(mine.size() - 1));
  }
  return per_rank;
}

inline std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

/// Throws on every rank unless entry `i` of every rank's values, for each i in `same`, is rank 0's.
inline void require_same(const std::vector<std::vector<std::int64_t>>& ranks, std::initializer_list<std::size_t> same,
                         const char* function, const std::string& what) {
  for (std::size_t r = 1; r < ranks.size(); ++r)
    for (std::size_t i : same)
      if (ranks[r][i] != ranks[0][i])
        kflash::impl::throw_invalid_argument(function, what + " must agree on every rank: rank 0 has " +
                                                           list(ranks[0]) + ", rank " + std::to_string(r) + " has " +
                                                           list(ranks[r]));
}

/// A column shard: this rank's first column in the whole row and the whole row's length, from the
/// column counts of every rank (entry `cols_at` of each rank's agreed values).
struct Shard {
  index_t col0 = 0, cols = 0;
};
inline Shard shard_of(const std::vector<std::vector<std::int64_t>>& ranks, std::size_t cols_at, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  Shard s;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (int(r) < rank) s.col0 += ranks[r][cols_at];
    s.cols += ranks[r][cols_at];
  }
  return s;
}

/// Every rank's states of its columns of x (rows, local columns), merged over the ranks by one
/// MPI_Allreduce; returns the states in the execution space's memory. Through host memory: the
/// states are a few bytes per row.
template <class ExecSpace, class XView>
Kokkos::View<SoftmaxState<std::remove_cv_t<typename XView::value_type>>*, typename ExecSpace::memory_space>
global_row_states(const ExecSpace& exec, MPI_Comm comm, const XView& x, const char* function) {
  using T = std::remove_cv_t<typename XView::value_type>;
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
  static_check_view<ExecSpace, XView, false>();
  static_check_view<ExecSpace, YView, true>();
  agree_rows(comm, x, fn, [&] {
    require_rank(fn, "x", x, 2, 2);
    require_same_shape(fn, "x", x, "y", y);
  });
  if constexpr (view_rank<XView> == 2 && view_rank<YView> == 2) {
    const auto states = global_row_states(exec, comm, x, fn);
    const RowPlan plan = plan_rows<std::remove_cv_t<typename XView::value_type>, ScheduleTraits<ExecSpace>>(
        exec, index_t(x.extent(0)), index_t(x.extent(1)));
    write_from_states<Op>(exec, Rows<XView>{x}, Rows<YView>{y}, states, plan,
                          std::string("kflash::mpi::") + fn + " write");
    exec.fence();  // the states must outlive the kernel
  }
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
  std::vector<std::int64_t> mine{0, 0, options.ignore_index, smoothing_bits, z_bits};
  if constexpr (view_rank<LogitsView> == 2) mine[0] = std::int64_t(logits.extent(0)), mine[1] = std::int64_t(logits.extent(1));
  const auto ranks = agree(comm, mine, fn, [&] {
    check_cross_entropy<ExecSpace>(logits, targets, loss, options);
    if (mine[0] > std::int64_t(INT_MAX))
      throw_invalid_argument(fn, "'" + describe("logits", logits) + "' has more rows than one MPI call carries (INT_MAX)");
  });
  require_same(ranks, {0, 2, 3, 4}, fn, "the rows of logits and the options");
  LossTotal total = LossTotal::identity();
  if constexpr (view_rank<LogitsView> == 2 && view_rank<TargetsView> == 1 && view_rank<LossView> == 1) {
    using T = std::remove_cv_t<typename LogitsView::value_type>;
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
      dispatch_logit_stats(exec, rows, targets, ws, plan, shard.col0, "kflash::mpi::cross_entropy stats");
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
    if (total.bad_row < index_t(logits.extent(0)))
      throw_invalid_argument(fn, "targets(" + std::to_string(total.bad_row) + ") = " + std::to_string(total.bad_target) +
                                     " is outside [0, " + std::to_string(shard.cols) +
                                     ") (the vocabulary: the ranks' logits columns together) and is not ignore_index (" +
                                     std::to_string(options.ignore_index) + "); its loss is NaN");
  }
  return total;
}


/// Whether some query at positions [q0, q1) sees some key at [k0, k1) under causal and the windows
/// (a query at position p sees keys j with p - window_left <= j <= p + window_right).
inline bool pieces_meet(std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1,
                        const AttentionOptions& o) {
  if (q0 >= q1 || k0 >= k1) return false;
  const std::int64_t right = o.causal ? (o.window_right >= 0 ? std::min<std::int64_t>(o.window_right, 0) : 0)
                                      : o.window_right;
  if (right >= 0 && k0 > q1 - 1 + right) return false;
  if (o.window_left >= 0 && k1 - 1 < q0 - o.window_left) return false;
  return true;
}

template <class ExecSpace, class QView, class KView, class VView, class OView, class LView>
void ring_attention_impl(const ExecSpace& exec, MPI_Comm comm, const QView& q, const KView& k, const VView& v,
                         const OView& o, const AttentionOptions& options, const LView& lse, bool has_lse) {
  using namespace kflash::impl;
  using T = std::remove_cv_t<typename QView::value_type>;
  using memory_space = typename ExecSpace::memory_space;
  const char* fn = "ring_attention";
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  constexpr bool ranks_ok = view_rank<QView> == 4 && view_rank<KView> == 4 && view_rank<VView> == 4 &&
                            view_rank<OView> == 4 && view_rank<LView> == 3;
  std::int64_t scale_bits, softcap_bits;
  std::memcpy(&scale_bits, &options.scale, 8);
  std::memcpy(&softcap_bits, &options.softcap, 8);
  std::int64_t present = 0;  // which option Views are set, one bit each
  int bit = 0;
  for (const OptionView* ov : {&options.alibi_slopes, &options.sinks, &options.bias, &options.mask, &options.block_mask,
                               &options.cu_seqlens_q, &options.cu_seqlens_k, &options.block_table,
                               &options.cache_seqlens})
    present |= std::int64_t(!ov->empty()) << bit++;
  std::vector<std::int64_t> mine(16, 0);
  if constexpr (ranks_ok) {
    for (int d = 0; d < 4; ++d) {
      mine[std::size_t(d)] = std::int64_t(q.extent(std::size_t(d)));
      mine[std::size_t(4 + d)] = std::int64_t(k.extent(std::size_t(d)));
    }
    mine[8] = std::int64_t(v.extent(3));
  }
  mine[9] = options.causal, mine[10] = options.window_left, mine[11] = options.window_right;
  mine[12] = scale_bits, mine[13] = softcap_bits, mine[14] = present, mine[15] = has_lse;
  const auto ranks = agree(comm, mine, fn, [&] {
    require_rank(fn, "q", q, 4, 4);
    require_rank(fn, "k", k, 4, 4);
    require_rank(fn, "v", v, 4, 4);
    require_rank(fn, "o", o, 4, 4);
    if (has_lse) require_rank(fn, "lse", lse, 3, 3);
    if constexpr (ranks_ok) {
      if (v.extent(0) != k.extent(0) || v.extent(1) != k.extent(1) || v.extent(2) != k.extent(2))
        throw_invalid_argument(fn, "argument '" + describe("v", v) + "' must match '" + describe("k", k) +
                                       "' in B, Hk and the keys");
      const std::size_t want[4] = {q.extent(0), q.extent(1), q.extent(2), v.extent(3)};
      bool ok = true;
      for (int d = 0; d < 4; ++d) ok = ok && o.extent(std::size_t(d)) == want[d];
      if (!ok) throw_invalid_argument(fn, "argument '" + describe("o", o) + "' must be " + describe_extents("o", 4, want));
      const std::int64_t elements = std::int64_t(k.size() > v.size() ? k.size() : v.size());
      if (elements > std::int64_t(INT_MAX))
        throw_invalid_argument(fn, "'" + describe("k", k) + "' has more elements than one MPI message carries (INT_MAX)");
    }
  });
  require_same(ranks, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, fn, "the local shapes and the options");
  if constexpr (ranks_ok) {
    const std::int64_t nq = std::int64_t(q.extent(2)), nk = std::int64_t(k.extent(2));
    const bool zigzag = options.causal;
    if (zigzag && (nq != nk || nq % 2 != 0))
      throw_invalid_argument(fn, "causal ring attention shards queries and keys alike in the zigzag layout: each "
                                 "rank needs as many queries as keys, an even number, got '" +
                                     describe("q", q) + "' and '" + describe("k", k) + "'");
    // One stream per query piece, each query row at its position in the whole sequence.
    const auto q_pieces = sequence_pieces(rank, size, nq, zigzag);
    std::vector<AttentionStream<T, ExecSpace>> streams;
    for (const SequencePiece& p : q_pieces)
      streams.emplace_back(exec, Kokkos::subview(q, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(p.local, p.local + p.length),
                                                 Kokkos::ALL),
                           std::int64_t(v.extent(3)), options, p.offset);
    // Two buffers of each of K and V: the block computed on, and the one arriving.
    using Block = Kokkos::View<T****, Kokkos::LayoutRight, memory_space>;
    Block kb[2], vb[2];
    kb[0] = Block(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::mpi::ring_attention k"), k.extent(0),
                  k.extent(1), k.extent(2), k.extent(3));
    vb[0] = Block(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::mpi::ring_attention v"), v.extent(0),
                  v.extent(1), v.extent(2), v.extent(3));
    Kokkos::deep_copy(exec, kb[0], k);
    Kokkos::deep_copy(exec, vb[0], v);
    if (size > 1) {
      kb[1] = Block(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::mpi::ring_attention k'"),
                    k.extent(0), k.extent(1), k.extent(2), k.extent(3));
      vb[1] = Block(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::mpi::ring_attention v'"),
                    v.extent(0), v.extent(1), v.extent(2), v.extent(3));
    }
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const MPI_Datatype type = scalar_type<T>();
    for (int step = 0; step < size; ++step) {
      const int cur = step % 2, owner = (rank - step + size) % size;  // whose keys kb[cur] holds
      exec.fence();  // kb[cur] has arrived or been copied; kb[1 - cur]'s last readers are done
      MPI_Request req[4];
      int nreq = 0;
      if (step + 1 < size) {  // pass the block on while computing with it
        check_mpi(MPI_Irecv(kb[1 - cur].data(), int(kb[0].size()), type, prev, 0, comm, &req[nreq++]), fn, "MPI_Irecv");
        check_mpi(MPI_Irecv(vb[1 - cur].data(), int(vb[0].size()), type, prev, 1, comm, &req[nreq++]), fn, "MPI_Irecv");
        check_mpi(MPI_Isend(kb[cur].data(), int(kb[0].size()), type, next, 0, comm, &req[nreq++]), fn, "MPI_Isend");
        check_mpi(MPI_Isend(vb[cur].data(), int(vb[0].size()), type, next, 1, comm, &req[nreq++]), fn, "MPI_Isend");
      }
      for (const SequencePiece& kp : sequence_pieces(owner, size, nk, zigzag)) {
        const auto keys = Kokkos::make_pair(kp.local, kp.local + kp.length);
        for (std::size_t j = 0; j < streams.size(); ++j) {
          const SequencePiece& qp = q_pieces[j];
          if (!pieces_meet(qp.offset, qp.offset + qp.length, kp.offset, kp.offset + kp.length, options)) continue;
          streams[j].update(exec, Kokkos::subview(kb[cur], Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL),
                            Kokkos::subview(vb[cur], Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL), kp.offset);
          if (nreq > 0) {  // lets MPI progress the transfers between kernels
            int done = 0;
            exec.fence();
            MPI_Testall(nreq, req, &done, MPI_STATUSES_IGNORE);
          }
        }
      }
      if (nreq > 0) check_mpi(MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE), fn, "MPI_Waitall");
    }
    for (std::size_t j = 0; j < streams.size(); ++j) {
      const auto rows = Kokkos::make_pair(q_pieces[j].local, q_pieces[j].local + q_pieces[j].length);
      const auto oj = Kokkos::subview(o, Kokkos::ALL, Kokkos::ALL, rows, Kokkos::ALL);
      if (has_lse) streams[j].result(exec, oj, Kokkos::subview(lse, Kokkos::ALL, Kokkos::ALL, rows));
      else streams[j].result(exec, oj);
    }
    exec.fence();  // the streams and buffers must outlive the kernels
  }
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
/// or in device memory (the states pass through host memory; the rows never do).
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
  static_check_view<ExecSpace, XView, false>();
  static_check_view<ExecSpace, OutView, true>();
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
        KOKKOS_LAMBDA(const std::size_t r) { out(r) = states(r).logsumexp(); });
    exec.fence();
  }
}

/// Vocabulary-parallel cross-entropy: logits (rows, local vocabulary) hold this rank's classes of
/// every row, sharded as for softmax; targets (rows) are classes of the whole vocabulary and the same
/// on every rank; loss (rows) is the whole rows' loss on every rank, with kflash::cross_entropy's
/// options and rules (a target outside the whole vocabulary throws on every rank). One
/// MPI_Allreduce carries each row's statistics: its (m, l), its logits' sum and its target's logit.
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
/// Device Views go to MPI as they are: that needs a CUDA-aware MPI. Collective; a shape or option
/// that differs between ranks throws the same std::invalid_argument on every rank.
template <class ExecSpace, class QView, class KView, class VView, class OView>
void ring_attention(const ExecSpace& exec, MPI_Comm comm, const QView& q, const KView& k, const VView& v,
                    const OView& o, const AttentionOptions& options = {}) {
  impl::ring_attention_impl(exec, comm, q, k, v, o, options,
                            Kokkos::View<typename OView::value_type***, typename ExecSpace::memory_space>(), false);
}
template <class ExecSpace, class QView, class KView, class VView, class OView, class LView>
void ring_attention(const ExecSpace& exec, MPI_Comm comm, const QView& q, const KView& k, const VView& v,
                    const OView& o, const AttentionOptions& options, const LView& lse) {
  impl::ring_attention_impl(exec, comm, q, k, v, o, options, lse, true);
}

}  // namespace kflash::mpi
