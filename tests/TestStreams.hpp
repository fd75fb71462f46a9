// SoftmaxStream and AttentionStream on TEST_EXECSPACE: rows and keys fed in tiles of every width from
// 1 to the whole row, in order and shuffled, against the long-double references; special values;
// merges; and the errors a misuse gets.
#pragma once

#include <StreamsCommon.hpp>

#include <numeric>

namespace kflash_test {

template <class T>
struct StreamsTest : ::testing::Test {};
TYPED_TEST_SUITE(StreamsTest, Scalars);

TYPED_TEST(StreamsTest, SoftmaxBlockSizeSweep) {
  using T = TypeParam;
  const std::size_t rows = 3, cols = 1024;
  std::vector<T> host = normal_values<T>(rows * cols, 31, 4.0);
  for (std::size_t c = 0; c < cols; c += 7) host[cols + c] = -inf<T>;  // row 1: masked entries
  for (std::size_t c = 0; c < cols; ++c) host[2 * cols + c] = T(c % 97) * T(1e3);  // row 2: large, rising
  for (std::size_t width : {1, 2, 8, 32, 128, 512, 1024})
    for (unsigned seed : {0u, 5u}) {
      check_softmax_stream<T, Kokkos::LayoutRight>(rows, cols, host, width, seed);
      if (::testing::Test::HasFatalFailure()) return;
    }
  check_softmax_stream<T, Kokkos::LayoutLeft>(rows, cols, host, 100, 9);
}

TYPED_TEST(StreamsTest, SoftmaxLongRow) {
  using T = TypeParam;
  const std::size_t cols = std::size_t(1) << 20;
  const std::vector<T> host = normal_values<T>(cols, 37, 2.0);
  for (std::size_t width : {std::size_t(8), std::size_t(32), std::size_t(128), std::size_t(512), cols / 16, cols})
    for (unsigned seed : {0u, 11u}) {
      check_softmax_stream<T, Kokkos::LayoutRight>(1, cols, host, width, seed);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

TYPED_TEST(StreamsTest, SoftmaxSpecialRows) {
  using T = TypeParam;
  const std::size_t rows = 5, cols = 40;
  std::vector<T> host = normal_values<T>(rows * cols, 41);
  for (std::size_t c = 0; c < cols; ++c) host[c] = -inf<T>;  // row 0 fully masked
  host[cols + 17] = nan<T>;                                    // row 1 NaN
  host[2 * cols + 3] = inf<T>;                                 // row 2 +inf
  host[3 * cols + 39] = std::numeric_limits<T>::max();         // row 3 huge finite
  host[4 * cols + 0] = -std::numeric_limits<T>::max();
  for (std::size_t width : {1, 3, 40}) check_softmax_stream<T, Kokkos::LayoutRight>(rows, cols, host, width, 3);
}

TYPED_TEST(StreamsTest, SoftmaxPartialLogsumexpAndErrors) {
  using T = TypeParam;
  using Exec = AExec;
  const std::size_t rows = 2, cols = 10;
  const std::vector<T> host = normal_values<T>(rows * cols, 43);
  Kokkos::View<T**, AMem> y("y", rows, cols);
  kflash::SoftmaxStream<T, Exec> stream(y);
  Kokkos::View<T*, AMem> lse("lse", rows);
  stream.logsumexp(lse);
  for (T v : to_host(lse)) EXPECT_EQ(v, -inf<T>) << "no column absorbed yet";
  const auto x = make_matrix<T, Kokkos::LayoutRight, Exec>(rows, cols, host);
  stream.update(Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(6, 10)), 6);
  stream.logsumexp(lse);
  const auto partial = to_host(lse);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<T> part(host.begin() + r * cols + 6, host.begin() + r * cols + 10);
    expect_lse_matches(reference_row(part.data(), part.size()), partial[r], 8 * eps<T>, "columns 6..10");
  }
  expect_invalid([&] { stream.update(Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(4, 8)), 4); },
                 {"SoftmaxStream::update", "columns [4, 8) overlap columns [6, 10)"});
  expect_invalid([&] { stream.update(Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(0, 4)), 7); },
                 {"SoftmaxStream::update", "tile (2, 4)", "col0 = 7", "y (2, 10)"});
  expect_invalid([&] { stream.update(Kokkos::subview(x, Kokkos::make_pair(0, 1), Kokkos::make_pair(0, 4)), 0); },
                 {"tile (1, 4)"});
  expect_invalid([&] { stream.finalize(y, kflash::Normalize::prob); },
                 {"SoftmaxStream::finalize", "column 0", "4 of 10 columns"});
  Kokkos::View<T**, AMem> wrong("wrong", rows, cols + 1);
  stream.update(Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(0, 6)), 0);
  expect_invalid([&] { stream.finalize(wrong, kflash::Normalize::prob); }, {"out (2, 11)", "y (2, 10)"});
  stream.finalize(y, kflash::Normalize::prob);
  expect_invalid([&] { stream.logsumexp(lse); }, {"finalized in place"});
  const auto out = to_host_row_major(y);
  for (std::size_t r = 0; r < rows; ++r)
    expect_row_matches(reference_row(host.data() + r * cols, cols), host.data() + r * cols, out.data() + r * cols,
                       cols, false, "two tiles");
}

