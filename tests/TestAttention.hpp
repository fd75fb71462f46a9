// kflash::attention, merge_attention and AttentionState on TEST_EXECSPACE against a long-double
// reference that materialises the scores.
#pragma once

#include <AttentionCommon.hpp>

namespace kflash_test {

template <class T>
struct AttentionTest : ::testing::Test {};
TYPED_TEST_SUITE(AttentionTest, Scalars);

TYPED_TEST(AttentionTest, HeadDims) {
  using T = TypeParam;
  unsigned seed = 1;
  for (std::size_t D : {1, 16, 32, 64, 80, 96, 128, 256}) {
    run_attention<T>(make_attn_data<T>({1, 2, 1, 19, 45, D, D}, seed++), {}, false, "head dims");
    if (::testing::Test::HasFailure()) return;
  }
  run_attention<T>(make_attn_data<T>({1, 2, 2, 19, 45, 64, 32}, seed++), {}, false, "Dv != D");
  run_attention<T>(make_attn_data<T>({2, 1, 1, 70, 33, 16, 80}, seed++), {}, false, "Dv != D");
}

TYPED_TEST(AttentionTest, GqaMqaAndScale) {
  using T = TypeParam;
  run_attention<T>(make_attn_data<T>({2, 6, 2, 33, 70, 32, 32}, 10), {}, false, "GQA");
  run_attention<T>(make_attn_data<T>({1, 4, 1, 65, 130, 64, 64}, 11), {}, false, "MQA");
  kflash::AttentionOptions opt;
  opt.scale = 0.3;
  run_attention<T>(make_attn_data<T>({1, 2, 1, 17, 29, 8, 8}, 12), opt, false, "scale 0.3");
}

TYPED_TEST(AttentionTest, CausalBottomRight) {
  using T = TypeParam;
  kflash::AttentionOptions opt;
  opt.causal = true;
  for (AttnShape s : {AttnShape{1, 2, 1, 70, 70, 32, 32, true}, AttnShape{1, 2, 2, 20, 90, 32, 32, true},
                      AttnShape{1, 2, 1, 90, 20, 16, 24, true}, AttnShape{2, 2, 1, 130, 300, 64, 64, true}}) {
    run_attention<T>(make_attn_data<T>(s, 20), opt, false, "causal");
    if (::testing::Test::HasFailure()) return;
  }
}

TYPED_TEST(AttentionTest, DecodeLongKeys) {
  // One query row against 10^5 keys: the automatic schedule splits the keys across teams.
  using T = TypeParam;
  run_attention<T>(make_attn_data<T>({1, 4, 1, 1, 100000, 64, 64}, 30), {}, false, "decode");
  kflash::AttentionOptions opt;
  opt.causal = true;
  run_attention<T>(make_attn_data<T>({1, 2, 1, 3, 50001, 32, 32, true}, 31), opt, false, "decode causal");
}

TYPED_TEST(AttentionTest, DecodeHeadDims) {
  // GQA groups of up to 8 query rows read K in place by dot products (host kernels), whose lane
  // sums run as trees where the head dimension fills whole vectors, with the rest added after; key
  // counts off the dot products' blocks of 4, several tiles (each asking for the next one's rows).
  using T = TypeParam;
  unsigned seed = 32;
  for (std::size_t D : {8, 24, 80, 128}) {
    run_attention<T>(make_attn_data<T>({1, 8, 1, 1, 203, D, D}, seed++), {}, false, "decode head dims");
    if (::testing::Test::HasFailure()) return;
  }
  run_attention<T>(make_attn_data<T>({2, 6, 2, 1, 150, 72, 40}, seed++), {}, false, "decode Dv != D");
}

TYPED_TEST(AttentionTest, LargeScores) {
  // Scores of standard deviation about 900 (sigma^2): no overflow, no NaN; the bound grows with the scores' own rounding.
  using T = TypeParam;
  run_attention<T>(make_attn_data<T>({1, 2, 1, 23, 57, 32, 32}, 40, 30.0), {}, false, "large scores");
}

TYPED_TEST(AttentionTest, LayoutStrideBNHD) {
  using T = TypeParam;
  run_attention<T>(make_attn_data<T>({2, 4, 2, 37, 51, 32, 16}, 50), {}, true, "layout");
  kflash::AttentionOptions opt;
  opt.causal = true;
  opt.schedule = kflash::AttentionSchedule::split_kv;
  run_attention<T>(make_attn_data<T>({2, 4, 2, 37, 51, 32, 16, true}, 51), opt, true, "layout split");
}

TYPED_TEST(AttentionTest, ChunkedStaging) {
  // The team schedule stages K/V rows by 16-byte chunks where every row is whole, aligned chunks
  // (impl::rows_in_chunks), else element by element. Both stage the same values, so K and V one
  // element off that alignment give, there, bitwise the same result; both match the reference.
  using T = TypeParam;
  using kflash::impl::index_t;
  using kflash::impl::rows_in_chunks;
  using Strided4 = Kokkos::View<T****, Kokkos::LayoutStride, AMem>;
  for (const AttnShape& s : {AttnShape{2, 4, 2, 37, 75, 64, 32}, AttnShape{1, 8, 1, 1, 203, 32, 64}}) {
    const auto a = make_attn_data<T>(s, 70);
    auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, false, a.q);
    auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, false, a.k);
    auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, false, a.v);
    // The same K and V, row-major, from one element past an aligned allocation.
    auto off_by_one = [&](const Strided4& x, std::size_t n, const char* label) {
      const Kokkos::View<T*, AMem> mem(std::string(label), x.size() + 1);
      const Strided4 y(mem.data() + 1, Kokkos::LayoutStride(s.B, s.Hk * s.Nk * n, s.Hk, s.Nk * n, s.Nk, n, n, 1));
      Kokkos::deep_copy(y, x);
      return std::make_pair(mem, y);
    };
    const auto k1 = off_by_one(k.view, s.D, "k off by one"), v1 = off_by_one(v.view, s.Dv, "v off by one");
    EXPECT_TRUE(rows_in_chunks(k.view, index_t(s.D)) && rows_in_chunks(v.view, index_t(s.Dv)));
    EXPECT_FALSE(rows_in_chunks(k1.second, index_t(s.D)));
    EXPECT_FALSE(rows_in_chunks(k.view, index_t(s.D - 1)));  // rows that end inside a chunk

    const AttnRef ref = reference_attention(a, 1 / std::sqrt(ld(s.D)));
    std::vector<ld> outputs[2];
    for (int shifted = 0; shifted < 2; ++shifted) {
      Kokkos::View<T****, AMem> o("o", s.B, s.Hq, s.Nq, s.Dv);
      Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq);
      if (shifted) kflash::attention(AExec(), q.view, k1.second, v1.second, o, kflash::AttentionOptions(), lse);
      else kflash::attention(AExec(), q.view, k.view, v.view, o, kflash::AttentionOptions(), lse);
      outputs[shifted] = flatten4(o);
      expect_attention_matches<T>(ref, outputs[shifted], flatten3(lse), attention_tolerance<T>(ref),
                                  describe(s) + (shifted ? " K/V off chunk alignment" : " K/V aligned"));
    }
    if (!kflash::impl::ScheduleTraits<AExec>::host_kernels) {
      EXPECT_TRUE(outputs[0] == outputs[1]) << describe(s) << ": chunked and element-wise staging differ";
    }
  }
}

