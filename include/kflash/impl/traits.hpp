// Every tuning knob of kflash's schedules and kernels, in one traits type per execution space:
// ScheduleTraits<ExecSpace>. Host spaces take HostTraits (their contiguous data goes to the compiled
// host kernels of src/host/), device spaces DeviceTraits (the team schedules). The plans read these
// once per call and hand their decisions to the kernels.
#pragma once

#include <kflash/impl/tile/team_lanes.hpp>

#include <type_traits>

namespace kflash::impl {

/// The register blocking of attention's team schedule (schedule/team_attention.hpp). A block has
/// BQ query rows, a tile BK keys. The threads form RG = BQ / TM row groups times KG = BK / TN key
/// groups: thread (g, k) computes the TM x TN scores of rows g, g + RG, .. and keys k, k + KG, ..,
/// and keeps O of the same rows in registers, TNO = DV / KG columns of each in 16-byte chunks
/// k, k + KG, .. (so Dv <= DV). A team of fewer threads than blocks (host teams) gives each thread
/// `Blocks` of them.
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

/// The blocking of attention's warp-product schedule for storage S, 16-bit or fp32 (schedule/warp_attention.hpp):
/// a team of Warps warps owns BQ = 16 Warps query rows, 16 a warp, against tiles of BK keys, Dv <= DV.
/// Each warp's scores (16 x BK) and running output (16 x DV) stay in its lanes' registers, as
/// WarpBlock lays out blocks of 16 x 8. A team of fewer threads than the warps' lanes (host teams)
/// gives each thread `Blocks` of them. Prefetch: K/V chunks are loaded into registers while the team
/// computes (a tile's V during its scores, the next tile's K during P V); without it each tile is
/// loaded and stored at its start, for shapes whose output leaves no registers for the chunks.
template <class S, int Warps_, int BK_, int DV_, int Blocks_ = 1, bool Prefetch_ = true>
struct WarpAttentionShape {
  using storage_type = S;
  using value_type = float;
  static constexpr int warps = Warps_, BQ = 16 * Warps_, BK = BK_, DV = DV_;
  static constexpr int threads = 32 * Warps_;
  static constexpr int blocks = Blocks_;
  static constexpr bool prefetch = Prefetch_;
  static constexpr int team_size = threads / blocks;
  static_assert(BK % 16 == 0 && DV % 16 == 0 && threads % blocks == 0,
                "kflash: a warp attention shape takes tiles and outputs of whole 16-wide blocks");
};

/// Knobs both kinds of space have.
struct CommonTraits {
  /// Work items (teams) wanted per unit of concurrency before rows or keys are split.
  static constexpr index_t items_per_thread = 4;
  /// Parts whose weights a merge team stages in its scratch at a time.
  static constexpr index_t merge_chunk = 256;
  /// Merges of at most this many parts take each column's parts in one thread (no team reduction).
  static constexpr index_t merge_serial_parts = 8;
  /// Query rows per block of attention's per-row schedule.
  static constexpr index_t block_q = 32;
};

/// Host spaces (Serial, OpenMP): a team is one thread; contiguous rows and every attention block go
/// to the compiled host kernels.
struct HostTraits : CommonTraits {
  static constexpr bool is_host = true;
  static constexpr bool host_kernels = true;
  /// Query rows per block of bf16 attention: the products on bf16 pairs (AMX tiles) take each K/V
  /// tile for twice the rows, halving the pairs each row's keys stream through the caches.
  static constexpr index_t block_q_bf16 = 64;
  /// Keys per K/V tile of bf16 attention (a multiple of attention_pad): each tile row's step (its
  /// maximum, reductions and merge) costs the same whatever its keys, and the bf16 products leave
  /// it a larger share of the time than fp32's, so twice block_k's keys halve it per score.
  static constexpr index_t block_k_bf16 = 256;