/// Runs an AttentionStream over a's keys in chunks of `width` (shuffled when seed != 0), with
/// query_offset Nk - Nq (the reference's bottom-right alignment); returns its (o, lse) after
/// checking them against the reference.
template <class T>
std::pair<std::vector<ld>, std::vector<ld>> run_attention_stream(const AttnData<T>& a, const RefTerms& terms,
                                                                 std::size_t width, unsigned seed,
                                                                 const std::string& what) {
  const AttnShape& s = a.s;
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, false, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, true, a.k);  // chunks of (B, N, H, D) caches
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, true, a.v);
  kflash::AttentionOptions opt;
  opt.causal = s.causal;
  opt = with_terms<T>(opt, s, terms);
  kflash::AttentionStream<T, AExec> stream(AExec(), q.view, std::int64_t(s.Dv), opt,
                                           std::int64_t(s.Nk) - std::int64_t(s.Nq));
  for (const auto& t : tiles_of(s.Nk, width, seed)) {
    const auto keys = Kokkos::make_pair(t.first, t.second);
    stream.update(AExec(), Kokkos::subview(k.view, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL),
                  Kokkos::subview(v.view, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL), std::int64_t(t.first));
  }
  EXPECT_EQ(stream.keys_absorbed(), std::int64_t(s.Nk));
  Kokkos::View<T****, AMem> o("o", s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  stream.result(AExec(), o, lse);
  auto result = std::make_pair(flatten4(o), flatten3(lse));
  const AttnRef ref = reference_attention(a, 1 / std::sqrt(ld(s.D)), terms);
  const std::string where = what + " " + describe(s) + " chunks of " + std::to_string(width) +
                            (seed ? " shuffled" : " in order");
  expect_attention_matches<T>(ref, result.first, result.second, attention_tolerance<T>(ref), where);
  // result() leaves the stream as it was: a second call gives the same bits.
  stream.result(AExec(), o, lse);
  EXPECT_TRUE(flatten4(o) == result.first && flatten3(lse) == result.second) << where << ": result() repeated";
  return result;
}

TYPED_TEST(StreamsTest, AttentionBlockSizeSweep) {
  using T = TypeParam;
  AttnShape s{2, 4, 2, 5, 1024, 16, 8};
  const auto a = make_attn_data<T>(s, 51);
  for (std::size_t width : {1, 2, 8, 32, 128, 512, 1024})
    for (unsigned seed : {0u, 7u}) run_attention_stream(a, {}, width, seed, "dense");
  AttnShape c = s;
  c.causal = true;
  c.Nk = 300;
  const auto ac = make_attn_data<T>(c, 53);
  for (std::size_t width : {1, 8, 128, 300}) run_attention_stream(ac, {}, width, 3, "causal");
}

