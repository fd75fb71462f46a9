// Attention of a fixed set of queries against keys that arrive over time (a growing KV cache,
// chunked prefill, keys from other ranks): each query row's (m, l, O) absorbs every chunk.
#pragma once

#include <kflash/attention.hpp>
#include <kflash/impl/schedule/streams.hpp>
#include <kflash/impl/stream_ranges.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

namespace kflash {

/// Attention of fixed queries q (B, Hq, Nq, D) against key chunks that arrive in any order:
///
///   AttentionStream<float> s(exec, q, Dv, options, query_offset);
///   s.update(exec, k_chunk, v_chunk, key_offset);  // (B, Hk, n, D), (B, Hk, n, Dv): keys
///                                                  // [key_offset, key_offset + n)
///   s.result(exec, o, lse);                        // at any time, over the keys absorbed so far
///
/// Query row i sits at key position query_offset + i: causal, the windows and ALiBi measure from
/// there (dense bottom-right alignment is query_offset = Nk - Nq). Each query row keeps its state
/// (m, l) and unnormalised O in Views; an update runs attention() on the chunk and merges its
/// (O, lse) into them, and merge() absorbs another stream over other keys. result() does not change
/// the stream and gives the same bits each time; before any key it gives O = 0 and lse = -inf (or
/// the sink's logit). Options: scale, causal, window_left/right, softcap, alibi_slopes, sinks (which
/// join each row once, in result()) and schedule; bias, mask, block_mask, varlen and paged options
/// refer to a whole key sequence and are refused. Keys given twice throw std::invalid_argument. Q
/// must stay unchanged while the stream lives (it is read at each update). T may be 16-bit storage
/// (kflash::bhalf_t, kflash::half_t): q, k, v and result()'s o hold it; the rows' states, O, each
/// chunk's results, lse and the option arrays are float, and o is rounded once, in result().
template <class T, class ExecSpace = Kokkos::DefaultExecutionSpace>
class AttentionStream {
  static_assert(std::is_floating_point<T>::value || impl::is_half_type<T>,
                "kflash::AttentionStream: T must be float, double, kflash::bhalf_t or kflash::half_t");

 public:
  using execution_space = ExecSpace;
  using memory_space = typename ExecSpace::memory_space;
  using query_type = Kokkos::View<const T****, Kokkos::LayoutStride, memory_space>;
  /// The arithmetic type (T, or float for 16-bit T): the states, lse and the option arrays.
  using arith_type = impl::arith_t<T>;

  template <class QView>
  AttentionStream(const ExecSpace& exec, const QView& q, std::int64_t dv, const AttentionOptions& options = {},
                  std::int64_t query_offset = 0)
      : q_(checked_queries(q)), options_(options), query_offset_(query_offset) {
    using namespace impl;
    const char* fn = "AttentionStream";
    const CallScope<ExecSpace> call(fn);
    if (dv < 0) throw_invalid_argument(fn, "dv = " + std::to_string(dv) + " must be >= 0");
    const std::pair<const char*, const OptionView*> refused[] = {
        {"options.bias", &options.bias},
        {"options.mask", &options.mask},
        {"options.block_mask", &options.block_mask},
        {"options.cu_seqlens_q", &options.cu_seqlens_q},
        {"options.cu_seqlens_k", &options.cu_seqlens_k},
        {"options.block_table", &options.block_table},
        {"options.cache_seqlens", &options.cache_seqlens}};
    for (const auto& r : refused)
      if (!r.second->empty())
        throw_invalid_argument(fn, std::string(r.first) + " is not supported by streams (it spans the whole key "
                                                          "sequence): use attention()");
    B_ = index_t(q_.extent(0)), Hq_ = index_t(q_.extent(1)), Nq_ = index_t(q_.extent(2)), Dv_ = dv;
    sinks_ = option_array<ExecSpace, arith_type>(options.sinks, "options.sinks", {Hq_}, 0,
                                                 [this] { return "(Hq) = (" + std::to_string(Hq_) + ")"; });
    sinks_view_ = options.sinks;
    options_.sinks = OptionView();  // sinks join each row once, in result()
    const std::size_t rows = std::size_t(B_ * Hq_ * Nq_);
    rows_.state = decltype(rows_.state)(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                                           "kflash::AttentionStream states"), rows);
    rows_.o = decltype(rows_.o)(Kokkos::view_alloc(exec, "kflash::AttentionStream o"), rows, std::size_t(Dv_));
    Kokkos::deep_copy(exec, rows_.state, SoftmaxState<arith_type>::identity());
    o_part_ = decltype(o_part_)(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::AttentionStream chunk o"),
                                B_, Hq_, Nq_, Dv_);
    lse_part_ = decltype(lse_part_)(
        Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::AttentionStream chunk lse"), B_, Hq_, Nq_);
  }
  template <class QView>
  AttentionStream(const QView& q, std::int64_t dv, const AttentionOptions& options = {},
                  std::int64_t query_offset = 0)
      : AttentionStream(impl::initialized_space<ExecSpace>("AttentionStream"), q, dv, options, query_offset) {}