  // --- Rows (softmax, log_softmax, logsumexp). Strided rows: a team of one thread per row (or
  // chunk), its tiles by plain lanes.
  static constexpr int vector_length = 1;
  static constexpr int row_team_size = 1;
  template <class T, class Member>
  using tile_lanes = ThreadLanes<T, ScalarLanes<T>>;
  /// Elements per tile of a row: a tile's maximum is found first, then its weights.
  static constexpr index_t tile = 512;
  /// A row is split into chunks for several teams only when chunks can be at least this long.
  static constexpr index_t min_chunk = index_t(1) << 15;
  /// Work items of whole rows hold several short rows, about this many elements...
  static constexpr index_t item_elements = index_t(1) << 14;
  /// ... and at least this many rows where there are enough for every thread: the kernels run the
  /// write pass of one long row beside the state pass of the next.
  static constexpr index_t item_rows = 8;
  /// Rows of at most one tile are taken this many at a time (their logs in vectors)...
  static constexpr index_t short_group = 16;
  /// ... softmax's fewer where they would hold more than this many elements (short_rows_group):
  /// the group's weights (in y, or in float for 16-bit rows) are written and read back, and stay in
  /// the L1 cache beside the rows while the next rows stream in.
  static constexpr index_t short_softmax_elements = 1024;
  /// 16-bit rows up to this long go the way of rows of one tile, fewer at a time (down to one):
  /// one pass over each whole row against a guess of its maximum costs less than a tile loop's
  /// per-tile work. The most short_rows' buffer of short_group tiles holds (softmax's weights of a
  /// row, in float). fp32 rows gain nothing in the cache and lose where they stream from memory
  /// (the tile loop's exps overlap the reads).
  static constexpr index_t short_row = 8192;
  static_assert(short_row <= short_group * tile, "kflash: short_rows' buffer must hold a row of short_row");
  /// softmax computes each weight once: rows up to this many bytes, in calls without non-temporal
  /// stores, keep their weights in y and rescale them in place (the row stays in the core's cache).
  static constexpr index_t stored_weights_bytes = index_t(1) << 19;
  /// Other softmax rows up to this many bytes keep them in the team's scratch; longer rows compute
  /// them again in the write pass (one exp more per element).
  static constexpr index_t buffered_weights_bytes = index_t(1) << 23;
  /// The 16-bit gradients widen blocks of this many elements into a float buffer (within L1); the
  /// 16-bit rows' passes read them widened as they load (softmax keeps the weights of rows longer
  /// than a tile in float in the team's scratch up to buffered_weights_bytes).
  static constexpr index_t widened_block = 2048;
  /// Calls whose output has at least this many bytes write their rows of more than one tile with
  /// non-temporal stores: such an output leaves the cache before it is read again, and a plain store
  /// first reads the line it writes.
  static constexpr index_t stream_bytes = index_t(1) << 26;

  // --- Attention.
  /// Keys per K/V tile, a multiple of attention_pad.
  static constexpr index_t block_k = 128;
  /// Keys per split are at least this many when the keys are split automatically.
  static constexpr index_t min_split_keys = 4096;
  /// Columns of the tiles' K transposed, V and O are padded to a multiple of this (with zeros).
  static constexpr index_t attention_pad = 32;
  /// Blocks of at most this many query rows (decoding, GQA groups) read K in place by dot products;
  /// larger blocks stage it transposed once per tile for all their rows.
  static constexpr index_t dot_rows = 8;
  static_assert(block_k % attention_pad == 0 && block_k_bf16 % attention_pad == 0,
                "kflash: block_k and block_k_bf16 must be multiples of attention_pad");
  /// Query rows and keys per block of attention_backward's tiles (a multiple of attention_pad): the
  /// tiles of a block pair, K, V and the accumulators of a block stay in the core's L2 cache.
  static constexpr index_t backward_block = 64;
  static_assert(backward_block % attention_pad == 0, "kflash: backward_block must be a multiple of attention_pad");
  /// attention_backward deals each K/V head's blocks of keys to enough groups for about this many
  /// work items (fewer where there are fewer blocks); each group keeps a partial dq. The number
  /// depends on the shapes alone, so that the sums, and the bits, do not depend on the threads:
  /// hosts with more threads than this idle some of them on calls of few heads.
  static constexpr index_t backward_items = 32;

