// kflash::cross_entropy on TEST_EXECSPACE against a long-double reference: layouts, target types,
// label smoothing, z-loss, ignore_index and the mean; rows split across threads; the 262144-class
// accuracy bound; special values; errors.
#pragma once

#include <CrossEntropyCommon.hpp>

namespace kflash_test {

template <class T>
struct CrossEntropyTest : ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyTest, Scalars);

template <class T, class L>
void check_shapes() {
  // 1000x37 and 300x512: rows of at most one host tile, whose statistics the host kernel takes 16
  // rows at a time (whole groups and a partial one in each work item).
  const std::pair<std::size_t, std::size_t> shapes[] = {{1, 1}, {3, 7}, {1000, 37}, {300, 512}, {17, 1000}, {64, 513}, {5, 70000}, {1, 200000}};
  kflash::CrossEntropyOptions plain, smoothed, z, all;
  smoothed.label_smoothing = 0.1;
  z.z_loss = 1e-4;
  all.label_smoothing = 0.25;
  all.z_loss = 1e-3;
  all.ignore_index = 0;
  unsigned seed = 1;
  for (const auto& s : shapes) {
    const auto host = normal_values<T>(s.first * s.second, seed++, 3.0);
    for (const auto* o : {&plain, &smoothed, &z, &all}) {
      const auto targets = random_targets(s.first, s.second, seed++, 4, o->ignore_index);
      const std::string where = std::to_string(s.first) + "x" + std::to_string(s.second) + " smoothing " +
                                std::to_string(o->label_smoothing) + " z " + std::to_string(o->z_loss);
      check_cross_entropy<T, L>(s.first, s.second, host, targets, *o, where);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TYPED_TEST(CrossEntropyTest, LayoutRight) { check_shapes<TypeParam, Kokkos::LayoutRight>(); }
TYPED_TEST(CrossEntropyTest, LayoutLeft) { check_shapes<TypeParam, Kokkos::LayoutLeft>(); }
TYPED_TEST(CrossEntropyTest, LayoutStride) { check_shapes<TypeParam, Kokkos::LayoutStride>(); }

TYPED_TEST(CrossEntropyTest, TargetTypes) {
  using T = TypeParam;
  const std::size_t rows = 9, cols = 300;
  const auto host = normal_values<T>(rows * cols, 7);
  const auto targets = random_targets(rows, cols, 8, 3);
  kflash::CrossEntropyOptions o;
  check_cross_entropy<T, Kokkos::LayoutRight, int>(rows, cols, host, targets, o, "int targets");
  check_cross_entropy<T, Kokkos::LayoutRight, std::int16_t>(rows, cols, host, targets, o, "int16 targets");
  check_cross_entropy<T, Kokkos::LayoutRight, unsigned>(rows, cols, host, random_targets(rows, cols, 9, 0), o,
                                                        "unsigned targets");
}

// The bound: 262144 classes in fp32 within 1e-6 relative of the long-double loss.
TYPED_TEST(CrossEntropyTest, Vocabulary262144Accuracy) {
  using T = TypeParam;
  const std::size_t rows = 4, cols = 262144;
  const auto host = normal_values<T>(rows * cols, 11, 4.0);
  const auto targets = random_targets(rows, cols, 12, 0);
  kflash::CrossEntropyOptions smoothed;
  smoothed.label_smoothing = 0.1;
  smoothed.z_loss = 1e-4;
  for (const auto& o : {kflash::CrossEntropyOptions{}, smoothed}) {
    const auto logits = make_matrix<T, Kokkos::LayoutRight, TEST_EXECSPACE>(rows, cols, host);
    const auto t = make_vector<std::int64_t, TEST_EXECSPACE>(targets);
    Kokkos::View<T*, TEST_EXECSPACE::memory_space> loss("loss", rows);
    kflash::cross_entropy(TEST_EXECSPACE(), logits, t, loss, o);
    const auto got = to_host(loss);
    const ld rel = std::is_same<T, float>::value ? 1e-6L : 1e-13L;
    for (std::size_t r = 0; r < rows; ++r) {
      const ld ref = reference_loss(host.data() + r * cols, cols, targets[r], o);
      EXPECT_LE(std::fabs(ld(got[r]) - ref), rel * std::fabs(ref))
          << "row " << r << " smoothing " << o.label_smoothing << ": got " << got[r] << " ref " << ref;
    }
  }
}

// The contract: NaN or +inf in a row gives NaN; a target (or every logit) at -inf gives +inf; a -inf
// elsewhere matters only to label smoothing (+inf); ignored rows are 0 whatever they hold; logits of
// any finite magnitude never overflow.
TYPED_TEST(CrossEntropyTest, SpecialValues) {
  using T = TypeParam;
  const std::size_t cols = 40;
  const T big = std::numeric_limits<T>::max();
  std::vector<std::vector<T>> rows_v;
  std::vector<std::int64_t> targets;
  auto add = [&](std::vector<T> row, std::int64_t t) {
    rows_v.push_back(std::move(row));
    targets.push_back(t);
  };
  const auto base = normal_values<T>(cols, 21);
  auto with = [&](std::size_t at, T v) {
    auto r = base;
    r[at] = v;
    return r;
  };
  add(with(5, nan<T>), 3);                    // NaN elsewhere: NaN
  add(with(5, inf<T>), 3);                    // +inf elsewhere: NaN
  add(with(3, -inf<T>), 3);                   // target at -inf: +inf
  add(with(5, -inf<T>), 3);                   // -inf elsewhere: finite (smoothing: +inf)
  add(std::vector<T>(cols, -inf<T>), 3);      // all -inf: +inf
  add(with(5, nan<T>), -100);                 // ignored: 0
  add(with(7, big), 7);                       // target at the largest finite value: loss ~ 0
  add(with(7, -big), 9);                      // the lowest finite value elsewhere (smoothing: a huge finite loss)
  std::vector<T> host;
  for (const auto& r : rows_v) host.insert(host.end(), r.begin(), r.end());
  kflash::CrossEntropyOptions plain, smoothed;
  smoothed.label_smoothing = 0.2;
  for (const auto& o : {plain, smoothed}) {
    const std::size_t rows = rows_v.size();
    const std::string where = "special values, smoothing " + std::to_string(o.label_smoothing);
    check_cross_entropy<T, Kokkos::LayoutRight>(rows, cols, host, targets, o, where);
  }
}

TYPED_TEST(CrossEntropyTest, MeanOverNoRowsIsNaN) {
  using T = TypeParam;
  const auto host = normal_values<T>(3 * 10, 31);
  check_cross_entropy<T, Kokkos::LayoutRight>(3, 10, host, {-100, -100, -100}, {}, "all rows ignored");
  check_cross_entropy<T, Kokkos::LayoutRight>(0, 10, {}, {}, {}, "no rows");
}

TYPED_TEST(CrossEntropyTest, Deterministic) {
  using T = TypeParam;
  const std::size_t rows = 3, cols = 100000;
  const auto logits = make_matrix<T, Kokkos::LayoutRight, TEST_EXECSPACE>(rows, cols, normal_values<T>(rows * cols, 41));
  const auto t = make_vector<std::int64_t, TEST_EXECSPACE>(random_targets(rows, cols, 42, 0));
  Kokkos::View<T*, TEST_EXECSPACE::memory_space> a("a", rows), b("b", rows);
  Kokkos::View<T, TEST_EXECSPACE::memory_space> ma("ma"), mb("mb");
  kflash::CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  kflash::cross_entropy(TEST_EXECSPACE(), logits, t, a, ma, o);
  kflash::cross_entropy(logits, t, b, mb, o);  // the default execution space's overload
  const auto ha = to_host(a), hb = to_host(b);
  for (std::size_t r = 0; r < rows; ++r) EXPECT_EQ(ha[r], hb[r]) << "row " << r;
  T x, y;
  Kokkos::deep_copy(x, ma);
  Kokkos::deep_copy(y, mb);
  EXPECT_EQ(x, y);
}

TYPED_TEST(CrossEntropyTest, Errors) {
  using T = TypeParam;
  using Mem = TEST_EXECSPACE::memory_space;
  const std::size_t rows = 4, cols = 5;
  const auto host = normal_values<T>(rows * cols, 51);
  const auto logits = make_matrix<T, Kokkos::LayoutRight, TEST_EXECSPACE>(rows, cols, host);
  Kokkos::View<T*, Mem> loss("loss", rows);
  // A target outside [0, vocab): every other row is written, that one is NaN, and the first such
  // row is named.
  const auto bad = make_vector<std::int64_t, TEST_EXECSPACE>({1, 7, 2, -3});
  expect_invalid([&] { kflash::cross_entropy(TEST_EXECSPACE(), logits, bad, loss); },
                 {"kflash::cross_entropy", "targets(1) = 7", "[0, 5) (the vocabulary: 'logits (4, 5)' extent 1)",
                  "ignore_index (-100)"});
  const auto got = to_host(loss);
  EXPECT_TRUE(std::isnan(got[1]) && std::isnan(got[3]));
  for (std::size_t r : {std::size_t(0), std::size_t(2)}) {
    const ld ref = reference_loss(host.data() + r * cols, cols, r == 0 ? 1 : 2, {});
    EXPECT_LE(std::fabs(ld(got[r]) - ref), loss_tolerance<T>(ref, 0, {})) << "row " << r;
  }
  // Rows enough for several rows per work item: the first bad row is named whichever item or thread
  // finds it first, and every other row's loss is still written.
  {
    const std::size_t many = 5000, vocab = 37;
    const auto values = normal_values<T>(many * vocab, 53);
    auto targets = random_targets(many, vocab, 54, 0);
    targets[1200] = -100;
    targets[3001] = 40;
    targets[4500] = -1;
    Kokkos::View<T*, Mem> losses("losses", many);
    expect_invalid([&] {
      kflash::cross_entropy(TEST_EXECSPACE(), make_matrix<T, Kokkos::LayoutRight, TEST_EXECSPACE>(many, vocab, values),
                            make_vector<std::int64_t, TEST_EXECSPACE>(targets), losses);
    }, {"targets(3001) = 40", "[0, 37)"});
    const auto out = to_host(losses);
    EXPECT_TRUE(std::isnan(out[3001]) && std::isnan(out[4500]));
    EXPECT_EQ(out[1200], T(0));
    for (std::size_t r : {std::size_t(0), std::size_t(1199), std::size_t(3000), std::size_t(3002), many - 1}) {
      const ld ref = reference_loss(values.data() + r * vocab, vocab, targets[r], {});
      EXPECT_LE(std::fabs(ld(out[r]) - ref), loss_tolerance<T>(ref, 0, {})) << "row " << r;
    }
  }
  const auto good = make_vector<std::int64_t, TEST_EXECSPACE>({0, 1, 2, 3});
  expect_invalid([&] { kflash::cross_entropy(TEST_EXECSPACE(), logits, make_vector<std::int64_t, TEST_EXECSPACE>({0, 1}), loss); },
                 {"targets (2)", "logits (4, 5)"});
  expect_invalid([&] { kflash::cross_entropy(TEST_EXECSPACE(), logits, good, Kokkos::View<T*, Mem>("l", 3)); },
                 {"loss (3)", "logits (4, 5)"});
  expect_invalid([&] { kflash::cross_entropy(TEST_EXECSPACE(), Kokkos::View<T*, Mem>("x", 5), good, loss); },
                 {"logits (5)", "rank 1, expected rank 2"});
  kflash::CrossEntropyOptions o;
  const auto column = Kokkos::subview(logits, Kokkos::ALL, 4);
  expect_invalid([&] { kflash::cross_entropy(TEST_EXECSPACE(), logits, good, column); },
                 {"kflash::cross_entropy", "'loss (4)' overlaps 'logits (4, 5)'"});
  o.label_smoothing = 1.5;
  expect_invalid([&] { kflash::cross_entropy(TEST_EXECSPACE(), logits, good, loss, o); },
                 {"options.label_smoothing = 1.5"});
  o.label_smoothing = 0;
  o.z_loss = -1;
  expect_invalid([&] { kflash::cross_entropy(TEST_EXECSPACE(), logits, good, loss, o); }, {"options.z_loss = -1"});
}

}  // namespace kflash_test