TYPED_TEST(AttentionTest, SchedulesAgree) {
  using T = TypeParam;
  for (bool causal : {false, true}) {
    const auto data = make_attn_data<T>({1, 3, 1, 41, 777, 32, 32, causal}, 60);
    kflash::AttentionOptions opt;
    opt.causal = causal;
    opt.schedule = kflash::AttentionSchedule::prefill;
    const auto base = run_attention<T>(data, opt, false, "prefill");
    for (int splits : {0, 3, 7}) {
      opt.schedule = kflash::AttentionSchedule::split_kv;
      opt.num_splits = splits;
      const auto other = run_attention<T>(data, opt, false, "split_kv " + std::to_string(splits));
      // Independent of the schedule within rounding.
      for (std::size_t i = 0; i < base.first.size(); ++i)
        ASSERT_LE(std::fabs(base.first[i] - other.first[i]), 64 * eps<T>) << "splits " << splits;
    }
  }
}

TYPED_TEST(AttentionTest, HostKernelsPackKeysOncePerHead) {
  // Where the host kernels run and a K/V head has several blocks of query rows, K is packed
  // transposed once per head for all of them (the plan's packed_ld). The cases with several blocks
  // per head above go through it (SchedulesAgree with its splits, LayoutStrideBNHD with strided K,
  // CausalBottomRight); here, that the plan asks for it where it should, and a window, whose tiles
  // start at each block's first visible key rather than at a multiple of the tile.
  using T = TypeParam;
  using Traits = kflash::impl::ScheduleTraits<AExec>;
  if (!Traits::host_kernels) GTEST_SKIP() << "no host kernels on this execution space";
  kflash::impl::AttentionPlan p;
  p.B = 1, p.Hq = 3, p.Hk = 1, p.Nq = 41, p.Nk = 777, p.D = p.Dv = 32;
  const auto packed = kflash::impl::plan_attention<T, Traits>(AExec(), p);
  ASSERT_GT(packed.nqb, 1);
  EXPECT_GE(packed.packed_ld, p.Nk + packed.bk);  // a tile from any key reads bk packed keys
  EXPECT_EQ(packed.packed_ld % packed.bk, 0);
  using Workspace = kflash::impl::AttentionWorkspace<T, typename AExec::memory_space>;
  EXPECT_GE(Workspace(packed, false).bytes, sizeof(T) * std::size_t(p.Hk * p.D * packed.packed_ld));
  p.Nq = 5;  // one block per head: staged by that block
  EXPECT_EQ((kflash::impl::plan_attention<T, Traits>(AExec(), p).packed_ld), 0);
  p.Nq = 41, p.ragged = true;  // varlen and paged keys: staged
  EXPECT_EQ((kflash::impl::plan_attention<T, Traits>(AExec(), p).packed_ld), 0);

  kflash::AttentionOptions opt;
  opt.window_left = 37;
  opt.window_right = 5;
  run_attention<T>(make_attn_data<T>({2, 4, 2, 90, 203, 16, 16}, 65), opt, false, "packed keys, window");
}

