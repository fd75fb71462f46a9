// Exact scaled-dot-product attention on the online (m, l, O) recurrence, and the merge of partial
// attention results.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/errors.hpp>
#include <kflash/impl/host_kernels.hpp>
#include <kflash/impl/rows.hpp>
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
/// team scratch memory. Devices: one thread per row. Hosts: a one-thread team hands each tile to the
/// compiled tile kernel of host_kernels.hpp (register-blocked products, K staged transposed).
template <class ExecSpace>
struct AttentionTraits {
  static constexpr bool is_host = RowTraits<ExecSpace>::is_host;
  static constexpr index_t block_q = is_host ? 32 : 32;
  static constexpr index_t block_k = is_host ? 64 : 32;
  /// Keys per split are at least this many when the keys are split automatically.
  static constexpr index_t min_split_keys = is_host ? 4096 : 1024;
  /// Work items (teams) wanted per unit of concurrency before keys are split.
  static constexpr index_t items_per_thread = 4;
  static_assert(!is_host || block_k % host::attention_pad == 0,
                "kflash: the host tile kernel needs block_k to be a multiple of host::attention_pad");
};

struct AttentionPlan {
  index_t B = 0, Hq = 0, Hk = 0, Nq = 0, Nk = 0, D = 0, Dv = 0;
  bool causal = false;
  index_t group = 1;       // query heads per K/V head
  index_t bq = 0, bk = 0;  // rows per block, keys per tile
  index_t nqb = 0;         // blocks per K/V head: group * Nq rows
  index_t dvp = 0;         // host: Dv padded for the tile kernel
  index_t nsplits = 1, split_len = 0;
};

/// One team computes a block of query rows against one range of keys. With Partial, it writes the
/// normalised partial output and lse of its key split to o(split, ...) and lse(split, ...), in the
/// format merge_attention() takes; otherwise the final o and lse.
template <class ExecSpace, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct AttentionKernel {
  using T = typename OV::non_const_value_type;
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using scratch_space = typename ExecSpace::scratch_memory_space;
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
  int scratch_level;

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

  /// Query head and row of a block's row: row rho of K/V head hk is query row rho % Nq of head
  /// hk * group + rho / Nq.
  struct Row {
    index_t h, i;
  };
  KOKKOS_INLINE_FUNCTION Row row_of(index_t hk, index_t rho) const {
    return Row{hk * p.group + rho / p.Nq, rho % p.Nq};
  }

  KOKKOS_INLINE_FUNCTION void store(index_t split, index_t b, Row row, const T* o_row, const SoftmaxState<T>& st) const {
    const T inv_sum = SoftmaxNormalizer<T>(st).inv_sum;
    for (index_t d = 0; d < p.Dv; ++d) {
      if constexpr (Partial) o(split, b, row.h, row.i, d) = o_row[d] * inv_sum;
      else o(b, row.h, row.i, d) = o_row[d] * inv_sum;
    }
    if (has_lse) {
      if constexpr (Partial) lse(split, b, row.h, row.i) = st.logsumexp();
      else lse(b, row.h, row.i) = st.logsumexp();
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    index_t item = team.league_rank();
    const index_t split = item % p.nsplits;
    item /= p.nsplits;
    const index_t qb = item % p.nqb;
    item /= p.nqb;
    const index_t hk = item % p.Hk;
    const index_t b = item / p.Hk;
    const index_t rho0 = qb * p.bq;
    const index_t nrows = p.group * p.Nq - rho0 < p.bq ? p.group * p.Nq - rho0 : p.bq;
    const index_t shift = p.Nk - p.Nq;  // causal: query i sees keys j <= i + shift
    const index_t kb = split * p.split_len;
    index_t ke = kb + p.split_len < p.Nk ? kb + p.split_len : p.Nk;
    if (p.causal) {  // the block's last row that sees the most keys; no tiles past its diagonal
      const index_t last_i = rho0 / p.Nq == (rho0 + nrows - 1) / p.Nq ? (rho0 + nrows - 1) % p.Nq : p.Nq - 1;
      if (last_i + shift + 1 < ke) ke = last_i + shift + 1;
    }
#if KFLASH_IMPL_ON_HOST
    if constexpr (is_host) {
      host_block(team, b, hk, rho0, nrows, kb, ke, split);
      return;
    }
#endif
    generic_block(team, b, hk, rho0, nrows, kb, ke, split);
  }

  /// Host: staging into scratch here, the tile arithmetic in the compiled tile kernel.
  void host_block(const member_type& team, index_t b, index_t hk, index_t rho0, index_t nrows, index_t kb,
                  index_t ke, index_t split) const {
    const auto& scratch = team.team_scratch(scratch_level);
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
    for (index_t r = 0; r < nrows; ++r) store(split, b, row_of(hk, rho0 + r), &os(r, 0), st(r));
  }

  /// Devices: one thread of the team per query row.
  KOKKOS_INLINE_FUNCTION void generic_block(const member_type& team, index_t b, index_t hk, index_t rho0,
                                           index_t nrows, index_t kb, index_t ke, index_t split) const {
    const index_t shift = p.Nk - p.Nq;
    const auto& scratch = team.team_scratch(scratch_level);
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
                         [&](index_t r) { store(split, b, row_of(hk, rho0 + r), &os(r, 0), st(r)); });
  }
};

