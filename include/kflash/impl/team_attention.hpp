// Attention's team schedule for devices: a team owns a block of query rows, each K/V tile is
// staged once per team in scratch memory, and every thread keeps a register block of the tile's
// scores S and of the running output O.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/rows.hpp>

#include <type_traits>

namespace kflash::impl {

/// The shapes of one attention call and the schedule's decisions for it.
struct AttentionPlan {
  index_t B = 0, Hq = 0, Hk = 0, Nq = 0, Nk = 0, D = 0, Dv = 0;
  bool causal = false;
  index_t group = 1;       // query heads per K/V head
  index_t bq = 0, bk = 0;  // rows per block, keys per tile
  index_t nqb = 0;         // blocks per K/V head: group * Nq rows
  index_t dvp = 0;         // host: Dv padded for the tile kernel
  index_t nsplits = 1, split_len = 0;
  index_t team_size = 1;   // threads per team
  int team_dv = 0;         // devices: the team shape's output width (0: one thread per row)
  bool team_narrow = false;  // devices: the team shape of 8-row blocks
};

/// The register blocking of the team schedule. A block has BQ query rows, a tile BK keys. The
/// threads form RG = BQ / TM row groups times KG = BK / TN key groups: thread (g, k) computes the
/// TM x TN scores of rows g*TM.. and keys k*TN.., and keeps O of the same rows and of the columns
/// k*TNO.. (TNO = DV / KG) in registers, so Dv <= DV. A team of fewer threads than blocks (the host
/// lane of the tests) gives each thread `Blocks` of them.
template <class T, int BQ_, int BK_, int TM_, int TN_, int DV_, int Blocks_ = 1>
struct TeamAttentionShape {
  using value_type = T;
  static constexpr int BQ = BQ_, BK = BK_, TM = TM_, TN = TN_, DV = DV_;
  static constexpr int RG = BQ / TM;
  static constexpr int KG = BK / TN;
  static constexpr int TNO = DV / KG;
  static constexpr int threads = RG * KG;
  static constexpr int blocks = Blocks_;
  static constexpr int team_size = threads / blocks;
  static_assert(BQ % TM == 0 && BK % TN == 0 && DV % KG == 0 && threads % blocks == 0,
                "kflash: a team attention shape must tile its block, its tile and its output evenly");
};

/// The parts of an attention kernel that do not depend on the schedule: which rows, keys and split
/// a team's league rank stands for, and where a row's output goes. With Partial, a key split's
/// normalised output and lse go to o(split, ...) and lse(split, ...), in the format
/// merge_attention() takes; otherwise to the final o and lse.
template <class QV, class KV, class VV, class OV, class LV, bool Partial>
struct AttentionKernelBase {
  using T = typename OV::non_const_value_type;

  QV q;
  KV k;
  VV v;
  OV o;
  LV lse;
  bool has_lse;
  AttentionPlan p;
  T scale;
  int scratch_level;

  /// Query head and row of a block's row: row rho of K/V head hk is query row rho % Nq of head
  /// hk * group + rho / Nq.
  struct Row {
    index_t h, i;
  };
  KOKKOS_INLINE_FUNCTION Row row_of(index_t hk, index_t rho) const {
    return Row{hk * p.group + rho / p.Nq, rho % p.Nq};
  }

  /// A team's work: rows [rho0, rho0 + nrows) of K/V head hk of batch b, against keys [kb, ke).
  struct Block {
    index_t b, hk, rho0, nrows, kb, ke, split;
  };
  KOKKOS_INLINE_FUNCTION Block block_of(index_t item) const {
    Block w;
    w.split = item % p.nsplits;
    item /= p.nsplits;
    const index_t qb = item % p.nqb;
    item /= p.nqb;
    w.hk = item % p.Hk;
    w.b = item / p.Hk;
    w.rho0 = qb * p.bq;
    w.nrows = p.group * p.Nq - w.rho0 < p.bq ? p.group * p.Nq - w.rho0 : p.bq;
    w.kb = w.split * p.split_len;
    w.ke = w.kb + p.split_len < p.Nk ? w.kb + p.split_len : p.Nk;
    if (p.causal) {  // the block's last row that sees the most keys; no tiles past its diagonal
      const index_t last_i = w.rho0 / p.Nq == (w.rho0 + w.nrows - 1) / p.Nq ? (w.rho0 + w.nrows - 1) % p.Nq
                                                                             : p.Nq - 1;
      const index_t end = last_i + (p.Nk - p.Nq) + 1;
      if (end < w.ke) w.ke = end;
    }
    return w;
  }

