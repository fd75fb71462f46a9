// kflash::mpi's plumbing: MPI datatypes and the merge operation for the monoids, error checks, and
// the one small agreement on shapes a collective call makes before its work.
#pragma once

#include <kflash/impl/errors.hpp>

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kflash::mpi::impl {

using kflash::impl::index_t;

/// The MPI datatype of a scalar: float, double, or a 16-bit storage type (kflash::bhalf_t,
/// kflash::half_t) carried as its 16 bits (payloads only: no MPI reduction works on them).
template <class T>
MPI_Datatype scalar_type() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value || kflash::impl::is_half_type<T>,
                "kflash::mpi: T is float, double, kflash::bhalf_t or kflash::half_t");
  static_assert(!kflash::impl::is_half_type<T> || sizeof(T) == sizeof(std::uint16_t),
                "kflash::mpi: 16-bit storage types travel as their 16 bits");
  if constexpr (kflash::impl::is_half_type<T>) return MPI_UINT16_T;
  else return std::is_same<T, float>::value ? MPI_FLOAT : MPI_DOUBLE;
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

}  // namespace kflash::mpi::impl
