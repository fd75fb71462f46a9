// kflash::mpi::ring_attention's work: the sequence pieces each rank holds (contiguous or zigzag),
// and the ring that passes K/V blocks around while AttentionStream absorbs them.
#pragma once

#include <kflash/attention_stream.hpp>
#include <kflash/impl/mpi/collectives.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
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
}  // namespace kflash::mpi
