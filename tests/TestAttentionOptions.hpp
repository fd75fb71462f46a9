// attention()'s options (windows, softcap, ALiBi, sinks, bias and mask Views) and user functors on
// TEST_EXECSPACE, each alone and combined, on every schedule, against the long-double reference
// that applies their documented semantics literally.
#pragma once

#include <AttentionCommon.hpp>

namespace kflash_test {

template <class T>
struct AttentionOptionsTest : ::testing::Test {};
TYPED_TEST_SUITE(AttentionOptionsTest, Scalars);

template <class T, class Runner = LibraryAttention<>>
void run_on_every_schedule(const AttnData<T>& data, const RefTerms& terms, const std::string& what,
                           const Runner& run = {}, bool bnhd = false) {
  for (const auto& opt : schedules(data.s.causal)) {
    run_attention<T>(data, opt, bnhd, what + " schedule " + std::to_string(int(opt.schedule)), run, terms);
    if (::testing::Test::HasFailure()) return;
  }
}

TYPED_TEST(AttentionOptionsTest, SlidingWindows) {
  using T = TypeParam;
  unsigned seed = 200;
  // Windows at their edges (0 on either side, larger than N, one side unbounded), with Nq = Nk,
  // Nq < Nk (decode-like) and Nq > Nk (rows that see no key), under causal too.
  const std::vector<std::pair<int, int>> windows = {{0, 0}, {5, -1}, {-1, 3}, {7, 2}, {0, -1}, {300, 300}, {16, 0}};
  for (AttnShape s : {AttnShape{1, 2, 1, 70, 70, 32, 32}, AttnShape{1, 4, 2, 20, 150, 16, 24},
                      AttnShape{2, 2, 1, 90, 20, 16, 16}}) {
    for (auto w : windows) {
      RefTerms t;
      t.left = w.first, t.right = w.second;
      const std::string what = "window " + std::to_string(w.first) + "," + std::to_string(w.second);
      run_on_every_schedule<T>(make_attn_data<T>(s, seed++), t, what);
      s.causal = !s.causal;
      run_on_every_schedule<T>(make_attn_data<T>(s, seed++), t, what + (s.causal ? " causal" : ""));
      s.causal = !s.causal;
      if (::testing::Test::HasFailure()) return;
    }
  }
  // A long sequence, where whole tiles and key splits fall outside the window.
  RefTerms t;
  t.left = 100, t.right = 0;
  run_on_every_schedule<T>(make_attn_data<T>({1, 2, 1, 600, 1500, 32, 32}, seed++), t, "long window");
}

TYPED_TEST(AttentionOptionsTest, Softcap) {
  using T = TypeParam;
  // Scores of standard deviation about 9 (sigma^2): softcaps 5 and 30 bend them.
  for (ld cap : {5.0L, 30.0L}) {
    RefTerms t;
    t.softcap = cap;
    run_on_every_schedule<T>(make_attn_data<T>({1, 2, 1, 33, 97, 16, 16}, 210, 3.0), t,
                             "softcap " + std::to_string(double(cap)));
    if (::testing::Test::HasFailure()) return;
  }
}

TYPED_TEST(AttentionOptionsTest, Alibi) {
  using T = TypeParam;
  for (bool batched : {false, true}) {
    for (bool causal : {false, true}) {
      const AttnShape s{2, 4, 2, 37, 81, 16, 16, causal};
      RefTerms t;
      t.slopes_batched = batched;
      t.slopes = uniform_values<T>((batched ? s.B : 1) * s.Hq, 220, 0.01, 0.5);
      run_on_every_schedule<T>(make_attn_data<T>(s, 221), t,
                               std::string("alibi ") + (batched ? "(B, Hq)" : "(Hq)"));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TYPED_TEST(AttentionOptionsTest, Sinks) {
  using T = TypeParam;
  // Head 0 with no sink (-inf), head 1 a sink that dominates, heads 2 and 3 ordinary ones; causal
  // with Nq > Nk leaves rows without keys, whose lse is then the sink alone.
  const AttnShape s{1, 4, 2, 40, 25, 16, 8, true};
  RefTerms t;
  t.sinks = {-inf<ld>, 12.0L, -1.5L, 0.25L};
  run_on_every_schedule<T>(make_attn_data<T>(s, 230), t, "sinks");
  run_on_every_schedule<T>(make_attn_data<T>({1, 4, 1, 1, 5000, 32, 32}, 231), t, "sinks decode");
}

TYPED_TEST(AttentionOptionsTest, BiasAndMaskViews) {
  using T = TypeParam;
  const AttnShape s{2, 3, 1, 29, 45, 16, 16};
  RefTerms t;
  t.bias_b = 1, t.bias_h = s.Hq;  // broadcast over batches
  t.bias = uniform_values<T>(t.bias_b * t.bias_h * s.Nq * s.Nk, 240, -2, 2);
  for (std::size_t n = 0; n < t.bias.size(); n += 7) t.bias[n] = -inf<ld>;  // pairs removed by the bias
  run_on_every_schedule<T>(make_attn_data<T>(s, 241), t, "bias (1, Hq, Nq, Nk)", LibraryAttention<>(), true);
  t.mask_b = s.B, t.mask_h = 1;  // broadcast over heads
  t.mask.resize(t.mask_b * s.Nq * s.Nk);
  std::mt19937 gen(242);
  for (char& m : t.mask) m = char(gen() % 3 != 0);
  for (std::size_t j = 0; j < s.Nk; ++j) t.mask[5 * s.Nk + j] = 0;  // row 5 of batch 0: every pair hidden
  run_on_every_schedule<T>(make_attn_data<T>(s, 243), t, "bias and mask (B, 1, Nq, Nk)");
}

TYPED_TEST(AttentionOptionsTest, Combined) {
  using T = TypeParam;
  // window + softcap + ALiBi + sinks with GQA, and the same with bias and mask, causal.
  const AttnShape s{2, 4, 2, 50, 130, 32, 16, true};
  RefTerms t;
  t.left = 40;
  t.softcap = 8;
  t.slopes = uniform_values<T>(s.Hq, 250, 0.05, 0.3);
  t.sinks = {0.5L, -inf<ld>, 2.0L, -3.0L};
  run_on_every_schedule<T>(make_attn_data<T>(s, 251, 2.0), t, "window softcap alibi sinks", LibraryAttention<>(), true);
  t.bias_b = s.B, t.bias_h = 1;
  t.bias = uniform_values<T>(s.B * s.Nq * s.Nk, 252, -1, 1);
  t.mask_b = 1, t.mask_h = 1;
  t.mask.resize(s.Nq * s.Nk);
  for (std::size_t n = 0; n < t.mask.size(); ++n) t.mask[n] = char(n % 5 != 1);
  run_on_every_schedule<T>(make_attn_data<T>(s, 253, 2.0), t, "all options");
}

/// ALiBi written by hand as a score_mod (slopes from a View, as a user would hold them).
template <class T>
struct HandAlibi {
  Kokkos::View<const T*, AMem> slopes;
  std::int64_t diagonal;  // Nk - Nq
  KOKKOS_INLINE_FUNCTION T operator()(T score, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const std::int64_t d = i + diagonal - j;
    return score - slopes(h) * T(d < 0 ? -d : d);
  }
};

/// A window of 6 keys to the left and 2 to the right of the diagonal, written by hand as a mask_mod.
struct HandWindow {
  std::int64_t diagonal;
  KOKKOS_INLINE_FUNCTION bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    const std::int64_t c = i + diagonal;
    return j >= c - 6 && j <= c + 2;
  }
};

template <class T, class Runner>
void check_functors_equal_options(const Runner& with_functors, const AttnShape& s, const std::vector<ld>& slopes,
                                  const std::string& what) {
  const auto data = make_attn_data<T>(s, 260);
  RefTerms options;  // the same semantics through the built-in options
  options.slopes = slopes;
  options.left = 6, options.right = 2;
  const auto base = run_attention<T>(data, kflash::AttentionOptions(), false, what + " options", LibraryAttention<>(),
                                     options);
  // The functors' reference applies them as functors, independently of the options' code.
  RefTerms functors;
  const long long diagonal = (long long)s.Nk - (long long)s.Nq;
  functors.score_mod = [&](ld x, std::size_t, std::size_t h, std::size_t i, std::size_t j) {
    return x - slopes[h] * std::fabs(ld((long long)i + diagonal - (long long)j));
  };
  functors.mask_mod = [&](std::size_t, std::size_t, std::size_t i, std::size_t j) {
    const long long c = (long long)i + diagonal;
    return (long long)j >= c - 6 && (long long)j <= c + 2;
  };
  const auto other = run_attention<T>(data, kflash::AttentionOptions(), false, what, with_functors, functors);
  for (std::size_t n = 0; n < base.first.size(); ++n)
    ASSERT_LE(std::fabs(base.first[n] - other.first[n]), 64 * eps<T>) << what << " element " << n;
}

TYPED_TEST(AttentionOptionsTest, UserFunctorsMatchOptions) {
  using T = TypeParam;
  const AttnShape s{1, 3, 1, 31, 77, 16, 16};
  const std::vector<ld> slopes = uniform_values<T>(s.Hq, 261, 0.05, 0.5);
  const HandAlibi<T> alibi{option_view<T>(slopes, s.Hq), std::int64_t(s.Nk) - std::int64_t(s.Nq)};
  const HandWindow window{std::int64_t(s.Nk) - std::int64_t(s.Nq)};
  check_functors_equal_options<T>(LibraryAttention<HandAlibi<T>, HandWindow>{alibi, window}, s, slopes,
                                  "score_mod and mask_mod");
  with_small_team_shape<T>([&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    check_functors_equal_options<T>(TeamScheduleAttention<Shape, HandAlibi<T>, HandWindow>{alibi, window}, s, slopes,
                                    "team schedule with functors");
  });
}

TYPED_TEST(AttentionOptionsTest, TeamScheduleWithOptions) {
  // The device schedule with every option, on host teams where this space is a host space.
  using T = TypeParam;
  const AttnShape s{1, 4, 2, 21, 60, 16, 16, true};
  RefTerms t;
  t.left = 9;
  t.softcap = 6;
  t.slopes = uniform_values<T>(s.Hq, 270, 0.05, 0.3);
  t.sinks = {1.0L, -inf<ld>, 0.0L, 3.0L};
  t.bias_b = 1, t.bias_h = 1;
  t.bias = uniform_values<T>(s.Nq * s.Nk, 271, -1, 1);
  t.mask_b = 1, t.mask_h = s.Hq;
  t.mask.assign(s.Hq * s.Nq * s.Nk, 1);
  for (std::size_t n = 0; n < t.mask.size(); n += 3) t.mask[n] = 0;
  with_small_team_shape<T>([&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    run_on_every_schedule<T>(make_attn_data<T>(s, 272, 2.0), t, "team schedule all options",
                             TeamScheduleAttention<Shape>());
  });
}

/// Documents of 40 tokens: a query sees the keys of its own document.
struct DocumentMask {
  KOKKOS_INLINE_FUNCTION bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    return i / 40 == j / 40;
  }
};

TYPED_TEST(AttentionOptionsTest, BlockMask) {
  using T = TypeParam;
  const AttnShape s{2, 4, 2, 200, 200, 16, 16, false};
  const AttnData<T> data = make_attn_data<T>(s, 280, 2.0);
  RefTerms t;
  t.mask_mod = [](std::size_t, std::size_t, std::size_t i, std::size_t j) { return i / 40 == j / 40; };
  // make_block_mask's blocks of 16 x 16: true exactly where the block's rows and keys share a document.
  const auto blocks = kflash::make_block_mask(AExec(), DocumentMask{}, s.B, s.Hq, s.Nq, s.Nk, 16, 16);
  ASSERT_EQ(blocks.extent(2), 13u);
  ASSERT_EQ(blocks.extent(3), 13u);
  const auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), blocks);
  for (std::size_t qb = 0; qb < 13; ++qb)
    for (std::size_t kb = 0; kb < 13; ++kb) {
      const std::size_t i1 = std::min<std::size_t>(qb * 16 + 15, 199), j1 = std::min<std::size_t>(kb * 16 + 15, 199);
      const bool shared = qb * 16 / 40 <= j1 / 40 && kb * 16 / 40 <= i1 / 40;
      ASSERT_EQ(bool(hb(1, 3, qb, kb)), shared) << "block " << qb << ", " << kb;
    }
  kflash::AttentionOptions base;
  base.block_mask = blocks;
  base.block_mask_q = base.block_mask_k = 16;
  for (auto opt : schedules(false)) {
    opt.block_mask = base.block_mask;
    opt.block_mask_q = opt.block_mask_k = 16;
    run_attention<T>(data, opt, false, "document mask + block mask", LibraryAttention<kflash::NoScoreMod, DocumentMask>(), t);
  }
  with_small_team_shape<T>([&](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    run_attention<T>(data, base, false, "team schedule, block mask",
                     TeamScheduleAttention<Shape, kflash::NoScoreMod, DocumentMask>(), t);
  });
  // A block mask that marks every block empty: every tile is skipped, so every row sees no key,
  // although mask_mod would show some.
  Kokkos::View<bool****, AMem> none("none", 1, 1, 13, 13);
  using V4 = Kokkos::View<T****, AMem>;
  V4 q("q", 1, 2, 200, 8), k("k", 1, 2, 200, 8), v("v", 1, 2, 200, 8), o("o", 1, 2, 200, 8);
  Kokkos::deep_copy(q, T(1)), Kokkos::deep_copy(k, T(1)), Kokkos::deep_copy(v, T(1));
  Kokkos::View<T***, AMem> lse("lse", 1, 2, 200);
  kflash::AttentionOptions skip;
  skip.block_mask = none;
  skip.block_mask_q = skip.block_mask_k = 16;
  kflash::attention(AExec(), q, k, v, o, skip, lse, kflash::NoScoreMod(), DocumentMask{});
  const auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  const auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  for (std::size_t i = 0; i < 200; ++i) {
    ASSERT_EQ(hl(0, 1, i), -inf<T>) << "row " << i;
    ASSERT_EQ(ho(0, 1, i, 3), T(0)) << "row " << i;
  }
  expect_invalid([&] { kflash::attention(AExec(), q, k, v, o, base); },
                 {"options.block_mask (2, 4, 13, 13)",
                  "(B or 1, Hq or 1, ceil(Nq / block_mask_q), ceil(Nk / block_mask_k)) = (1, 2 or 1, 13, 13)"});
  skip.block_mask_k = 0;
  expect_invalid([&] { kflash::attention(AExec(), q, k, v, o, skip); }, {"block_mask_k", "0"});
}