template <class T, class Shape>
void team_schedule_cases() {
  const std::string name = "team schedule " + std::to_string(Shape::BQ) + "x" + std::to_string(Shape::BK) +
                           " team " + std::to_string(Shape::team_size);
  const TeamScheduleAttention<Shape> team{};
  unsigned seed = 100;
  // Blocks and tiles not filled (Nq, Nk not multiples of BQ, BK), rows of several heads in a block
  // (GQA), Dv below the shape's width, head dimensions from 1, rows that see no key (causal, Nq > Nk).
  for (AttnShape s : {AttnShape{1, 2, 1, 19, 45, 16, 16}, AttnShape{2, 6, 2, 13, 70, 3, 5},
                      AttnShape{1, 1, 1, 1, 1, 1, 1}, AttnShape{1, 2, 2, 8, 8, 40, 16}}) {
    run_attention<T>(make_attn_data<T>(s, seed++), {}, false, name, team);
    if (::testing::Test::HasFailure()) return;
  }
  kflash::AttentionOptions opt;
  opt.causal = true;
  for (AttnShape s : {AttnShape{1, 2, 1, 33, 33, 8, 8, true}, AttnShape{1, 2, 1, 30, 11, 16, 12, true},
                      AttnShape{2, 4, 1, 9, 100, 16, 16, true}}) {
    run_attention<T>(make_attn_data<T>(s, seed++), opt, s.B == 2, name + " causal", team);
    if (::testing::Test::HasFailure()) return;
  }
  opt.schedule = kflash::AttentionSchedule::split_kv;
  opt.num_splits = 3;
  run_attention<T>(make_attn_data<T>({1, 2, 1, 5, 61, 16, 16, true}, seed++), opt, false, name + " split_kv", team);
  run_attention<T>(make_attn_data<T>({1, 2, 1, 23, 57, 16, 16}, seed++, 30.0), {}, false, name + " large scores",
                   team);
}

