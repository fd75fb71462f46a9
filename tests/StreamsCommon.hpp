// What the stream tests and the fuzzer share: tiles of a row, and a SoftmaxStream fed and checked
// against the long-double references.
#pragma once

#include <AttentionCommon.hpp>

#include <algorithm>

namespace kflash_test {

/// The tiles [begin, end) of `cols` columns of width `width` (the last one shorter), shuffled when
/// `seed` is not 0.
inline std::vector<std::pair<std::size_t, std::size_t>> tiles_of(std::size_t cols, std::size_t width,
                                                                 unsigned seed) {
  std::vector<std::pair<std::size_t, std::size_t>> t;
  for (std::size_t b = 0; b < cols; b += width) t.emplace_back(b, std::min(cols, b + width));
  if (seed != 0) std::shuffle(t.begin(), t.end(), std::mt19937(seed));
  return t;
}

/// Feeds rows x cols host values to a SoftmaxStream in tiles of `width` (strided tiles: every other
/// column of a wider View), then checks logsumexp, softmax into another View and log_softmax in
/// place against the reference. Rows of the contract's l bound: 2e-6 (fp32) / 2e-13 (fp64) relative.
template <class T, class YLayout>
void check_softmax_stream(std::size_t rows, std::size_t cols, const std::vector<T>& host, std::size_t width,
                          unsigned seed) {
  using Exec = AExec;
  const std::string where = "SoftmaxStream " + std::to_string(rows) + "x" + std::to_string(cols) + " tiles of " +
                            std::to_string(width) + (seed ? " shuffled" : " in order");
  Kokkos::View<T**, YLayout, AMem> y("y", rows, cols);
  kflash::SoftmaxStream<T, Exec> stream(Exec(), y);
  Kokkos::View<T***, Kokkos::LayoutRight, AMem> wide("tile", rows, width, 2);
  auto wide_h = Kokkos::create_mirror_view(wide);
  for (const auto& t : tiles_of(cols, width, seed)) {
    const std::size_t w = t.second - t.first;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < w; ++c) wide_h(r, c, 1) = host[r * cols + t.first + c];
    Kokkos::deep_copy(wide, wide_h);
    auto tile = Kokkos::subview(wide, Kokkos::ALL, Kokkos::make_pair(std::size_t(0), w), 1);
    stream.update(Exec(), tile, std::int64_t(t.first));
    Exec().fence();  // the next tile reuses the host buffer's View
  }
  ASSERT_EQ(stream.columns_absorbed(), std::int64_t(cols)) << where;
  const ld rel_l = std::is_same<T, float>::value ? 2e-6L : 2e-13L;
  Kokkos::View<T*, AMem> lse("lse", rows);
  stream.logsumexp(Exec(), lse);
  const auto got_lse = to_host(lse);
  std::vector<RefRow> refs(rows);
  for (std::size_t r = 0; r < rows; ++r) refs[r] = reference_row(host.data() + r * cols, cols);
  for (std::size_t r = 0; r < rows; ++r) {
    expect_lse_matches(refs[r], got_lse[r], rel_l,
                       where + " logsumexp row " + std::to_string(r));
    if (::testing::Test::HasFatalFailure()) return;
  }
  Kokkos::View<T**, Kokkos::LayoutRight, AMem> p("p", rows, cols);
  stream.finalize(Exec(), p, kflash::Normalize::prob);
  stream.finalize(Exec(), y, kflash::Normalize::log_prob);
  const auto prob = to_host_row_major(p), logp = to_host_row_major(y);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* x = host.data() + r * cols;
    expect_row_matches(refs[r], x, prob.data() + r * cols, cols, false, where + " softmax row " + std::to_string(r));
    expect_row_matches(refs[r], x, logp.data() + r * cols, cols, true, where + " log_softmax row " + std::to_string(r));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace kflash_test