/// Merges S partial results over disjoint key sets: o(b, h, i, :) and lse(b, h, i) from
/// o_parts(s, b, h, i, :) and lse_parts(s, b, h, i), with the SoftmaxState merge.
template <class OP, class LP, class OV, class LV>
struct MergeKernel {
  using T = typename OV::non_const_value_type;
  OP o_parts;
  LP lse_parts;
  OV o;
  LV lse;
  bool has_lse;
  index_t S, H, N, Dv;

  KOKKOS_INLINE_FUNCTION void operator()(index_t item) const {
    const index_t i = item % N;
    const index_t h = (item / N) % H;
    const index_t b = item / (N * H);
    for (index_t d = 0; d < Dv; ++d) o(b, h, i, d) = T(0);
    SoftmaxState<T> st = SoftmaxState<T>::identity();
    for (index_t s = 0; s < S; ++s) {
      // A part with log-sum-exp x holds (m, l) = (x, 1), whatever its own maximum was.
      T fa, fb;
      st.merge(SoftmaxState<T>::of(lse_parts(s, b, h, i)), fa, fb);
      for (index_t d = 0; d < Dv; ++d) o(b, h, i, d) = o(b, h, i, d) * fa + fb * o_parts(s, b, h, i, d);
    }
    const T inv = SoftmaxNormalizer<T>(st).inv_sum;
    for (index_t d = 0; d < Dv; ++d) o(b, h, i, d) *= inv;
    if (has_lse) lse(b, h, i) = st.logsumexp();
  }
};

template <class ExecSpace, class OP, class LP, class OV, class LV>
void run_merge(const ExecSpace& exec, const OP& o_parts, const LP& lse_parts, const OV& o, const LV& lse,
               bool has_lse) {
  const index_t S = o_parts.extent(0), B = o.extent(0), H = o.extent(1), N = o.extent(2),
                Dv = o.extent(3);
  if (B * H * N == 0) return;
  Kokkos::parallel_for("kflash::merge_attention", Kokkos::RangePolicy<ExecSpace>(exec, 0, B * H * N),
                       MergeKernel<OP, LP, OV, LV>{o_parts, lse_parts, o, lse, has_lse, S, H, N, Dv});
}

