// attention()'s options: a plain struct whose Views are held as OptionViews.
#pragma once

#include <kflash/option_view.hpp>

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
  /// A query that sees no key (Nq > Nk) gets O = 0 and lse = -inf. The same as window_right = 0.
  bool causal = false;
  /// Sliding window, aligned bottom-right like causal: query i sees keys j with
  /// i + Nk - Nq - window_left <= j <= i + Nk - Nq + window_right; -1 leaves that side unbounded.
  int window_left = -1;
  int window_right = -1;
  /// Logit softcap (0: off): a score s = scale * q . k becomes softcap * tanh(s / softcap), before
  /// ALiBi, bias and the masks.
  double softcap = 0;
  /// ALiBi slopes, shaped (Hq) or (B, Hq): query i's score for key j gets -slope * |i + Nk - Nq - j|.
  OptionView alibi_slopes;
  /// Attention sinks, shaped (Hq): one logit per query head that joins each row's denominator as a
  /// key without a value (not scaled or modified); lse includes it. -inf: no sink for that head.
  OptionView sinks;
  /// An additive bias, shaped (B or 1, Hq or 1, Nq, Nk) (1: broadcast), added after ALiBi.
  OptionView bias;
  /// A boolean mask, shaped like bias: false hides the pair (probability exactly 0).
  OptionView mask;
  /// Varlen (packed sequences of their own lengths): with cu_seqlens_q and cu_seqlens_k set, q, k, v
  /// and o are rank-3 Views (total_q, Hq, D), (total_k, Hk, D), (total_k, Hk, Dv), (total_q, Hq, Dv)
  /// and lse is (Hq, total_q). Sequence b has the queries [cu_seqlens_q(b), cu_seqlens_q(b + 1)) and
  /// the keys [cu_seqlens_k(b), cu_seqlens_k(b + 1)); both are (B + 1) std::int32_t or std::int64_t
  /// Views, non-decreasing from 0 to total_q and total_k. Causal, windows and ALiBi align per
  /// sequence; i and j are indices within the sequence (bias and mask: (B or 1, Hq or 1, longest
  /// Nq, longest Nk)).
  OptionView cu_seqlens_q;
  OptionView cu_seqlens_k;
  /// Paged KV cache: with block_table set, k and v are caches (num_pages, page_size, Hk, D) and
  /// (num_pages, page_size, Hk, Dv), page_size >= 16. Sequence b's keys are the first
  /// cache_seqlens(b) slots of the pages block_table(b, 0), block_table(b, 1), ... in order; slots
  /// and table entries past them are never read. block_table (B, max_pages) and cache_seqlens (B) are
  /// std::int32_t or std::int64_t Views. q, o and lse are as in dense attention (Nq queries per
  /// sequence), aligned bottom-right to each sequence's cache_seqlens(b) keys.
  OptionView block_table;
  OptionView cache_seqlens;
  /// A block mask for a user mask_mod (a hint for speed, like FlexAttention's BlockMask): a bool
  /// View shaped (B or 1, Hq or 1, ceil(Nq / block_mask_q), ceil(Nk / block_mask_k)) whose entry
  /// (b, h, qb, kb) is false only if no pair of query rows [qb block_mask_q, (qb + 1) block_mask_q)
  /// and keys [kb block_mask_k, (kb + 1) block_mask_k) is visible. kflash skips the tiles that such
  /// blocks cover; in the other tiles mask_mod decides every pair. make_block_mask() builds an exact
  /// one from a mask_mod. (A block marked false that holds visible pairs makes the result depend on
  /// the schedule's tiles.)
  OptionView block_mask;
  int block_mask_q = 128;
  int block_mask_k = 128;
  /// The schedule; automatic unless forced for testing or tuning.
  AttentionSchedule schedule = AttentionSchedule::automatic;
  /// For split_kv: the number of key splits (0: chosen from the shapes).
  int num_splits = 0;
};

}  // namespace kflash