  AttentionStream(const AttentionStream&) = delete;
  AttentionStream& operator=(const AttentionStream&) = delete;
  AttentionStream(AttentionStream&&) = default;
  AttentionStream& operator=(AttentionStream&&) = default;

  /// The number of keys absorbed so far (by updates and merges).
  std::int64_t keys_absorbed() const { return keys_.covered(); }
  std::int64_t query_offset() const { return query_offset_; }

  /// Absorbs keys [key_offset, key_offset + n): k (B, Hk, n, D) and v (B, Hk, n, Dv), any layout,
  /// Hq a multiple of Hk.
  template <class KView, class VView>
  void update(const ExecSpace& exec, const KView& k, const VView& v, std::int64_t key_offset) {
    using namespace impl;
    const char* fn = "AttentionStream::update";
    const CallScope<ExecSpace> call(fn);
    require_rank(fn, "k", k, 4, 4);
    require_rank(fn, "v", v, 4, 4);
    if constexpr (view_rank<KView> == 4 && view_rank<VView> == 4) {
      if (index_t(v.extent(3)) != Dv_)
        throw_invalid_argument(fn, "argument '" + describe("v", v) + "' must have the stream's Dv = " +
                                       std::to_string(Dv_) + " values per key");
      if (k.extent(2) != v.extent(2))
        throw_invalid_argument(fn, "k and v must have the same number of keys, got " + describe("k", k) + " and " +
                                       describe("v", v));
      StreamRanges keys = keys_;
      keys.add(key_offset, key_offset + std::int64_t(k.extent(2)), fn, "keys");
      attention_impl(
          exec, q_, k, v, o_part_, options_, lse_part_, true, NoScoreMod(), NoMaskMod(),
          [&](const AttentionPlan& p, const auto& terms, const auto& seq, const auto& qa, const auto& ka,
              const auto& va, const auto& oa, const auto& la, bool with_lse) {
            AttentionPlan at = p;
            at.at_offset = true;
            at.query_offset = query_offset_ - key_offset;
            dispatch_attention(exec, at, terms, seq, qa, ka, va, oa, la, with_lse);
            Kokkos::parallel_for("kflash::AttentionStream::update absorb",
                                 Kokkos::RangePolicy<ExecSpace>(exec, 0, B_ * Hq_ * Nq_),
                                 AbsorbAttentionChunk<arith_type, memory_space, decltype(o_part_), decltype(lse_part_)>{
                                     rows_, o_part_, lse_part_, Hq_, Nq_});
          },
          "attention", std::true_type{}, std::true_type{});
      keys_ = std::move(keys);
    }
  }

  /// o (B, Hq, Nq, Dv) and lse (B, Hq, Nq), any layout: attention over the keys absorbed so far.
  template <class OView, class LView>
  void result(const ExecSpace& exec, const OView& o, const LView& lse) const {
    result_impl(exec, o, lse, true);
  }
  template <class OView>
  void result(const ExecSpace& exec, const OView& o) const {
    result_impl(exec, o, Kokkos::View<arith_type***, memory_space>(), false);
  }