TYPED_TEST(AttentionOptionsTest, BadOptionsThrow) {
  using T = TypeParam;
  using V4 = Kokkos::View<T****, AMem>;
  V4 q("q", 2, 4, 5, 8), k("k", 2, 2, 7, 8), v("v", 2, 2, 7, 4), o("o", 2, 4, 5, 4);
  const AExec exec;
  auto bad = [&](auto set, std::initializer_list<const char*> parts) {
    kflash::AttentionOptions opt;
    set(opt);
    expect_invalid([&] { kflash::attention(exec, q, k, v, o, opt); }, parts);
  };
  bad([](auto& opt) { opt.window_left = -2; }, {"window_left", "-2"});
  bad([](auto& opt) { opt.window_right = -5; }, {"window_right", "-5"});
  bad([](auto& opt) { opt.softcap = -1; }, {"softcap", "-1"});
  bad([](auto& opt) { opt.softcap = std::numeric_limits<double>::infinity(); }, {"softcap", "inf"});
  bad([](auto& opt) { opt.alibi_slopes = Kokkos::View<T*, AMem>("s", 3); }, {"options.alibi_slopes (3)", "(Hq) = (4)"});
  bad([](auto& opt) { opt.alibi_slopes = Kokkos::View<T**, AMem>("s", 4, 2); }, {"alibi_slopes (4, 2)", "(B, Hq) = (2, 4)"});
  bad([](auto& opt) { opt.sinks = Kokkos::View<T*, AMem>("s", 5); }, {"options.sinks (5)", "(Hq) = (4)"});
  bad([](auto& opt) { opt.bias = Kokkos::View<T****, AMem>("b", 2, 3, 5, 7); }, {"options.bias (2, 3, 5, 7)", "Hq or 1"});
  bad([](auto& opt) { opt.bias = Kokkos::View<T***, AMem>("b", 4, 5, 7); }, {"options.bias (4, 5, 7)"});
  bad([](auto& opt) { opt.mask = Kokkos::View<bool****, AMem>("m", 1, 1, 5, 6); }, {"options.mask (1, 1, 5, 6)", "Nk"});
  bad([](auto& opt) { opt.mask = Kokkos::View<T****, AMem>("m", 1, 1, 5, 7); }, {"options.mask", "expected bool"});
  using Other = std::conditional_t<std::is_same<T, float>::value, double, float>;
  bad([](auto& opt) { opt.sinks = Kokkos::View<Other*, AMem>("s", 4); }, {"options.sinks (4)", "value type of q"});
  bad([](auto& opt) { opt.bias = Kokkos::View<T****, AMem>("b", 2, 3, 5, 7); }, {"= (2 or 1, 4 or 1, 5, 7)"});
  // With one batch the expected extent is 1, not "1 or 1".
  V4 q1("q1", 1, 4, 5, 8), k1("k1", 1, 2, 7, 8), v1("v1", 1, 2, 7, 4), o1("o1", 1, 4, 5, 4);
  kflash::AttentionOptions one_batch;
  one_batch.bias = Kokkos::View<T****, AMem>("b", 1, 3, 5, 7);
  expect_invalid([&] { kflash::attention(exec, q1, k1, v1, o1, one_batch); },
                 {"options.bias (1, 3, 5, 7)", "(B or 1, Hq or 1, Nq, Nk) = (1, 4 or 1, 5, 7)"});
  // Broadcast shapes are accepted.
  kflash::AttentionOptions fine;
  fine.bias = Kokkos::View<T****, AMem>("b", 1, 1, 5, 7);
  Kokkos::View<bool****, AMem> visible("m", 2, 1, 5, 7);
  Kokkos::deep_copy(visible, true);
  fine.mask = visible;
  fine.alibi_slopes = Kokkos::View<T**, AMem>("s", 2, 4);
  EXPECT_NO_THROW(kflash::attention(exec, q, k, v, o, fine));
}

}  // namespace kflash_test