TYPED_TEST(AttentionTest, TeamScheduleOnAnyTeams) {
  // The device schedule's barriers, scratch reuse across tiles and cross-thread row maxima, with
  // 8 register blocks of 2 x 4 scores on teams of 2 threads (or 1 where the space has one thread):
  // on host spaces this runs the code that runs on GPUs.
  using T = TypeParam;
  using kflash::impl::TeamAttentionShape;
  with_small_team_shape<T>([](auto shape) { team_schedule_cases<T, std::remove_pointer_t<decltype(shape)>>(); });
  // fp32: the warp-product schedule too (on host teams each lane's own sums; on CUDA 3xTF32), its
  // tiles prefetched and not.
  if constexpr (std::is_same<T, float>::value) {
    with_small_warp_shape<T>([](auto shape) { team_schedule_cases<T, std::remove_pointer_t<decltype(shape)>>(); });
    with_small_warp_shape<T, false>(
        [](auto shape) { team_schedule_cases<T, std::remove_pointer_t<decltype(shape)>>(); });
  }
  // The traits' own shapes, whatever space this is: fp32's warp shapes where the traits give them.
  using traits = kflash::impl::ScheduleTraits<AExec>;
  if constexpr (!traits::host_kernels) {
    team_schedule_cases<T, typename traits::template team_shape<T, 64, false>>();
    team_schedule_cases<T, typename traits::template team_shape<T, 128, false>>();
    team_schedule_cases<T, typename traits::template team_shape<T, 64, true>>();
    team_schedule_cases<T, typename traits::template team_shape<T, 128, true>>();
    using Warp64 = typename traits::template warp_shape<T, 64, false>;
    using Warp128 = typename traits::template warp_shape<T, 128, false>;
    if constexpr (kflash::impl::is_warp_shape<Warp64>) team_schedule_cases<T, Warp64>();
    if constexpr (kflash::impl::is_warp_shape<Warp128>) team_schedule_cases<T, Warp128>();
  }
  using Shape = TeamAttentionShape<T, 8, 8, 2, 4, 16, 8>;
  const AttnShape wide{1, 1, 1, 4, 4, 8, 17};
  expect_invalid([&] { run_attention<T>(make_attn_data<T>(wide, 1), {}, false, "", TeamScheduleAttention<Shape>()); },
                 {"Dv = 17", "16"});
}

TYPED_TEST(AttentionTest, MergeAttentionMatchesSinglePass) {
  // Three parts of the keys, one of them empty: [0, 80), [80, 80), [80, 203).
  check_merge_of_parts<TypeParam>({2, 4, 2, 29, 203, 32, 24}, 70, {0, 80, 80, 203}, "merge_attention");
  check_merge_of_parts<TypeParam>({2, 4, 2, 29, 203, 32, 24}, 71, {0, 120, 203}, "merge of two parts");
}

TYPED_TEST(AttentionTest, MergeAttentionOfOneRow) {
  // Fewer rows than threads: merge_attention splits the row's columns across teams (where the
  // space has more than one thread), each team reducing the row's states itself. Five parts, one
  // of them empty.
  check_merge_of_parts<TypeParam>({1, 1, 1, 1, 301, 16, 24}, 75, {0, 7, 7, 150, 151, 301}, "merge of one row");
}

TYPED_TEST(AttentionTest, MergeAttentionOfManyParts) {
  // More parts than a merge team stages at once (Traits::merge_chunk): 300 parts of 2 keys, every
  // tenth of them empty, over 72 columns (column blocks that do not divide them on devices).
  std::vector<std::size_t> cuts{0};
  for (std::size_t p = 1; p <= 300; ++p) cuts.push_back(cuts.back() + (p % 10 == 0 ? 0 : 2));
  check_merge_of_parts<TypeParam>({1, 2, 1, 2, cuts.back(), 8, 72}, 76, cuts, "merge of many parts");
}

TYPED_TEST(AttentionTest, DefaultExecutionSpaceWithoutLse) {
  using T = TypeParam;
  const AttnShape s{1, 2, 1, 9, 13, 8, 8};
  const auto a = make_attn_data<T>(s, 80);
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, false, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, false, a.k);
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, false, a.v);
  auto o = make_tensor<T>(s.B, s.Hq, s.Nq, s.Dv, false, {});
  kflash::attention(q.view, k.view, v.view, o.view);
  Kokkos::fence();
  const AttnRef ref = reference_attention(a, 1 / std::sqrt(ld(s.D)));
  expect_attention_matches<T>(ref, flatten4(o.view), {}, attention_tolerance<T>(ref), "attention(q, k, v, o)");
}