TYPED_TEST(StreamsTest, AttentionOptions) {
  using T = TypeParam;
  AttnShape s{1, 4, 1, 6, 200, 8, 8};
  const auto a = make_attn_data<T>(s, 57);
  RefTerms window;
  window.left = 20, window.right = 3;
  RefTerms mods;
  mods.softcap = 5;
  mods.slopes = rounded<T>({0.5L, 0.25L, 0.125L, 0.0625L});
  RefTerms sinks;
  sinks.sinks = rounded<T>({1.5L, -inf<ld>, 30, -2});
  for (std::size_t width : {1, 16, 200}) {
    run_attention_stream(a, window, width, 13, "window");
    run_attention_stream(a, mods, width, 13, "softcap + ALiBi");
    run_attention_stream(a, sinks, width, 13, "sinks");
  }
}

TYPED_TEST(StreamsTest, AttentionMergeEmptyAndErrors) {
  using T = TypeParam;
  AttnShape s{1, 2, 2, 3, 64, 8, 4};
  const auto a = make_attn_data<T>(s, 61);
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, false, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, false, a.k);
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, false, a.v);
  kflash::AttentionOptions opt;
  opt.sinks = option_view<T>({2.0L, -inf<ld>}, s.Hq);
  kflash::AttentionStream<T, AExec> first(q.view, 4, opt, 64 - 3), second(q.view, 4, opt, 64 - 3);
  Kokkos::View<T****, AMem> o("o", s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  // Before any key: O = 0, lse = the sink's logit (-inf without one).
  first.result(o, lse);
  for (ld x : flatten4(o)) EXPECT_EQ(x, 0);
  const auto empty_lse = flatten3(lse);
  for (std::size_t r = 0; r < empty_lse.size(); ++r) EXPECT_EQ(empty_lse[r], r / s.Nq == 0 ? T(2) : -inf<T>);
  auto keys = [&](std::size_t b, std::size_t e) { return Kokkos::make_pair(b, e); };
  first.update(Kokkos::subview(k.view, Kokkos::ALL, Kokkos::ALL, keys(0, 40), Kokkos::ALL),
               Kokkos::subview(v.view, Kokkos::ALL, Kokkos::ALL, keys(0, 40), Kokkos::ALL), 0);
  second.update(Kokkos::subview(k.view, Kokkos::ALL, Kokkos::ALL, keys(40, 64), Kokkos::ALL),
                Kokkos::subview(v.view, Kokkos::ALL, Kokkos::ALL, keys(40, 64), Kokkos::ALL), 40);
  first.merge(second);
  EXPECT_EQ(first.keys_absorbed(), 64);
  first.result(o, lse);
  RefTerms terms;
  terms.sinks = rounded<T>({2.0L, -inf<ld>});
  const AttnRef ref = reference_attention(a, 1 / std::sqrt(ld(s.D)), terms);
  expect_attention_matches<T>(ref, flatten4(o), flatten3(lse), attention_tolerance<T>(ref), "merged streams");

  expect_invalid([&] { first.merge(second); }, {"AttentionStream::merge", "keys [40, 64) overlap"});
  expect_invalid([&] { second.update(k.view, v.view, 0); }, {"AttentionStream::update", "keys [0, 64) overlap"});
  Kokkos::View<T****, AMem> v3("v3", s.B, s.Hk, s.Nk, 3);
  expect_invalid([&] { second.update(k.view, v3, 100); }, {"v (1, 2, 64, 3)", "Dv = 4"});
  expect_invalid([&] { first.result(Kokkos::View<T****, AMem>("o", 1, 2, 3, 5), lse); }, {"o (1, 2, 3, 4)", "o (1, 2, 3, 5)"});
  kflash::AttentionStream<T, AExec> other_offset(q.view, 4, {}, 0);
  expect_invalid([&] { first.merge(other_offset); }, {"same query shapes", "offset 61", "offset 0"});
  kflash::AttentionOptions with_bias;
  with_bias.bias = option_view<T>(std::vector<ld>(3 * 64), 1, 1, 3, 64);
  expect_invalid([&] { kflash::AttentionStream<T, AExec>(q.view, 4, with_bias); },
                 {"AttentionStream", "options.bias is not supported by streams"});
}

}  // namespace kflash_test