  // --- Micro-GEMM register blocks of the host kernels, by vector width in bytes: rows x
  // gemm_vectors vectors (8 accumulators of 16 SSE / AVX2 registers, 16 of 32 AVX-512 ones), and
  // the dot-product blocks of K read in place.
  template <int VectorBytes>
  static constexpr int gemm_rows = VectorBytes >= 64 ? 8 : 4;
  static constexpr int gemm_vectors = 2;
  static constexpr int dot_block = 4;
  /// The maximum of a tile runs on this many vectors at a time.
  static constexpr int max_vectors = 4;

  // --- merge_attention and the merge of split keys (schedule/merge_attention.hpp): a team of one
  // thread per row, rows split into column blocks of at least merge_min_columns only where there
  // are fewer rows than threads.
  static constexpr int merge_team_size = 1;
  static constexpr index_t merge_columns = index_t(1) << 30;
  static constexpr index_t merge_min_columns = 16;

  /// No team schedule on hosts: attention's blocks take the host tile kernel.
  template <class T, int DV, bool Narrow>
  using team_shape = void;
  template <class S, int DV, bool Narrow>
  using warp_shape = void;
  template <class T, int DV>
  using backward_shape = void;
};

/// Device spaces: teams of threads and vector lanes (team_rows.hpp, team_attention.hpp).
struct DeviceTraits : CommonTraits {
  static constexpr bool is_host = false;
  static constexpr bool host_kernels = false;

  // --- Rows.
  /// Vector lanes of a thread (a warp on CUDA).
  static constexpr int vector_length = 32;
  /// Rows that no tier below holds: row_team_size threads a row, a tile of tile elements per
  /// thread over its vector lanes.
  static constexpr int row_team_size = 8;
  static constexpr index_t tile = 4 * vector_length;
  template <class T, class Member>
  using tile_lanes = VectorRangeLanes<T, Member>;
  /// Rows of up to lane_cols elements go over a thread's vector lanes, lane_team_size rows a team;
  /// longer rows a team each, of at least min_team_size threads (a multiple of team_multiple, at
  /// most max_team_size) holding team_regs<T> elements each in registers; rows longer than that
  /// are split across teams. max_team_size<T> is the launch bound under which those elements stay in
  /// registers without spilling (64 registers a thread at 1024 threads on CUDA hold 32 floats; 16
  /// doubles need 128, so 512 threads).
  static constexpr index_t lane_cols = 512;
  static constexpr int lane_team_size = 8;
  static constexpr int min_team_size = 64;
  static constexpr int team_multiple = 32;
  template <class T>
  static constexpr int max_team_size = sizeof(T) == 4 ? 1024 : 512;
  template <class T>
  static constexpr int team_regs = sizeof(T) == 4 ? 32 : 16;
  /// Chunks of split rows are at least this long.
  static constexpr index_t min_chunk = index_t(1) << 13;

  // --- Merges: a team of 8 warps per 32 columns of a row (one warp's coalesced loads of a part's
  // columns), the warps taking the parts in turn.
  static constexpr int merge_team_size = 256;
  static constexpr index_t merge_columns = 32;
  static constexpr index_t merge_min_columns = 32;

