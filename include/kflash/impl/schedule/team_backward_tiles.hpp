// What attention_backward's two device team kernels (team_attention_backward.hpp) share: the
// scratch layout of a team's tiles, the staging of q and dout rows and of K and V keys (by 16-byte
// chunks held in registers where the rows allow, element by element elsewhere), and the P and dS of a
// block pair by register blocks and the tile layer's pair_grad.
#pragma once

#include <kflash/impl/schedule/attention_backward.hpp>
#include <type_traits>

namespace kflash::impl {

/// Where a team of Shape keeps its tiles: q and dout of BQ rows, K and V of BK keys (DV columns, zero
/// past D or Dv), P and dS of the block pair, then each staged row's lse and D; each 16-byte aligned.
/// Also read by tests/cuda/device_footprints.cpp, which prints each shape's footprint for the static
/// gates.
template <class Shape>
struct TeamBackwardScratch {
  using T = typename Shape::value_type;
  static constexpr int BQ = Shape::BQ, BK = Shape::BK, DV = Shape::DV, W = Chunk<T>::n;
  /// Leading dimension of the staged rows of q, dout, K and V: one chunk past DV, so that the rows a
  /// warp reads at once start on different banks.
  static constexpr int LD = DV + W;
  /// Leading dimension of the rows of P and dS (BK keys), one chunk past for the same reason.
  static constexpr int LP = BK + W;
  static_assert(DV % W == 0, "kflash: a team backward shape's width must be whole chunks");

  /// Byte offsets in a team's block.
  struct Layout {
    std::size_t qs, dos, ks, vs, ps, dss, lse, delta, end;
  };
  KOKKOS_INLINE_FUNCTION static constexpr std::size_t after(std::size_t at, std::size_t bytes) {
    return at + (bytes + 15) / 16 * 16;
  }
  KOKKOS_INLINE_FUNCTION static constexpr Layout layout() {
    Layout l{};
    l.dos = after(l.qs, sizeof(T) * BQ * LD);
    l.ks = after(l.dos, sizeof(T) * BQ * LD);
    l.vs = after(l.ks, sizeof(T) * BK * LD);
    l.ps = after(l.vs, sizeof(T) * BK * LD);
    l.dss = after(l.ps, sizeof(T) * BQ * LP);
    l.lse = after(l.dss, sizeof(T) * BQ * LP);
    l.delta = after(l.lse, sizeof(T) * BQ);
    l.end = after(l.delta, sizeof(T) * BQ);
    return l;
  }
  /// The block and the 15 bytes its alignment may take.
  static constexpr std::size_t bytes() { return layout().end + 15; }
};

/// What both kernels share: the pairs, the staging of rows and keys, and the P and dS of a block
/// pair.
template <class ExecSpace, class Shape, class Pairs>
struct TeamBackwardBase {
  using T = typename Pairs::T;
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = TeamBackwardScratch<Shape>;
  static_assert(std::is_same<typename Shape::value_type, T>::value, "kflash: shape and views disagree on T");
  static constexpr int BQ = Shape::BQ, BK = Shape::BK, TM = Shape::TM, TN = Shape::TN;
  static constexpr int RG = Shape::RG, KG = Shape::KG, DV = Shape::DV, W = Chunk<T>::n;
  static constexpr int LD = Scratch::LD, LP = Scratch::LP;

  Pairs pairs;
  int scratch_level = 0;
  /// Whether the rows of q, dout, k and v are whole aligned chunks (rows_in_chunks): they are then
  /// staged by 16-byte loads.
  bool chunked = false;

  static constexpr std::size_t scratch_bytes() { return Scratch::bytes(); }

  /// A team's tiles in its scratch block.
  struct Tiles {
    T *qs, *dos, *ks, *vs, *ps, *dss, *lse, *delta;
  };
  /// Each branch names its level as a constant (see AttentionKernelBase::scratch_block).
  KOKKOS_INLINE_FUNCTION Tiles tiles(const member_type& team) const {
    constexpr typename Scratch::Layout l = Scratch::layout();
    char* const block = static_cast<char*>(scratch_level == 0 ? team.team_scratch(0).get_shmem_aligned(l.end, 16, 0)
                                                              : team.team_scratch(1).get_shmem_aligned(l.end, 16, 1));
    const auto at = [&](std::size_t offset) { return reinterpret_cast<T*>(block + offset); };
    return Tiles{at(l.qs), at(l.dos), at(l.ks), at(l.vs), at(l.ps), at(l.dss), at(l.lse), at(l.delta)};
  }

  KOKKOS_INLINE_FUNCTION static int block_row(int id, int a) { return id / KG + RG * a; }
  KOKKOS_INLINE_FUNCTION static int tile_key(int id, int c) { return id % KG + KG * c; }