  /// The last key query row i sees.
  KOKKOS_INLINE_FUNCTION index_t last_key(index_t i) const { return p.causal ? i + (p.Nk - p.Nq) : p.Nk - 1; }

  KOKKOS_INLINE_FUNCTION T& out(const Block& w, Row row, index_t d) const {
    if constexpr (Partial) return o(w.split, w.b, row.h, row.i, d);
    else return o(w.b, row.h, row.i, d);
  }
  KOKKOS_INLINE_FUNCTION void store_lse(const Block& w, Row row, const SoftmaxState<T>& st) const {
    if (!has_lse) return;
    if constexpr (Partial) lse(w.split, w.b, row.h, row.i) = st.logsumexp();
    else lse(w.b, row.h, row.i) = st.logsumexp();
  }
};

/// Attention over team-of-threads blocks with register-blocked products (see TeamAttentionShape).
/// Per K/V tile: stage K (transposed) and V; S = Q K^T by register blocks, masked; the tile's row
/// maxima across key groups; the weights exp(s - m_tile) and their partial sums; each row's state
/// merged with the tile's state (the monoid), giving the factors fa, fb; O = fa O + fb P V.
template <class ExecSpace, class Shape, class QV, class KV, class VV, class OV, class LV, bool Partial>
struct TeamAttentionKernel : AttentionKernelBase<QV, KV, VV, OV, LV, Partial> {
  using Base = AttentionKernelBase<QV, KV, VV, OV, LV, Partial>;
  using typename Base::T;
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using scratch_space = typename ExecSpace::scratch_memory_space;
  using Tile = Kokkos::View<T**, Kokkos::LayoutRight, scratch_space, Kokkos::MemoryUnmanaged>;
  using States = Kokkos::View<SoftmaxState<T>*, scratch_space, Kokkos::MemoryUnmanaged>;
  static_assert(std::is_same<typename Shape::value_type, T>::value, "kflash: shape and views disagree on T");

  static constexpr int BQ = Shape::BQ, BK = Shape::BK, TM = Shape::TM, TN = Shape::TN;
  static constexpr int KG = Shape::KG, TNO = Shape::TNO, DV = Shape::DV;
  // Leading dimensions of the transposed tiles, odd so that transposing stores hit distinct banks.
  static constexpr index_t LQ = BQ + 1, LK = BK + 1;

  static std::size_t scratch_bytes(const AttentionPlan& p) {
    return Tile::shmem_size(p.D, LQ) + Tile::shmem_size(p.D, LK) + Tile::shmem_size(BK, DV) +
           Tile::shmem_size(BK, LQ) + Tile::shmem_size(2 * KG, BQ) + Tile::shmem_size(2, BQ) +
           States::shmem_size(BQ);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const typename Base::Block w = this->block_of(team.league_rank());
    const auto& p = this->p;
    const index_t D = p.D, Dv = p.Dv;
    const auto& scratch = team.team_scratch(this->scratch_level);
    const Tile qt(scratch, D, LQ);    // scaled Q, transposed: qt(d, r)
    const Tile kt(scratch, D, LK);    // the tile's K, transposed: kt(d, j)
    const Tile vs(scratch, BK, DV);   // the tile's V, zero past Dv and past the tile's keys
    const Tile pt(scratch, BK, LQ);   // the tile's weights, transposed: pt(j, r)
    const Tile part(scratch, 2 * KG, BQ);  // per key group: row maxima, then row sums
    const Tile fac(scratch, 2, BQ);        // per row: fa, fb of the latest merge
    const States st(scratch, BQ);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * D), [&](index_t idx) {
      const index_t r = idx / D, d = idx % D;
      T x = T(0);
      if (r < w.nrows) {
        const auto row = this->row_of(w.hk, w.rho0 + r);
        x = this->q(w.b, row.h, row.i, d) * this->scale;
      }
      qt(d, r) = x;
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](index_t r) { st(r) = SoftmaxState<T>::identity(); });

    const int rank = team.team_rank(), nt = team.team_size();
    T o[Shape::blocks][TM][TNO];
    T s[Shape::blocks][TM][TN];
    for (int bb = 0; bb < Shape::blocks; ++bb)
      for (int a = 0; a < TM; ++a)
        for (int c = 0; c < TNO; ++c) o[bb][a][c] = T(0);

