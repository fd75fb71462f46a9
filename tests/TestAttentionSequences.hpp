// attention() over sequences of their own lengths on TEST_EXECSPACE: varlen (packed q, k, v with
// cu_seqlens) and paged KV caches (block_table, cache_seqlens). Each sequence is checked against the
// long-double reference of that sequence alone, on every schedule and on the team schedule.
#pragma once

#include <SequencesCommon.hpp>

namespace kflash_test {

template <class T>
struct AttentionSequencesTest : ::testing::Test {};
TYPED_TEST_SUITE(AttentionSequencesTest, Scalars);

TYPED_TEST(AttentionSequencesTest, VarlenLengths) {
  // Lengths 0 and 1 among longer ones, keys shorter and longer than queries, GQA, Dv != D.
  using T = TypeParam;
  const AttnShape like{1, 4, 2, 0, 0, 16, 12, false};
  const std::vector<std::size_t> nq{5, 0, 1, 70, 33, 1, 0}, nk{9, 4, 0, 70, 100, 1, 0};
  const auto seqs = make_sequences<T>(like, nq, nk, 300);
  for (const auto& opt : schedules(false)) run_varlen<T>(seqs, opt, {}, "plain");
  run_varlen<T, std::int64_t>(seqs, {}, {}, "64-bit offsets");
  for (const auto& opt : schedules(false)) run_varlen<T>(seqs, opt, {}, "strided (LayoutStride) packed Views", {}, true);
}

TYPED_TEST(AttentionSequencesTest, VarlenCausalWindowAligned) {
  // Causal and windows align per sequence (bottom-right), and ALiBi with them.
  using T = TypeParam;
  AttnShape like{1, 4, 4, 0, 0, 16, 16, true};
  const std::vector<std::size_t> nq{40, 3, 1, 65}, nk{40, 70, 9, 130};
  const auto seqs = make_sequences<T>(like, nq, nk, 310);
  RefTerms t;
  t.left = 11;
  t.softcap = 8;
  t.slopes = uniform_values<T>(like.Hq, 311, 0.05, 0.3);
  t.sinks = {0.5L, -inf<ld>, 2.0L, -1.0L};
  for (const auto& opt : schedules(true)) run_varlen<T>(seqs, opt, t, "causal + window + softcap + ALiBi + sinks");
  with_small_team_shape<T>([&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    for (const auto& opt : schedules(true))
      run_varlen<T>(seqs, opt, t, "team schedule", TeamScheduleAttention<Shape>());
  });
}

TYPED_TEST(AttentionSequencesTest, PagedDecodeAndPrefill) {
  // Page sizes 16, a non-power of two and 64; pages not full; a sequence with no key; decode
  // (Nq = 1) and a few queries; GQA with sinks.
  using T = TypeParam;
  for (std::size_t page : {std::size_t(16), std::size_t(24), std::size_t(64)}) {
    for (std::size_t nq : {std::size_t(1), std::size_t(5)}) {
      const AttnShape like{1, 8, 2, nq, 0, 16, 8, nq > 1};
      const auto seqs = make_sequences<T>(like, std::vector<std::size_t>(4, nq), {150, 0, 17, 64}, 320);
      RefTerms t;
      t.sinks = {0.5L, -inf<ld>, 2.0L, -1.0L, 0.0L, 1.0L, -inf<ld>, 3.0L};
      for (const auto& opt : schedules(like.causal)) run_paged<T>(seqs, page, opt, t, "GQA + sinks");
      if (::testing::Test::HasFailure()) return;
    }
  }
  const AttnShape like{1, 4, 4, 3, 0, 16, 16, true};
  const auto seqs = make_sequences<T>(like, std::vector<std::size_t>(3, 3), {90, 3, 40}, 330);
  RefTerms t;
  t.left = 20;
  t.slopes = uniform_values<T>(like.Hq, 331, 0.05, 0.3);
  run_paged<T, std::int64_t>(seqs, 32, schedules(true)[0], t, "64-bit table, causal + window + ALiBi");
  with_small_team_shape<T>([&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    for (const auto& opt : schedules(true)) run_paged<T>(seqs, 16, opt, t, "team schedule", TeamScheduleAttention<Shape>());
  });
}

TYPED_TEST(AttentionSequencesTest, BadSequencesThrow) {
  using T = TypeParam;
  const AExec exec;
  using V3 = Kokkos::View<T***, AMem>;
  using V4 = Kokkos::View<T****, AMem>;
  using I1 = Kokkos::View<std::int32_t*, AMem>;
  V3 q("q", 6, 4, 8), k("k", 9, 2, 8), v("v", 9, 2, 4), o("o", 6, 4, 4);
  auto varlen = [&](std::vector<std::int64_t> cq, std::vector<std::int64_t> ck,
                    std::initializer_list<const char*> parts) {
    kflash::AttentionOptions opt;
    opt.cu_seqlens_q = index_view<std::int32_t>(cq, cq.size());
    opt.cu_seqlens_k = index_view<std::int32_t>(ck, ck.size());
    expect_invalid([&] { kflash::attention(exec, q, k, v, o, opt); }, parts);
  };
  varlen({1, 3, 6}, {0, 4, 9}, {"options.cu_seqlens_q (3)", "start at 0", "1"});
  varlen({0, 4, 3, 6}, {0, 4, 5, 9}, {"options.cu_seqlens_q (4)", "non-decreasing", "4 then 3"});
  varlen({0, 3, 6}, {0, 4, 8}, {"options.cu_seqlens_k (3)", "packed total 9", "8"});
  varlen({0, 3, 6}, {0, 9}, {"cu_seqlens_q (3)", "cu_seqlens_k (2)", "same length"});
  {
    kflash::AttentionOptions opt;
    opt.cu_seqlens_q = index_view<std::int32_t>({0, 6}, 2);
    expect_invalid([&] { kflash::attention(exec, q, k, v, o, opt); }, {"options.cu_seqlens_k", "must be set"});
    opt.cu_seqlens_k = Kokkos::View<float*, AMem>("cu", 2);
    expect_invalid([&] { kflash::attention(exec, q, k, v, o, opt); }, {"options.cu_seqlens_k (2)", "float"});
    V4 q4("q", 1, 4, 6, 8), o4("o", 1, 4, 6, 4);
    expect_invalid([&] { kflash::attention(exec, q4, k, v, o4, opt); }, {"q", "rank 3"});
  }
  // Paged: 5 pages of 16 slots, B = 2.
  V4 qp("q", 2, 4, 1, 8), op("o", 2, 4, 1, 4), kc("k", 5, 16, 2, 8), vc("v", 5, 16, 2, 4);
  auto paged = [&](std::vector<std::int64_t> table, std::vector<std::int64_t> lengths,
                   std::initializer_list<const char*> parts, const V4& kk, const V4& vv) {
    kflash::AttentionOptions opt;
    opt.block_table = index_view<std::int32_t>(table, 2, table.size() / 2);
    opt.cache_seqlens = index_view<std::int32_t>(lengths, 2);
    expect_invalid([&] { kflash::attention(exec, qp, kk, vv, op, opt); }, parts);
  };
  paged({0, 1, 2, 5}, {20, 30}, {"options.block_table(1, 1) = 5", "[0, 5)"}, kc, vc);
  paged({0, 1, 2, -1}, {20, 30}, {"options.block_table(1, 1) = -1"}, kc, vc);
  paged({0, 1, 2, 3}, {33, 3}, {"options.cache_seqlens(0) = 33", "[0, 32]"}, kc, vc);
  paged({0, 1, 2, 3}, {-1, 3}, {"options.cache_seqlens(0) = -1"}, kc, vc);
  V4 small_k("k", 5, 8, 2, 8), small_v("v", 5, 8, 2, 4);
  paged({0, 1, 2, 3}, {3, 3}, {"page_size of at least 16", "k (5, 8, 2, 8)"}, small_k, small_v);
  {
    kflash::AttentionOptions opt;
    opt.block_table = index_view<std::int32_t>({0, 1}, 2, 1);
    expect_invalid([&] { kflash::attention(exec, qp, kc, vc, op, opt); }, {"block_table and options.cache_seqlens"});
    opt.cache_seqlens = index_view<std::int32_t>({1, 1, 1}, 3);
    expect_invalid([&] { kflash::attention(exec, qp, kc, vc, op, opt); }, {"options.cache_seqlens (3)", "(B) = (2)"});
    opt.cu_seqlens_q = I1("cu", 3);
    expect_invalid([&] { kflash::attention(exec, qp, kc, vc, op, opt); }, {"varlen", "paged", "not supported"});
  }
  // Entries past a sequence's pages are never read: -1 there is fine.
  kflash::AttentionOptions fine;
  fine.block_table = index_view<std::int32_t>({0, -1, 2, 3}, 2, 2);
  fine.cache_seqlens = index_view<std::int32_t>({16, 17}, 2);
  EXPECT_NO_THROW(kflash::attention(exec, qp, kc, vc, op, fine));
}

}  // namespace kflash_test