  /// Absorbs `other`, a stream of the same queries (shapes, query_offset and options) over other
  /// keys; `other` is left as it was.
  void merge(const ExecSpace& exec, const AttentionStream& other) {
    using namespace impl;
    const char* fn = "AttentionStream::merge";
    const CallScope<ExecSpace> call(fn);
    const AttentionOptions& a = options_;
    const AttentionOptions& b = other.options_;
    if (other.B_ != B_ || other.Hq_ != Hq_ || other.Nq_ != Nq_ || other.Dv_ != Dv_ ||
        other.q_.extent(3) != q_.extent(3) || other.query_offset_ != query_offset_ || a.scale != b.scale ||
        a.causal != b.causal || a.window_left != b.window_left || a.window_right != b.window_right ||
        a.softcap != b.softcap)
      throw_invalid_argument(fn, "the streams must have the same query shapes, Dv, query_offset and options, got " +
                                     describe("q", q_) + " Dv " + std::to_string(Dv_) + " offset " +
                                     std::to_string(query_offset_) + " and " + describe("q", other.q_) + " Dv " +
                                     std::to_string(other.Dv_) + " offset " + std::to_string(other.query_offset_));
    StreamRanges keys = keys_;
    keys.add_all(other.keys_, fn, "keys");
    Kokkos::parallel_for("kflash::AttentionStream::merge", Kokkos::RangePolicy<ExecSpace>(exec, 0, B_ * Hq_ * Nq_),
                         AbsorbAttentionRows<arith_type, memory_space>{rows_, other.rows_});
    keys_ = std::move(keys);
  }

  /// The same on the default instance of the execution space.
  template <class KView, class VView>
  void update(const KView& k, const VView& v, std::int64_t key_offset) {
    update(impl::initialized_space<ExecSpace>("AttentionStream::update"), k, v, key_offset);
  }
  template <class OView, class LView>
  void result(const OView& o, const LView& lse) const {
    result(impl::initialized_space<ExecSpace>("AttentionStream::result"), o, lse);
  }
  void merge(const AttentionStream& other) { merge(impl::initialized_space<ExecSpace>("AttentionStream::merge"), other); }

 private:
  using index_t = impl::index_t;

  template <class QView>
  static query_type checked_queries(const QView& q) {
    using namespace impl;
    static_check_view<ExecSpace, QView, false, true>();
    static_assert(std::is_same<std::remove_cv_t<typename QView::value_type>, T>::value,
                  "kflash::AttentionStream: q's value type must be the stream's T");
    require_initialized("AttentionStream");
    require_rank("AttentionStream", "q", q, 4, 4);
    if constexpr (view_rank<QView> == 4) {
      return query_type(q);
    } else {
      return query_type();
    }
  }

  template <class OView, class LView>
  void result_impl(const ExecSpace& exec, const OView& o, const LView& lse, bool has_lse) const {
    using namespace impl;
    const char* fn = "AttentionStream::result";
    const CallScope<ExecSpace> call(fn);
    static_check_view<ExecSpace, OView, true, true>();
    static_check_view<ExecSpace, LView, true>();
    static_assert(std::is_same<typename OView::value_type, T>::value &&
                      std::is_same<typename LView::value_type, arith_type>::value,
                  "kflash::AttentionStream::result: o must hold the stream's T, lse its arithmetic type (T, or "
                  "float where T is 16-bit)");
    require_rank(fn, "o", o, 4, 4);
    require_rank(fn, "lse", lse, 3, 3);
    if constexpr (view_rank<OView> == 4 && view_rank<LView> == 3) {
      const std::size_t want[4] = {std::size_t(B_), std::size_t(Hq_), std::size_t(Nq_), std::size_t(Dv_)};
      bool ok = true;
      for (int d = 0; d < 4; ++d) ok = ok && o.extent(d) == want[d] && (!has_lse || d == 3 || lse.extent(d) == want[d]);
      if (!ok)
        throw_invalid_argument(fn, "expected " + describe_extents("o", 4, want) +
                                       " and lse (B, Hq, Nq), got " + describe("o", o) +
                                       (has_lse ? " and " + describe("lse", lse) : std::string()));
      Kokkos::parallel_for(
          "kflash::AttentionStream::result", Kokkos::RangePolicy<ExecSpace>(exec, 0, B_ * Hq_ * Nq_),
          AttentionRowsResult<arith_type, memory_space, OView, LView>{rows_, sinks_, o, lse, has_lse, Hq_, Nq_});
    }
  }

  query_type q_;
  AttentionOptions options_;  // the options each chunk runs with (sinks removed)
  std::int64_t query_offset_ = 0;
  index_t B_ = 0, Hq_ = 0, Nq_ = 0, Dv_ = 0;
  impl::Strided<arith_type> sinks_;
  OptionView sinks_view_;  // keeps the sinks' memory alive
  impl::AttentionRows<arith_type, memory_space> rows_;
  Kokkos::View<arith_type****, Kokkos::LayoutRight, memory_space> o_part_;  // a chunk's results, in arith_type
  Kokkos::View<arith_type***, Kokkos::LayoutRight, memory_space> lse_part_;
  impl::StreamRanges keys_;
};

}  // namespace kflash