  /// Query head and row of row rho of K/V head hk's group (nq rows a head), as the forward's.
  struct Row {
    index_t h, i;
  };
  KOKKOS_INLINE_FUNCTION Row row_of(index_t hk, index_t nq, index_t rho) const {
    return Row{hk * pairs.p.group + rho / nq, rho % nq};
  }
  /// Whether the block mask hides every pair of the rows [rho0, rho0 + nr) of K/V head hk's group
  /// with the keys [t0, t0 + nk) (the block pair is then skipped).
  KOKKOS_INLINE_FUNCTION bool pairs_hidden(index_t b, index_t hk, index_t nq, index_t rho0, index_t nr, index_t t0,
                                           index_t nk) const {
    return pairs.terms.block_mask.hides(b, hk * pairs.p.group, nq, rho0, nr, t0, nk);
  }

  /// Two operands' tiles of Rows rows (q and dout, or K and V) as a thread holds them between their
  /// loads and their stores, by 16-byte chunks: the thread's chunks are rank, rank + team_size, .. of
  /// the tile's Rows x DV / W. The loads of the next tile are issued before the products of the
  /// current one (register double buffering), where the rows are in chunks.
  template <int Rows>
  struct Held {
    static constexpr int chunks = Rows * (DV / W);
    static constexpr int count = (chunks + Shape::team_size - 1) / Shape::team_size;
    Chunk<T> a[count], b[count];
  };
  /// Loads rows r < n of two operands (at_a(r, d), d < wa; at_b(r, d), d < wb) into h, zero past n
  /// and past the widths. Consecutive threads read consecutive chunks of a row.
  template <int Rows, class AtA, class AtB>
  KOKKOS_INLINE_FUNCTION void load(const member_type& team, Held<Rows>& h, int n, int wa, const AtA& at_a, int wb,
                                   const AtB& at_b) const {
    constexpr int C = DV / W;
    KFLASH_IMPL_UNROLL for (int u = 0; u < Held<Rows>::count; ++u) {
      const int idx = team.team_rank() + u * team.team_size(), r = idx / C, c = (idx - r * C) * W;
      h.a[u] = r < n && c < wa ? load_chunk(&at_a(r, c)) : Chunk<T>{};
      h.b[u] = r < n && c < wb ? load_chunk(&at_b(r, c)) : Chunk<T>{};
    }
  }
  /// Stores the chunks load gave h into da and db (rows LD apart).
  template <int Rows>
  KOKKOS_INLINE_FUNCTION void store(const member_type& team, const Held<Rows>& h, T* da, T* db) const {
    constexpr int C = DV / W;
    KFLASH_IMPL_UNROLL for (int u = 0; u < Held<Rows>::count; ++u) {
      const int idx = team.team_rank() + u * team.team_size(), r = idx / C, c = (idx - r * C) * W;
      if (idx >= Held<Rows>::chunks) break;
      store_chunk(da + r * LD + c, h.a[u]);
      store_chunk(db + r * LD + c, h.b[u]);
    }
  }
  /// Stages `rows` rows into dst element by element (rows not in chunks): row r < n from at(r, d),
  /// d < width, zero past n and past width.
  template <class At>
  KOKKOS_INLINE_FUNCTION void stage(const member_type& team, T* dst, int rows, int n, int width, const At& at) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * DV), [&](int idx) {
      const int r = idx / DV, d = idx - r * DV;
      dst[r * LD + d] = r < n && d < width ? T(at(r, d)) : T(0);
    });
  }

  /// Loads the rows [rho0, rho0 + nr) of K/V head hk's group, q and dout, into h.
  KOKKOS_INLINE_FUNCTION void load_rows(const member_type& team, Held<BQ>& h, index_t b, index_t hk, index_t nq,
                                        index_t rho0, int nr) const {
    const auto& pr = pairs;
    load(
        team, h, nr, int(pr.p.D),
        [&](int r, int d) -> const auto& {
          const Row x = row_of(hk, nq, rho0 + r);
          return pr.q(b, x.h, x.i, d);
        },
        int(pr.p.Dv),
        [&](int r, int d) -> const auto& {
          const Row x = row_of(hk, nq, rho0 + r);
          return pr.dout(b, x.h, x.i, d);
        });
  }
  /// Loads the keys [t0, t0 + nk) of K/V head hk, K and V, into h.
  KOKKOS_INLINE_FUNCTION void load_keys(const member_type& team, Held<BK>& h, index_t b, index_t hk, index_t t0,
                                        int nk) const {
    const auto& pr = pairs;
    load(
        team, h, nk, int(pr.p.D), [&](int j, int d) -> const auto& { return pr.k(b, hk, t0 + j, d); },
        int(pr.p.Dv), [&](int j, int d) -> const auto& { return pr.v(b, hk, t0 + j, d); });
  }
  /// Stages the rows [rho0, rho0 + nr) of K/V head hk's group: q and dout (by chunks where the
  /// rows are in chunks, else element by element), then their lse and D.
  KOKKOS_INLINE_FUNCTION void stage_rows(const member_type& team, const Tiles& t, index_t b, index_t hk, index_t nq,
                                         index_t rho0, int nr) const {
    const auto& pr = pairs;
    if (chunked) {
      Held<BQ> h;
      load_rows(team, h, b, hk, nq, rho0, nr);
      store(team, h, t.qs, t.dos);
    } else {
      stage(
          team, t.qs, BQ, nr, int(pr.p.D), [&](int r, int d) -> const auto& {
            const Row x = row_of(hk, nq, rho0 + r);
            return pr.q(b, x.h, x.i, d);
          });
      stage(
          team, t.dos, BQ, nr, int(pr.p.Dv), [&](int r, int d) -> const auto& {
            const Row x = row_of(hk, nq, rho0 + r);
            return pr.dout(b, x.h, x.i, d);
          });
    }
    stage_stats(team, t, b, hk, nq, rho0, nr);
  }
  /// Stages the lse and D of the rows [rho0, rho0 + nr) of K/V head hk's group.
  KOKKOS_INLINE_FUNCTION void stage_stats(const member_type& team, const Tiles& t, index_t b, index_t hk, index_t nq,
                                          index_t rho0, int nr) const {
    const auto& pr = pairs;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](int r) {
      const Row x = row_of(hk, nq, rho0 + (r < nr ? r : 0));
      t.lse[r] = r < nr ? T(pr.lse(b, x.h, x.i)) : T(0);
      t.delta[r] = r < nr ? T(pr.delta(b, x.h, x.i)) : T(0);
    });
  }
  /// Stages the keys [t0, t0 + nk) of K/V head hk: K and V (as stage_rows).
  KOKKOS_INLINE_FUNCTION void stage_keys(const member_type& team, const Tiles& t, index_t b, index_t hk, index_t t0,
                                         int nk) const {
    const auto& pr = pairs;
    if (chunked) {
      Held<BK> h;
      load_keys(team, h, b, hk, t0, nk);
      store(team, h, t.ks, t.vs);
    } else {
      stage(
          team, t.ks, BK, nk, int(pr.p.D), [&](int j, int d) -> const auto& { return pr.k(b, hk, t0 + j, d); });
      stage(
          team, t.vs, BK, nk, int(pr.p.Dv), [&](int j, int d) -> const auto& { return pr.v(b, hk, t0 + j, d); });
    }
  }

  /// P and dS (times the scale) of the staged block pair, rows [rho0, rho0 + nr) of K/V head hk's
  /// group against keys [t0, t0 + nk), into ps and dss: the scores and dP by register blocks, each
  /// pair through pair_grad; 0 for the pairs the row does not see and past the rows and keys.
  KOKKOS_INLINE_FUNCTION void pair_block(const member_type& team, const Tiles& t, index_t b, index_t hk, index_t nq,
                                         const KeyMask& mask, index_t rho0, int nr, index_t t0, int nk) const {
    const auto& pr = pairs;
    const int Dp = (int(pr.p.D) + W - 1) / W * W, Dvp = (int(pr.p.Dv) + W - 1) / W * W;
    const int rank = team.team_rank(), nt = team.team_size();
    KFLASH_IMPL_UNROLL for (int bb = 0; bb < Shape::blocks; ++bb) {
      const int id = rank + bb * nt;
      T s[TM][TN], dp[TM][TN];
      KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) s[a][c] =
          dp[a][c] = T(0);
      for (int d = 0; d < Dp; d += W) {
        Chunk<T> qa[TM], kb[TN];
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) qa[a] = load_chunk(t.qs + block_row(id, a) * LD + d);
        KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) kb[c] = load_chunk(t.ks + tile_key(id, c) * LD + d);
        KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
            KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) s[a][c] += qa[a].x[e] * kb[c].x[e];
      }
      for (int d = 0; d < Dvp; d += W) {
        Chunk<T> da[TM], vb[TN];
        KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) da[a] = load_chunk(t.dos + block_row(id, a) * LD + d);
        KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) vb[c] = load_chunk(t.vs + tile_key(id, c) * LD + d);
        KFLASH_IMPL_UNROLL for (int e = 0; e < W; ++e) KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a)
            KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) dp[a][c] += da[a].x[e] * vb[c].x[e];
      }
      KFLASH_IMPL_UNROLL for (int a = 0; a < TM; ++a) {
        const int r = block_row(id, a);
        const bool real = r < nr;
        const Row row = row_of(hk, nq, rho0 + (real ? r : 0));
        const KeyRange keys = real ? mask.keys_of(row.i) : KeyRange{};
        const RowAt at{b, row.h, row.i, row.i + mask.shift};
        KFLASH_IMPL_UNROLL for (int c = 0; c < TN; ++c) {
          const int key = tile_key(id, c);
          const index_t j = t0 + key;
          T pv = T(0), ds = T(0);
          if (key < nk && keys.contains(j) && !pr.block_hidden(b, row.h, row.i, j)) {
            const auto g = pair_grad(pr.terms.stage, pr.terms.scale * s[a][c], at, j, t.lse[r], dp[a][c], t.delta[r]);
            if (g.visible) pv = g.p, ds = g.draw * pr.terms.scale;
          }
          t.ps[r * LP + key] = pv;
          t.dss[r * LP + key] = ds;
        }
      }
    }
  }
};

}  // namespace kflash::impl
