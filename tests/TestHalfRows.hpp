// softmax, log_softmax, logsumexp, SoftmaxStream and cross_entropy on 16-bit Views
// (kflash::bhalf_t, kflash::half_t) on TEST_EXECSPACE, against a long-double reference on the same
// 16-bit inputs (GUIDE §9: computed in float, each output rounded once to nearest even).
#pragma once

#include <CrossEntropyCommon.hpp>
#include <HalfCommon.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace kflash_test {

/// Checks one row's 16-bit outputs y against the reference of its 16-bit inputs x: within one unit
/// in the last place of the 16-bit result plus the float computation's error (expect_row_matches'
/// bounds at float's epsilon); masked elements and special rows exactly as the contract says.
template <class H>
void expect_half_row(const H* x, const H* y, std::size_t n, bool log_space, const std::string& where) {
  std::vector<ld> xs(n);
  for (std::size_t i = 0; i < n; ++i) xs[i] = wide(x[i]);
  const RefRow r = reference_row(xs.data(), n);
  const bool nan_row = r.nan || r.max == inf<ld>;
  for (std::size_t i = 0; i < n; ++i) {
    const ld xi = xs[i], yi = wide(y[i]);
    if (nan_row) {
      ASSERT_TRUE(std::isnan(yi)) << where << " element " << i << ": expected NaN, got " << yi;
      continue;
    }
    if (r.max == -inf<ld> || xi == -inf<ld>) {  // a masked element, or a fully masked row
      ASSERT_EQ(yi, log_space ? -inf<ld> : 0) << where << " element " << i;
      continue;
    }
    const ld d = xi - r.max, ref = log_space ? d - std::log(r.l) : std::exp(d) / r.l;
    // Probabilities also within float's smallest normal number: a weight below it may be flushed
    // to 0 (exp_nonpositive's contract), where bf16 has subnormals still.
    const ld fp32 = log_space ? 16 * eps<float> * (1 + std::fabs(d) + std::fabs(std::log(r.l)) + std::fabs(ref))
                              : 16 * eps<float> * (1 + std::fabs(d)) * ref + std::numeric_limits<float>::min();
    if (std::isinf(wide(kflash::impl::narrow<H>(float(ref))))) {  // beyond the 16-bit range: rounds to inf
      ASSERT_EQ(yi, ref < 0 ? -inf<ld> : inf<ld>) << where << " element " << i << " ref=" << ref;
      continue;
    }
    const ld tol = Half16<H>::ulp(ref) + fp32;
    ASSERT_LE(std::fabs(yi - ref), tol) << where << " element " << i << " x=" << xi << " y=" << yi << " ref=" << ref;
  }
}