  // --- Attention: team shapes by value type and output width (Dv <= 64, <= 128), Narrow (blocks of
  // 8 rows) where a K/V head has at most 8 query rows (decoding); the tiles of one team fit the
  // 40 KiB of level-0 scratch Kokkos gives a CUDA team at D = DV. Teams of 4 warps share each K/V
  // tile (fp64 at Dv = 128: one warp), so that at least 8 warps share an SM of sm_80 and sm_90
  // (tests/cuda/static_gates.py checks it). Larger Dv: one thread per row, block_q rows a team,
  // block_k keys a tile.
  static constexpr index_t block_k = 32;
  static constexpr index_t min_split_keys = 1024;
  template <class T, int DV, bool Narrow>
  using team_shape = std::conditional_t<
      sizeof(T) == 4,
      std::conditional_t<Narrow,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 8, 32, 1, 2, 64>,
                                            TeamAttentionShape<T, 8, 16, 1, 1, 128>>,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 64, 32, 4, 4, 64>,
                                            TeamAttentionShape<T, 32, 16, 2, 2, 128>>>,
      std::conditional_t<Narrow,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 8, 16, 1, 1, 64>,
                                            TeamAttentionShape<T, 8, 8, 1, 1, 128>>,
                         std::conditional_t<DV == 64, TeamAttentionShape<T, 32, 16, 2, 2, 64>,
                                            TeamAttentionShape<T, 16, 8, 2, 2, 128>>>>;
  /// The output widths team_shape exists for.
  static constexpr int team_dv_small = 64, team_dv_large = 128;
  /// 16-bit and fp32 storage S at Dv <= 128 take the warp-product schedule instead (FlashAttention 2's
  /// structure on the warp matrix instructions; fp32 as 3xTF32), but for Narrow blocks: a block of
  /// 16 rows a warp would leave half of a decoding head's rows empty. 16-bit: teams of 4 warps, tiles
  /// of 32 keys at Dv <= 64, 16 at Dv <= 128; fp32: tiles of 16 keys, 4 warps at Dv <= 64, 2 at
  /// Dv <= 128 (4 would need 60 KiB of scratch). Q, the tile's K, V and weights fit the level-0
  /// scratch (26-39 KiB at D = DV) and the registers (running output, scores, one tile's K or V
  /// chunks where prefetched) leave 8 warps an SM without spilling (tests/cuda/static_gates.py
  /// checks it). 16-bit in 2 warps on 32 keys at Dv = 128 spilled; fp32 at Dv = 128 spilled with
  /// either matrix's chunks held across a product, so its tiles are not prefetched.
  template <class S, int DV, bool Narrow>
  using warp_shape = std::conditional_t<
      Narrow, void,
      std::conditional_t<is_half_type<S>, WarpAttentionShape<S, 4, DV == 64 ? 32 : 16, DV>,
                         std::conditional_t<std::is_same<S, float>::value,
                                            WarpAttentionShape<S, DV == 64 ? 4 : 2, 16, DV, 1, DV == 64>, void>>>;
  /// attention_backward's team shapes (schedule/team_attention_backward.hpp) by value type and the
  /// wider of D and Dv (<= team_dv_small, <= team_dv_large): q and dout of BQ rows, K and V of BK
  /// keys, P and dS of a block pair, all in a team's level-0 scratch (30-38 KiB). Teams of 4 warps
  /// (fp64 at Dv = 128: 2), whose register blocks (dk and dv: 2 x TN x DV / RG values a thread) and
  /// prefetched tiles (2 x BK x DV / team values) fit the registers that leave 8 warps an SM without
  /// spilling (tests/cuda/static_gates.py checks it; fp64 in 2 warps of 8 x 16 blocks spilled).
  template <class T, int DV>
  using backward_shape = std::conditional_t<
      sizeof(T) == 4,
      std::conditional_t<DV == 64, TeamAttentionShape<T, 16, 32, 2, 2, 64>, TeamAttentionShape<T, 16, 16, 2, 1, 128>>,
      std::conditional_t<DV == 64, TeamAttentionShape<T, 16, 16, 1, 2, 64>, TeamAttentionShape<T, 8, 8, 1, 1, 128>>>;
};

/// The traits of an execution space: host spaces (those that can access HostSpace) HostTraits,
/// others DeviceTraits. A specialisation for a space replaces them (the tests run the device
/// schedules on OpenMP this way).
template <class ExecSpace, class = void>
struct ScheduleTraits
    : std::conditional_t<Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible, HostTraits,
                         DeviceTraits> {};

}  // namespace kflash::impl