template <class ExecSpace>
AttentionPlan plan_attention(const ExecSpace& exec, AttentionPlan p, const AttentionOptions& opt) {
  using traits = AttentionTraits<ExecSpace>;
  p.bq = traits::block_q;
  p.bk = traits::block_k;
  p.group = p.Hq / p.Hk;
  p.nqb = (p.group * p.Nq + p.bq - 1) / p.bq;
  p.dvp = (p.Dv + host::attention_pad - 1) / host::attention_pad * host::attention_pad;
  const index_t items = p.B * p.Hk * p.nqb;
  const index_t threads = exec.concurrency() > 0 ? index_t(exec.concurrency()) : 1;
  const index_t teams_available = traits::is_host ? threads : threads / p.bq;
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

template <class ExecSpace, class QV, class KV, class VV, class OV, class LV>
void attention_impl(const ExecSpace& exec, const QV& q, const KV& k, const VV& v, const OV& o,
                    const AttentionOptions& opt, const LV& lse, bool has_lse) {
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
  require_rank(fn, "q", q, 4, 4);
  require_rank(fn, "k", k, 4, 4);
  require_rank(fn, "v", v, 4, 4);
  require_rank(fn, "o", o, 4, 4);
  if (has_lse) require_rank(fn, "lse", lse, 3, 3);
  if constexpr (view_rank<QV> == 4 && view_rank<KV> == 4 && view_rank<VV> == 4 && view_rank<OV> == 4 &&
                view_rank<LV> == 3) {
    auto fail = [&](const std::string& what) { throw_invalid_argument(fn, what); };
    const std::string shapes = " (" + describe("q", q) + ", " + describe("k", k) + ", " + describe("v", v) + ")";
    AttentionPlan p;
    p.B = q.extent(0), p.Hq = q.extent(1), p.Nq = q.extent(2), p.D = q.extent(3);
    p.Hk = k.extent(1), p.Nk = k.extent(2), p.Dv = v.extent(3);
    p.causal = opt.causal;
    if (index_t(k.extent(0)) != p.B || index_t(v.extent(0)) != p.B)
      fail("q, k and v must have the same batch extent B" + shapes);
    if (index_t(v.extent(1)) != p.Hk) fail("k and v must have the same number of heads Hk" + shapes);
    if (p.Hk == 0 || p.Hq % p.Hk != 0)
      fail("the query heads Hq must be a multiple of the key/value heads Hk" + shapes);
    if (index_t(k.extent(3)) != p.D) fail("q and k must have the same head dimension D" + shapes);
    if (index_t(v.extent(2)) != p.Nk) fail("k and v must have the same number of keys Nk" + shapes);
    if (p.D < 1 || p.Dv < 1) fail("head dimensions D and Dv must be at least 1" + shapes);
    if (index_t(o.extent(0)) != p.B || index_t(o.extent(1)) != p.Hq || index_t(o.extent(2)) != p.Nq ||
        index_t(o.extent(3)) != p.Dv)
      fail("argument '" + describe("o", o) + "' must have extents (B, Hq, Nq, Dv)" + shapes);
    if (has_lse && (index_t(lse.extent(0)) != p.B || index_t(lse.extent(1)) != p.Hq ||
                    index_t(lse.extent(2)) != p.Nq))
      fail("argument '" + describe("lse", lse) + "' must have extents (B, Hq, Nq)" + shapes);
    if (!std::isfinite(opt.scale)) fail("options.scale must be finite, got " + std::to_string(opt.scale));
    if (opt.num_splits < 0) fail("options.num_splits must be >= 0, got " + std::to_string(opt.num_splits));
    if (p.B * p.Hq * p.Nq == 0) return;

    const T scale = static_cast<T>(opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(p.D)));
    p = plan_attention(exec, p, opt);
    const std::size_t league = std::size_t(p.B * p.Hk * p.nqb * p.nsplits);
    const int team_size = AttentionTraits<ExecSpace>::is_host ? 1 : int(p.bq);

    auto launch = [&](const char* label, auto kernel) {
      using Kernel = decltype(kernel);
      const std::size_t bytes = Kernel::scratch_bytes(p);
      kernel.scratch_level =
          bytes <= std::size_t(Kokkos::TeamPolicy<ExecSpace>::scratch_size_max(0)) ? 0 : 1;
      Kokkos::parallel_for(label,
                           Kokkos::TeamPolicy<ExecSpace>(exec, int(league), team_size, 1)
                               .set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes)),
                           kernel);
    };
    if (p.nsplits == 1) {
      using Kernel = AttentionKernel<ExecSpace, QV, KV, VV, OV, LV, false>;
      launch("kflash::attention", Kernel{q, k, v, o, lse, has_lse, p, scale, 0});
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
    using Kernel = AttentionKernel<ExecSpace, QV, KV, VV, Parts, PartsLse, true>;
    launch("kflash::attention split_kv",
           Kernel{q, k, v, o_parts, lse_parts, true, p, scale, 0});
    run_merge(exec, o_parts, lse_parts, o, lse, has_lse);
    exec.fence();  // the workspace must outlive the kernels
  }
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