/// softmax, log_softmax (out of place and in place) and logsumexp (16-bit and float outputs) of a
/// rows x cols matrix of layout L holding `host`.
template <class H, class L>
void check_half_matrix(std::size_t rows, std::size_t cols, const std::vector<H>& host, const std::string& what) {
  using Exec = TEST_EXECSPACE;
  using Mem = Exec::memory_space;
  const std::string where = what + " " + Half16<H>::name() + " " + std::to_string(rows) + "x" +
                            std::to_string(cols) + " " + typeid(L).name();
  const auto x = make_matrix<H, L, Exec>(rows, cols, host);
  for (bool in_place : {false, true}) {
    for (bool log_space : {false, true}) {
      const std::vector<H> sevens(rows * cols, kflash::impl::narrow<H>(7.0f));
      const auto y = make_matrix<H, L, Exec>(rows, cols, in_place ? host : sevens);
      if (log_space) kflash::log_softmax(Exec(), in_place ? y : x, y);
      else kflash::softmax(Exec(), in_place ? y : x, y);
      const auto out = to_host_row_major(y);
      for (std::size_t r = 0; r < rows; ++r) {
        expect_half_row(host.data() + r * cols, out.data() + r * cols, cols, log_space,
                        where + (log_space ? " log_softmax" : " softmax") + (in_place ? " in place" : "") + " row " +
                            std::to_string(r));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
  Kokkos::View<H*, Mem> lse16("lse16", rows);
  Kokkos::View<float*, Mem> lse32("lse32", rows);
  kflash::logsumexp(Exec(), x, lse16);
  kflash::logsumexp(Exec(), x, lse32);
  const auto got16 = to_host(lse16);
  const auto got32 = to_host(lse32);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<ld> xs(cols);
    for (std::size_t c = 0; c < cols; ++c) xs[c] = wide(host[r * cols + c]);
    const RefRow ref = reference_row(xs.data(), cols);
    const std::string row = where + " logsumexp row " + std::to_string(r);
    expect_lse_matches(ref, got32[r], 8 * eps<float>, row + " (float out)");
    const ld lse = ref.lse(), g = wide(got16[r]);
    if (std::isnan(lse) || std::isinf(lse)) {
      EXPECT_TRUE(std::isnan(lse) ? std::isnan(g) : g == lse) << row << ": got " << g << " ref " << lse;
    } else {
      EXPECT_LE(std::fabs(g - lse), Half16<H>::ulp(lse) + 8 * eps<float> * (1 + std::fabs(lse)))
          << row << " (16-bit out): got " << g << " ref " << lse;
    }
  }
}

template <class H>
void check_half_rows() {
  // On the host kernels, every row read as it is: rows up to HostTraits::short_row (several at a
  // time, softmax's weights in a buffer on the stack; rows longer than a tile fewer at a time, the
  // last group short), longer rows (softmax's weights in team scratch), rows split into chunks (few
  // rows of many columns, and the rank-1 row below: weights computed again); every layout; values
  // spread so that outputs cover many binades.
  check_half_matrix<H, Kokkos::LayoutRight>(1, 1, halves<H>({0.5f}), "single");
  check_half_matrix<H, Kokkos::LayoutRight>(37, 19, halves<H>(normal_values<float>(37 * 19, 11, 3.0)), "short");
  check_half_matrix<H, Kokkos::LayoutRight>(41, 700, halves<H>(normal_values<float>(41 * 700, 16, 3.0)), "grouped");
  check_half_matrix<H, Kokkos::LayoutRight>(9, 200, halves<H>(normal_values<float>(9 * 200, 17, 3.0)), "one tile");
  constexpr std::size_t short_row = kflash::impl::HostTraits::short_row;
  check_half_matrix<H, Kokkos::LayoutRight>(10, short_row, halves<H>(normal_values<float>(10 * short_row, 21, 3.0)),
                                            "grouped, the longest");
  check_half_matrix<H, Kokkos::LayoutRight>(40, 2500, halves<H>(normal_values<float>(40 * 2500, 17, 3.0)), "wide");
  check_half_matrix<H, Kokkos::LayoutLeft>(9, 300, halves<H>(normal_values<float>(9 * 300, 12, 4.0)), "left");
  check_half_matrix<H, Kokkos::LayoutStride>(5, 130, halves<H>(normal_values<float>(5 * 130, 13, 2.0)), "strided");
  check_half_matrix<H, Kokkos::LayoutRight>(2, 50000, halves<H>(normal_values<float>(2 * 50000, 14, 5.0)), "long");
  check_half_matrix<H, Kokkos::LayoutRight>(8, 140000, halves<H>(normal_values<float>(8 * 140000, 18, 5.0)),
                                            "very long");

  // Every length modulo the host kernels' blocks of 16 values (their last values taken as one more
  // block, the one that ends at the row's end, its lanes before them masked): rows whose maximum is
  // among the last values or in the last whole block's lanes that block reads again, and rows
  // ending in -inf and in NaN.
  for (std::size_t cols = 1; cols <= 40; ++cols) {
    std::vector<float> v = normal_values<float>(5 * cols, unsigned(700 + cols), 3.0);
    v[2 * cols - 1] += 12.0f;
    if (cols > 16) v[3 * cols - 16] += 12.0f;
    v[4 * cols - 1] = -HUGE_VALF;
    v[5 * cols - 1] = nan<float>;
    check_half_matrix<H, Kokkos::LayoutRight>(5, cols, halves<H>(v), "tail lengths");
  }

  // Special rows: masked elements, a fully masked row, a NaN, +inf (NaN row), and values whose
  // float exponentials would overflow without the max shift.
  const float i = HUGE_VALF;
  const float big = std::is_same<H, kflash::half_t>::value ? 60000.0f : 1e30f;
  check_half_matrix<H, Kokkos::LayoutRight>(5, 4,
                                            halves<H>({-i, 1.0f, 2.0f, -i,  //
                                                       -i, -i, -i, -i,      //
                                                       1.0f, nan<float>, 3.0f, 0.0f, //
                                                       0.0f, i, 1.0f, 2.0f, //
                                                       big, big, -big, 0.0f}),
                                            "special");
  // The same in rows longer than a tile, past the first vectors and in the last tile's tail: rows
  // taken a few at a time (each in one pass against a guess of its maximum), and rows through the
  // tile loop. Rows 5 and 6 (values of standard deviation 3/8, the guess's samples among them) have a
  // maximum 12 above the rest (the pass kept, its weights above 1) and 20 above (more than the
  // stored weights' slack of 16: the row computed again against its own maximum).
  constexpr std::size_t tile = kflash::impl::HostTraits::tile;
  for (std::size_t n : {tile + 988, short_row + 988}) {
    std::vector<float> special = normal_values<float>(7 * n, 19, 3.0);
    for (std::size_t c = 0; c < n; c += 7) special[c] = -i;  // row 0: masked elements
    for (std::size_t c = n; c < 2 * n; ++c) special[c] = -i;  // row 1: fully masked
    special[2 * n + tile + 491] = nan<float>;                 // row 2: NaN
    special[3 * n + n - 2] = i;                               // row 3: +inf
    special[4 * n + 600] = big;                               // row 4: a maximum far above the rest
    for (std::size_t c = 5 * n; c < 7 * n; ++c) special[c] /= 8;
    special[5 * n + 700] = 12.0f;  // row 5
    special[6 * n + 700] = 20.0f;  // row 6
    check_half_matrix<H, Kokkos::LayoutRight>(7, n, halves<H>(special), "special long");
    if (::testing::Test::HasFatalFailure()) return;
  }

  // One value above the rest of its row by 8, 12 or 20 (the others of standard deviation 1/8), so
  // that log_softmax's output at the maximum, -log l, is 2e-2 down to 1e-7 (rows of 64), where a
  // bf16 or fp16 unit is that small too: on AVX-512, log_softmax's 16-bit rows of at most a tile
  // take their sums by softmax's shorter exp, whose error must stay relative to log l. Rows of 64,
  // 300 and a tile + 100 (one pass against a guess, float's exp).
  for (std::size_t n : {std::size_t(64), std::size_t(300), tile + 100}) {
    std::vector<float> peaked = normal_values<float>(3 * n, 23, 1.0);
    for (float& v : peaked) v /= 8;
    peaked[n / 3] = 8.0f;
    peaked[n + n - 1] = 12.0f;
    peaked[2 * n + 5] = 20.0f;
    check_half_matrix<H, Kokkos::LayoutRight>(3, n, halves<H>(peaked), "one value above the rest");
    if (::testing::Test::HasFatalFailure()) return;
  }

  // Host tiles kept against a running maximum they exceed, their weights above 1, in rows through
  // softmax's tile loop (longer than short_row): row 0's last eight tiles each 15 above the last,
  // row 1's second tile 12 above the first and a maximum 95 above it at the end. The early tiles'
  // factor exp(reference - row maximum) is below fp32's smallest normal number while bf16
  // probabilities near e^-75 are normal. (log_softmax and logsumexp take such rows in segments of
  // short_row, below.)
  const std::size_t rising_tiles = short_row / tile + 8, rising_cols = rising_tiles * tile;
  std::vector<float> rising = normal_values<float>(2 * rising_cols, 20, 1.0);
  for (std::size_t c = 0; c < rising_cols; ++c) {
    const std::size_t t = c / tile, level = t + 8 < rising_tiles ? 0 : t + 8 - rising_tiles;
    rising[c] = float(15 * level) + rising[c] / 8;
    rising[rising_cols + c] = (c / tile == 1 ? 12.0f : 0.0f) + rising[rising_cols + c] / 8;
  }
  rising[2 * rising_cols - 1] = 95.0f;
  check_half_matrix<H, Kokkos::LayoutRight>(2, rising_cols, halves<H>(rising), "rising tiles");
  if (::testing::Test::HasFatalFailure()) return;

  // log_softmax's and logsumexp's rows longer than short_row, one pass against a guess of the
  // maximum in segments of short_row (values of standard deviation 1/8; the guess samples columns
  // 0, n / 4, n / 2 and n - 1, none of the raised ones): row 0's second segment 30 above the guess
  // in 64 columns (kept, the running sum rescaled), its third 70 above that (more than the slack of
  // 64: that segment against its own maximum, merged); row 1's second segment masked and a maximum
  // 40 above the rest in the last segment's tail; a NaN in row 2's tail; +inf in row 3's third
  // segment.
  const std::size_t seg_cols = 3 * short_row + 100;
  std::vector<float> segs = normal_values<float>(4 * seg_cols, 22, 1.0);
  for (float& v : segs) v /= 8;
  for (std::size_t c = 0; c < 64; ++c) {
    segs[short_row + 808 + c] += 30.0f;
    segs[2 * short_row + 616 + c] += 100.0f;
  }
  for (std::size_t c = short_row; c < 2 * short_row; ++c) segs[seg_cols + c] = -i;
  segs[2 * seg_cols - 50] = 40.0f;
  segs[3 * seg_cols - 3] = nan<float>;
  segs[3 * seg_cols + 2 * short_row + 300] = i;
  check_half_matrix<H, Kokkos::LayoutRight>(4, seg_cols, halves<H>(segs), "segments");

  // Every non-positive finite 16-bit value, 0 among them: softmax's weights exp(x - 0) of every
  // argument such a row gives its exp (on AVX-512 softmax's 16-bit rows take an exp of their own,
  // ExpAccuracy::output16), in one long row and in rows of one tile that each start with 0.
  std::vector<float> every{0.0f};
  for (std::uint32_t b = 0x8000u; b < 0x10000u; ++b) {
    float v;
    if constexpr (std::is_same<H, kflash::half_t>::value) {
      kflash::impl::Float16 h;
      h.bits = std::uint16_t(b);
      v = float(h);
    } else {
      v = kflash::impl::bits_float(b << 16);
    }
    if (std::isfinite(v)) every.push_back(v);
  }
  check_half_matrix<H, Kokkos::LayoutRight>(1, every.size(), halves<H>(every), "every value");
  const std::size_t short_cols = 300, short_rows = (every.size() + short_cols - 2) / (short_cols - 1);
  std::vector<float> tiles(short_rows * short_cols, -i);
  for (std::size_t k = 0; k < every.size(); ++k)
    tiles[k / (short_cols - 1) * short_cols + 1 + k % (short_cols - 1)] = every[k];
  for (std::size_t r = 0; r < short_rows; ++r) tiles[r * short_cols] = 0.0f;
  check_half_matrix<H, Kokkos::LayoutRight>(short_rows, short_cols, halves<H>(tiles), "every value, short rows");

  // A rank-1 View is one row (split into chunks for several threads).
  using Exec = TEST_EXECSPACE;
  const std::vector<H> host = halves<H>(normal_values<float>(140001, 15, 2.0));
  const auto x = make_vector<H, Exec>(host);
  Kokkos::View<H*, Exec::memory_space> y("y", host.size());
  kflash::softmax(Exec(), x, y);
  expect_half_row(host.data(), to_host(y).data(), host.size(), false, std::string("rank 1 ") + Half16<H>::name());
  Kokkos::View<float, Exec::memory_space> lse("lse");
  kflash::logsumexp(Exec(), x, lse);
  float got;
  Kokkos::deep_copy(got, lse);
  std::vector<ld> xs;
  for (H h : host) xs.push_back(wide(h));
  expect_lse_matches(reference_row(xs.data(), xs.size()), got, 8 * eps<float>, "rank 1 logsumexp");
}

/// SoftmaxStream<H>: rows x cols fed in tiles of `width`, the last tile first, then logsumexp (float
/// and 16-bit out), softmax into another View and log_softmax in place, each against the reference
/// of the same 16-bit values (the lse within the fp32 stream tests' bound).
template <class H>
void check_half_stream(std::size_t rows, std::size_t cols, const std::vector<H>& host, std::size_t width) {
  using Exec = TEST_EXECSPACE;
  using Mem = Exec::memory_space;
  const std::string where = std::string("SoftmaxStream<") + Half16<H>::name() + "> " + std::to_string(rows) + "x" +
                            std::to_string(cols) + " tiles of " + std::to_string(width);
  const auto x = make_matrix<H, Kokkos::LayoutRight, Exec>(rows, cols, host);
  Kokkos::View<H**, Kokkos::LayoutRight, Mem> y("y", rows, cols);
  kflash::SoftmaxStream<H, Exec> stream(Exec(), y);
  for (std::size_t end = cols; end > 0;) {
    const std::size_t begin = end > width ? end - width : 0;
    stream.update(Exec(), Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(begin, end)), std::int64_t(begin));
    end = begin;
  }
  Kokkos::View<float*, Mem> lse("lse", rows);
  Kokkos::View<H*, Mem> lse16("lse16", rows);
  stream.logsumexp(Exec(), lse);
  stream.logsumexp(Exec(), lse16);
  const auto got = to_host(lse);
  const auto got16 = to_host(lse16);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<ld> xs(cols);
    for (std::size_t c = 0; c < cols; ++c) xs[c] = wide(host[r * cols + c]);
    const RefRow ref = reference_row(xs.data(), cols);
    expect_lse_matches(ref, got[r], 2e-6L, where + " logsumexp row " + std::to_string(r));
    if (std::isnan(got[r])) EXPECT_TRUE(std::isnan(wide(got16[r]))) << where << " 16-bit logsumexp row " << r;
    else EXPECT_EQ(wide(got16[r]), wide(kflash::impl::narrow<H>(got[r]))) << where << " 16-bit logsumexp row " << r;
  }
  Kokkos::View<H**, Kokkos::LayoutRight, Mem> p("p", rows, cols);
  stream.finalize(Exec(), p, kflash::Normalize::prob);
  stream.finalize(Exec(), y, kflash::Normalize::log_prob);
  const auto prob = to_host_row_major(p), logp = to_host_row_major(y);
  for (std::size_t r = 0; r < rows; ++r) {
    expect_half_row(host.data() + r * cols, prob.data() + r * cols, cols, false, where + " softmax row " +
                                                                                      std::to_string(r));
    expect_half_row(host.data() + r * cols, logp.data() + r * cols, cols, true, where + " log_softmax row " +
                                                                                    std::to_string(r));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

template <class H>
void check_half_streams() {
  const std::size_t rows = 4, cols = 3000;
  std::vector<H> host = halves<H>(normal_values<float>(rows * cols, 61, 3.0));
  for (std::size_t c = 0; c < cols; c += 5) host[cols + c] = kflash::impl::narrow<H>(-HUGE_VALF);  // masked
  host[2 * cols + 1234] = kflash::impl::narrow<H>(nan<float>);                                      // a NaN row
  for (std::size_t width : {7, 1000, 3000}) {
    check_half_stream<H>(rows, cols, host, width);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(TEST_CATEGORY, HalfSoftmaxStream) {
  check_half_streams<kflash::bhalf_t>();
  check_half_streams<kflash::half_t>();
}

/// cross_entropy of 16-bit logits (float loss and mean) against the long-double reference loss of
/// the same 16-bit values, within the fp32 tolerance, with label smoothing, z-loss and ignored rows,
/// on rows the host kernels group, long rows (block by block), split rows and strided logits.
template <class H, class L>
void check_half_cross_entropy(std::size_t rows, std::size_t cols, unsigned seed, const std::string& what) {
  using Exec = TEST_EXECSPACE;
  using Mem = Exec::memory_space;
  const std::vector<H> host = halves<H>(normal_values<float>(rows * cols, seed, 3.0));
  std::vector<ld> wide_host(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) wide_host[i] = wide(host[i]);
  const std::vector<std::int64_t> targets = random_targets(rows, cols, seed + 1, 5);
  const auto logits = make_matrix<H, L, Exec>(rows, cols, host);
  const auto t = make_vector<std::int64_t, Exec>(targets);
  for (const kflash::CrossEntropyOptions o :
       {kflash::CrossEntropyOptions{}, kflash::CrossEntropyOptions{-100, 0.1, 1e-3}}) {
    Kokkos::View<float*, Mem> loss("loss", rows);
    Kokkos::View<float, Mem> mean("mean");
    kflash::cross_entropy(Exec(), logits, t, loss, mean, o);
    const auto got = to_host(loss);
    float got_mean;
    Kokkos::deep_copy(got_mean, mean);
    ld sum = 0;
    std::size_t counted = 0;
    const std::string where = what + " " + Half16<H>::name() + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                              " smoothing " + std::to_string(o.label_smoothing);
    for (std::size_t r = 0; r < rows; ++r) {
      const ld ref = reference_loss(wide_host.data() + r * cols, cols, targets[r], o);
      const ld lse = reference_row(wide_host.data() + r * cols, cols).lse();
      expect_loss_matches(ref, got[r], loss_tolerance<float>(ref, lse, o), where + " row " + std::to_string(r));
      if (targets[r] != o.ignore_index) sum += ref, ++counted;
    }
    const ld ref_mean = sum / ld(counted);
    EXPECT_LE(std::fabs(ld(got_mean) - ref_mean), 1e-5L * (1 + std::fabs(ref_mean))) << where << " mean";
  }
}

TEST(TEST_CATEGORY, HalfRowsCrossEntropy) {
  check_half_cross_entropy<kflash::bhalf_t, Kokkos::LayoutRight>(40, 700, 31, "grouped");
  check_half_cross_entropy<kflash::half_t, Kokkos::LayoutRight>(40, 700, 32, "grouped");
  check_half_cross_entropy<kflash::bhalf_t, Kokkos::LayoutRight>(12, 5000, 33, "long");
  check_half_cross_entropy<kflash::half_t, Kokkos::LayoutRight>(2, 140000, 34, "split");
  check_half_cross_entropy<kflash::bhalf_t, Kokkos::LayoutStride>(7, 300, 35, "strided");
}

/// run_rows16 with non-temporal stores (calls whose outputs have HostTraits::stream_bytes or more:
/// too large to allocate here, so called directly), against the reference like the plain stores:
/// rows of a tile (never streamed), rows taken in one pass against a guess of their maximum,
/// rows longer than short_row (softmax's tile loop, its weights in a buffer or computed again;
/// log_softmax's segments), with a row stride that starts rows off a vector's boundary, in place
/// too; nothing written past a row's end.
template <class H>
void check_half_rows_streamed() {
  namespace host = kflash::impl::host;
  using kflash::impl::index_t;
  using kflash::impl::RowOp;
  constexpr index_t tile = kflash::impl::HostTraits::tile, short_row = kflash::impl::HostTraits::short_row;
  const H seven = kflash::impl::narrow<H>(7.0f);
  auto bits = [](const H* p) { return reinterpret_cast<std::uint16_t*>(const_cast<H*>(p)); };
  for (index_t cols : {tile, 3 * tile + 37, short_row + 988, 3 * short_row + 100}) {
    const index_t rows = 3, ld = cols + 5;  // rows 1 and 2 start 10 and 20 bytes past row 0's alignment
    std::vector<float> v = normal_values<float>(std::size_t(rows * ld), 23, 3.0);
    v[std::size_t(ld + 77)] = -HUGE_VALF;       // a masked element
    v[std::size_t(2 * ld + cols - 1)] = 40.0f;  // a maximum in the last tail
    v[std::size_t(cols / 2)] = -90.0f;          // a weight below float's normal range
    const std::vector<H> x = halves<H>(v);
    std::vector<float> buffer(std::size_t(host::weights_elements(cols)));
    for (RowOp op : {RowOp::softmax, RowOp::log_softmax}) {
      for (bool buffered : {false, true}) {
        if (buffered && op != RowOp::softmax) continue;
        for (bool in_place : {false, true}) {
          std::vector<H> y = in_place ? x : std::vector<H>(x.size(), seven);
          host::RowBlock16 b{host::storage16_of<H>, op, bits(in_place ? y.data() : x.data()), ld,
                             bits(y.data()), ld, nullptr, nullptr, 0, rows, cols};
          if (buffered) {
            b.buffer = buffer.data();
            b.buffer_elements = index_t(buffer.size());
          }
          b.stream = true;
          host::run_rows16(b);
          const bool log_space = op == RowOp::log_softmax;
          for (index_t r = 0; r < rows; ++r) {
            const std::string where = std::string(Half16<H>::name()) + " streamed " + std::to_string(cols) +
                                      (log_space ? " log_softmax" : " softmax") + (buffered ? " buffered" : "") +
                                      (in_place ? " in place" : "") + " row " + std::to_string(r);
            expect_half_row(x.data() + r * ld, y.data() + r * ld, std::size_t(cols), log_space, where);
            if (::testing::Test::HasFatalFailure()) return;
            for (index_t c = cols; c < ld; ++c)
              ASSERT_EQ(wide(y[std::size_t(r * ld + c)]), wide(in_place ? x[std::size_t(r * ld + c)] : seven))
                  << where << ": written past the row's end, column " << c;
          }
        }
      }
    }
  }
}

/// As SoftmaxTest.HostKernelRowsInLanes on 16-bit rows (run_rows16): rows of 1 to 17 values, 37 of
/// them, the outputs rounded by masked stores (the gaps between rows keep their 7s), logsumexp's into
/// float; groups with a special row take the other way whole.
template <class H>
void check_half_rows_in_lanes() {
  namespace host = kflash::impl::host;
  using kflash::impl::index_t;
  using kflash::impl::RowOp;
  const index_t rows = 37;
  const float big = std::is_same<H, kflash::half_t>::value ? 6e4f : 1e30f;  // finite in H
  const H seven = kflash::impl::narrow<H>(7.0f);
  auto bits = [](const H* p) { return reinterpret_cast<std::uint16_t*>(const_cast<H*>(p)); };
  unsigned seed = 5300;
  for (index_t cols = 1; cols <= 17; ++cols)
    for (bool special : {false, true})
      for (index_t gap : {index_t(0), index_t(3)}) {
        const std::vector<H> v =
            halves<H>(lane_rows_values<float>(std::size_t(rows), std::size_t(cols), special, seed++, big));
        const index_t stride = cols + gap;
        std::vector<H> x(std::size_t(rows * stride), kflash::impl::narrow<H>(nan<float>));
        for (index_t r = 0; r < rows; ++r)
          std::copy(v.begin() + r * cols, v.begin() + (r + 1) * cols, x.begin() + r * stride);
        const std::string where = std::string(Half16<H>::name()) + " " + std::to_string(rows) + "x" +
                                  std::to_string(cols) + " stride " + std::to_string(stride) +
                                  (special ? " with special rows" : "");
        for (RowOp op : {RowOp::softmax, RowOp::log_softmax, RowOp::logsumexp})
          for (bool in_place : {false, true}) {
            if (op == RowOp::logsumexp && in_place) continue;
            std::vector<H> y = in_place ? x : std::vector<H>(x.size(), seven);
            std::vector<float> lse(std::size_t(rows), 7.0f);
            host::run_rows16(host::RowBlock16{host::storage16_of<H>, op, bits(in_place ? y.data() : x.data()), stride,
                                              bits(y.data()), stride, lse.data(), nullptr, 1, rows, cols});
            for (index_t r = 0; r < rows; ++r) {
              const std::string at = where + (op == RowOp::softmax       ? " softmax"
                                              : op == RowOp::log_softmax ? " log_softmax"
                                                                         : " logsumexp") +
                                     (in_place ? " in place" : "") + " row " + std::to_string(r);
              const H* row = v.data() + r * cols;
              if (op == RowOp::logsumexp) {
                std::vector<ld> xs(static_cast<std::size_t>(cols));
                for (index_t c = 0; c < cols; ++c) xs[std::size_t(c)] = wide(row[c]);
                const RefRow ref = reference_row(xs.data(), std::size_t(cols));
                expect_lse_matches(ref, lse[std::size_t(r)], 8 * eps<float>, at);
                continue;
              }
              expect_half_row(row, y.data() + r * stride, std::size_t(cols), op == RowOp::log_softmax, at);
              if (::testing::Test::HasFatalFailure()) return;
              for (index_t c = cols; c < stride && !in_place; ++c)
                ASSERT_EQ(wide(y[std::size_t(r * stride + c)]), wide(seven)) << at << ": written past the row's end";
            }
          }
      }
}

TEST(TEST_CATEGORY, HalfRowsHostKernelInLanes) {
  if (!kflash::impl::ScheduleTraits<TEST_EXECSPACE>::host_kernels) GTEST_SKIP() << "no host kernels here";
  check_half_rows_in_lanes<kflash::bhalf_t>();
  if (::testing::Test::HasFatalFailure()) return;
  check_half_rows_in_lanes<kflash::half_t>();
}

TEST(TEST_CATEGORY, HalfRowsHostKernelStreamed) {
  if (!kflash::impl::ScheduleTraits<TEST_EXECSPACE>::host_kernels) GTEST_SKIP() << "no host kernels here";
  check_half_rows_streamed<kflash::bhalf_t>();
  check_half_rows_streamed<kflash::half_t>();
}

/// As SoftmaxTest.RowsBesideUnreadablePages on 16-bit rows: contiguous rows of every length up to
/// 48 ending where an unreadable page begins, and starting where one ends.
template <class H, class Exec>
void check_half_rows_beside_guards_on() {
  const std::size_t rows = 3;
  unsigned seed = 4300;
  for_rows_beside_guards<H>(rows, 48, [&](const auto& x, const auto& y, std::size_t cols, const std::string& at) {
    const std::string where = std::string(Half16<H>::name()) + " " + at;
    const auto host = halves<H>(normal_values<float>(rows * cols, seed++, 3.0));
    std::copy(host.begin(), host.end(), x.data());
    for (bool log_space : {false, true}) {
      softmax_or_log_softmax<Exec>(log_space, x, y);
      for (std::size_t r = 0; r < rows; ++r) {
        expect_half_row(&x(r, 0), &y(r, 0), cols, log_space,
                        where + (log_space ? " log_softmax row " : " softmax row ") + std::to_string(r));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    Kokkos::View<float*, Kokkos::HostSpace> lse("lse", rows);
    kflash::logsumexp(Exec(), x, lse);
    Exec().fence();
    for (std::size_t r = 0; r < rows; ++r) {
      std::vector<ld> xs(cols);
      for (std::size_t c = 0; c < cols; ++c) xs[c] = wide(host[r * cols + c]);
      expect_lse_matches(reference_row(xs.data(), cols), lse(r), 8 * eps<float>,
                         where + " logsumexp row " + std::to_string(r));
    }
  });
}

/// The same where TEST_EXECSPACE reads host memory (a device space's build never instantiates it).
template <class H, class Exec>
void check_half_rows_beside_guards() {
  if constexpr (std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value)
    check_half_rows_beside_guards_on<H, Exec>();
}

TEST(TEST_CATEGORY, HalfRowsBesideUnreadablePages) {
  if (!std::is_same<TEST_EXECSPACE::memory_space, Kokkos::HostSpace>::value)
    GTEST_SKIP() << "host memory only (the rows live in mmap'ed pages)";
  check_half_rows_beside_guards<kflash::bhalf_t, TEST_EXECSPACE>();
  if (::testing::Test::HasFatalFailure()) return;
  check_half_rows_beside_guards<kflash::half_t, TEST_EXECSPACE>();
}

TEST(TEST_CATEGORY, HalfRowsSoftmaxLogSoftmaxLogsumexp) {
  check_half_rows<kflash::bhalf_t>();
  check_half_rows<kflash::half_t>();
}

}  // namespace kflash_test