    for (index_t t0 = w.kb; t0 < w.ke; t0 += BK) {
      const index_t nk = w.ke - t0 < BK ? w.ke - t0 : BK;
      team.team_barrier();  // the previous tile is no longer read
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * D), [&](index_t idx) {
        const index_t j = idx / D, d = idx % D;
        kt(d, j) = j < nk ? this->k(w.b, w.hk, t0 + j, d) : T(0);
      });
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * DV), [&](index_t idx) {
        const index_t j = idx / DV, c = idx % DV;
        vs(j, c) = j < nk && c < Dv ? this->v(w.b, w.hk, t0 + j, c) : T(0);
      });
      team.team_barrier();

      // Scores of this thread's blocks, masked; each block row's maximum over its TN keys.
      for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt, r0 = id / KG * TM, j0 = id % KG * TN;
        T acc[TM][TN];
        for (int a = 0; a < TM; ++a)
          for (int c = 0; c < TN; ++c) acc[a][c] = T(0);
        for (index_t d = 0; d < D; ++d) {
          T qa[TM], kb[TN];
          for (int a = 0; a < TM; ++a) qa[a] = qt(d, r0 + a);
          for (int c = 0; c < TN; ++c) kb[c] = kt(d, j0 + c);
          for (int a = 0; a < TM; ++a)
            for (int c = 0; c < TN; ++c) acc[a][c] += qa[a] * kb[c];
        }
        for (int a = 0; a < TM; ++a) {
          const index_t last = r0 + a < w.nrows ? this->last_key(this->row_of(w.hk, w.rho0 + r0 + a).i) : p.Nk - 1;
          T m = -infinity<T>();
          for (int c = 0; c < TN; ++c) {
            const index_t j = j0 + c;
            const T x = j < nk && t0 + j <= last ? acc[a][c] : -infinity<T>();
            s[bb][a][c] = x;
            m = x > m ? x : m;
          }
          part(id % KG, r0 + a) = m;
        }
      }
      team.team_barrier();

      // Weights against the tile's row maxima, and their sums per key group.
      for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt, r0 = id / KG * TM, j0 = id % KG * TN;
        for (int a = 0; a < TM; ++a) {
          T m = -infinity<T>();
          for (int g = 0; g < KG; ++g) m = part(g, r0 + a) > m ? part(g, r0 + a) : m;
          T sum = T(0);
          for (int c = 0; c < TN; ++c) {
            const T x = SoftmaxState<T>::weight(s[bb][a][c], m);
            pt(j0 + c, r0 + a) = x;
            sum += x;
          }
          part(KG + id % KG, r0 + a) = sum;
        }
      }
      team.team_barrier();

      // Each row's state absorbs the tile's (the monoid merge); fa and fb rescale O.
      for (index_t r = rank; r < BQ; r += nt) {
        SoftmaxState<T> tile = SoftmaxState<T>::identity();
        for (int g = 0; g < KG; ++g) tile.max = part(g, r) > tile.max ? part(g, r) : tile.max;
        for (int g = 0; g < KG; ++g) tile.add_term(part(KG + g, r));
        SoftmaxState<T> row = st(r);
        T fa, fb;
        row.merge(tile, fa, fb);
        st(r) = row;
        fac(0, r) = fa;
        fac(1, r) = fb;
      }
      team.team_barrier();

      // O = fa O + fb P V on this thread's register blocks.
      for (int bb = 0; bb < Shape::blocks; ++bb) {
        const int id = rank + bb * nt, r0 = id / KG * TM, c0 = id % KG * TNO;
        T fb[TM];
        for (int a = 0; a < TM; ++a) {
          const T fa = fac(0, r0 + a);
          fb[a] = fac(1, r0 + a);
          for (int c = 0; c < TNO; ++c) o[bb][a][c] *= fa;
        }
        for (index_t j = 0; j < nk; ++j) {
          T pa[TM], vb[TNO];
          for (int a = 0; a < TM; ++a) pa[a] = fb[a] * pt(j, r0 + a);
          for (int c = 0; c < TNO; ++c) vb[c] = vs(j, c0 + c);
          for (int a = 0; a < TM; ++a)
            for (int c = 0; c < TNO; ++c) o[bb][a][c] += pa[a] * vb[c];
        }
      }
    }
    team.team_barrier();  // the states of every row are final

    for (int bb = 0; bb < Shape::blocks; ++bb) {
      const int id = rank + bb * nt, r0 = id / KG * TM, c0 = id % KG * TNO;
      for (int a = 0; a < TM; ++a) {
        const index_t r = r0 + a;
        if (r >= w.nrows) continue;
        const auto row = this->row_of(w.hk, w.rho0 + r);
        const SoftmaxState<T> state = st(r);
        const T inv_sum = SoftmaxNormalizer<T>(state).inv_sum;
        for (int c = 0; c < TNO; ++c)
          if (c0 + c < Dv) this->out(w, row, c0 + c) = o[bb][a][c] * inv_sum;
        if (c0 == 0) this->store_lse(w, row, state);
      }
    }
  }
};

}  // namespace kflash::impl