TYPED_TEST(AttentionTest, BadInputThrows) {
  using T = TypeParam;
  using V4 = Kokkos::View<T****, AMem>;
  V4 q("q", 1, 3, 5, 8), k("k", 1, 2, 7, 8), v("v", 1, 2, 7, 4), o("o", 1, 3, 5, 4);
  V4 q4("q4", 1, 4, 5, 8), o4("o4", 1, 4, 5, 4), k6("k6", 1, 2, 7, 6), v9("v9", 1, 2, 9, 4), ow("ow", 1, 4, 5, 5);
  Kokkos::View<T***, AMem> q3("q3", 1, 5, 8), lse("lse", 1, 4, 6);
  const AExec exec;
  const kflash::AttentionOptions opt{};
  expect_invalid([&] { kflash::attention(exec, q, k, v, o, opt); },
                 {"kflash::attention", "multiple", "q (1, 3, 5, 8)", "k (1, 2, 7, 8)"});
  expect_invalid([&] { kflash::attention(exec, q4, k6, v, o4, opt); }, {"head dimension D", "k (1, 2, 7, 6)"});
  expect_invalid([&] { kflash::attention(exec, q4, k, v9, o4, opt); }, {"number of keys Nk", "v (1, 2, 9, 4)"});
  expect_invalid([&] { kflash::attention(exec, q4, k, v, ow, opt); }, {"'o (1, 4, 5, 5)'", "(B, Hq, Nq, Dv)"});
  expect_invalid([&] { kflash::attention(exec, q4, k, v, o4, opt, lse); }, {"'lse (1, 4, 6)'", "(B, Hq, Nq)"});
  expect_invalid([&] { kflash::attention(exec, q3, k, v, o4, opt); }, {"q (1, 5, 8)", "rank 3", "expected rank 4"});
  kflash::AttentionOptions bad;
  bad.num_splits = -1;
  expect_invalid([&] { kflash::attention(exec, q4, k, v, o4, bad); }, {"num_splits"});
  Kokkos::View<T*****, AMem> parts("parts", 2, 1, 4, 5, 4);
  Kokkos::View<T****, AMem> lparts("lparts", 3, 1, 4, 5);
  Kokkos::View<T***, AMem> l("l", 1, 4, 5);
  expect_invalid([&] { kflash::merge_attention(exec, parts, lparts, o4, l); },
                 {"kflash::merge_attention", "lse_parts (3, 1, 4, 5)"});
  EXPECT_NO_THROW(kflash::attention(exec, q4, k, v, o4, opt));
}

TYPED_TEST(AttentionTest, OutputsAliasingInputsAreRefused) {
  // An output that shares memory with an input would be read after the call wrote it: merge_attention
  // with o = one of o_parts returned a result off by a third before this was refused.
  using T = TypeParam;
  const AExec exec;
  Kokkos::View<T*****, AMem> parts("parts", 2, 1, 2, 3, 4);
  Kokkos::View<T****, AMem> lparts("lparts", 2, 1, 2, 3);
  Kokkos::View<T****, AMem> o("o", 1, 2, 3, 4);
  Kokkos::View<T***, AMem> l("l", 1, 2, 3);
  const auto o_in_parts = Kokkos::subview(parts, 1, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
  const auto l_in_parts = Kokkos::subview(lparts, 0, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
  expect_invalid([&] { kflash::merge_attention(exec, parts, lparts, o_in_parts, l); },
                 {"kflash::merge_attention", "'o (1, 2, 3, 4)' overlaps 'o_parts (2, 1, 2, 3, 4)'"});
  expect_invalid([&] { kflash::merge_attention(exec, parts, lparts, o, l_in_parts); },
                 {"kflash::merge_attention", "'lse (1, 2, 3)' overlaps 'lse_parts (2, 1, 2, 3)'"});
  EXPECT_NO_THROW(kflash::merge_attention(exec, parts, lparts, o, l));

  // attention: o over q (D = Dv) and lse inside o are refused; disjoint halves of one allocation are not.
  // The halves are contiguous blocks (LayoutRight): in a device space's default LayoutLeft, halves
  // of the first extent interleave, and their spans overlap (refused, conservatively).
  Kokkos::View<T****, Kokkos::LayoutRight, AMem> qo("qo", 2, 2, 3, 4);
  Kokkos::View<T****, AMem> k("k", 1, 2, 5, 4), v("v", 1, 2, 5, 4);
  const auto q = Kokkos::subview(qo, std::make_pair(0, 1), Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
  const auto o_other = Kokkos::subview(qo, std::make_pair(1, 2), Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
  const kflash::AttentionOptions opt{};
  expect_invalid([&] { kflash::attention(exec, q, k, v, q, opt); }, {"kflash::attention", "'o (1, 2, 3, 4)' overlaps 'q"});
  const auto l_in_k = Kokkos::subview(k, Kokkos::ALL, Kokkos::ALL, std::make_pair(0, 3), 0);
  expect_invalid([&] { kflash::attention(exec, q, k, v, o_other, opt, l_in_k); }, {"'lse (1, 2, 3)' overlaps 'k"});
  const auto l_in_o = Kokkos::subview(o_other, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, 0);
  Kokkos::View<T****, AMem> o2("o2", 1, 2, 3, 4);
  EXPECT_NO_THROW(kflash::attention(exec, q, k, v, o2, opt, l_in_o));
  expect_invalid([&] { kflash::attention(exec, q, k, v, o_other, opt, l_in_o); }, {"'lse (1, 2, 3)' overlaps 'o"});
  EXPECT_NO_THROW(kflash::attention(exec, q, k, v, o_other, opt, l));

  // Outputs over option arrays (inputs too): lse over the sinks, o over the bias. The fuzzer of the
  // C interface found lse written over varlen offsets, read again by the same call.
  Kokkos::View<T*, AMem> sinks_and_lse("sinks and lse", 6);
  kflash::AttentionOptions with_sinks;
  with_sinks.sinks = Kokkos::subview(sinks_and_lse, std::make_pair(0, 2));
  const Kokkos::View<T***, Kokkos::LayoutStride, AMem> l_over_sinks(
      sinks_and_lse.data(), Kokkos::LayoutStride(1, 6, 2, 3, 3, 1));
  expect_invalid([&] { kflash::attention(exec, q, k, v, o2, with_sinks, l_over_sinks); },
                 {"kflash::attention", "'lse (1, 2, 3)' overlaps 'options.sinks (2)'"});
  kflash::AttentionOptions with_bias;
  with_bias.bias = Kokkos::View<const T****, AMem>(o2.data(), 1, 2, 3, 5);
  expect_invalid([&] { kflash::attention(exec, q, k, v, o2, with_bias); },
                 {"kflash::attention", "'o (1, 2, 3, 4)' overlaps 'options.bias (1, 2, 3, 5)'"});
}

TYPED_TEST(AttentionTest, StateReducerInUserCode) {
  // AttentionState through a user's parallel_reduce over the keys of one query row.
  using T = TypeParam;
  constexpr int Dv = 8;
  const AttnShape s{1, 1, 1, 1, 3001, 16, Dv};
  const auto a = make_attn_data<T>(s, 90);
  auto q = make_vector<T, AExec>(a.q);
  auto k = make_vector<T, AExec>(a.k);
  auto v = make_vector<T, AExec>(a.v);
  const auto st = reduce_attention_state<T, Dv, 16>(q, k, v, T(0.25), s.Nk);
  const AttnRef ref = reference_attention(a, 0.25L);
  std::vector<ld> o(Dv);
  for (int d = 0; d < Dv; ++d) o[d] = st.output(d);
  expect_attention_matches<T>(ref, o, {ld(st.logsumexp())}, attention_tolerance<T>(ref), "AttentionState");
  // The identity is neutral and a state without keys outputs 0.
  auto e = kflash::AttentionState<T, Dv>::identity();
  EXPECT_EQ(e.output(0), T(0));
  EXPECT_EQ(e.logsumexp(), -inf<T>);
  e.merge(st);
  for (int d = 0; d < Dv; ++d) EXPECT_EQ(e.output(d), st.output(d));
}

}  // namespace kflash_test
