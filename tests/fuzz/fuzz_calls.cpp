// Differential fuzzer: random calls of kflash's entry points on the default host execution space,
// each checked against the long-double references of the tests and the numerics contract.
//
// Every case draws all its choices from one 64-bit case seed, printed with the failure:
//   KFLASH_FUZZ_SEED=S        the run's seed (default: from the clock; printed first)
//   KFLASH_FUZZ_SECONDS=N     the time budget (default 30)
//   KFLASH_FUZZ_CASE=C        run the one case C only (what a failure prints to reproduce it)
#include <Kokkos_Core.hpp>
#define TEST_EXECSPACE Kokkos::DefaultHostExecutionSpace
#define TEST_CATEGORY fuzz

#include <CrossEntropyCommon.hpp>
#include <StreamsCommon.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

namespace kflash_test {
namespace {

using Rng = std::mt19937_64;

std::size_t pick(Rng& g, std::initializer_list<std::size_t> choices) {
  return choices.begin()[g() % choices.size()];
}
bool chance(Rng& g, double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }

/// Row values: normal values of a random magnitude (tiny to near the type's maximum), with special
/// values (-inf, +inf, NaN, +-max, the smallest subnormal, 0) sprinkled in some cases.
template <class T>
std::vector<T> fuzz_values(Rng& g, std::size_t n) {
  const double sigmas[] = {1e-30, 1e-3, 1, 30, 1e4, 1e30, double(std::numeric_limits<T>::max()) / 8};
  std::vector<T> v = normal_values<T>(n, unsigned(g()), sigmas[g() % 7]);
  if (n > 0 && chance(g, 0.35)) {
    const T specials[] = {-inf<T>, inf<T>, nan<T>, std::numeric_limits<T>::max(), -std::numeric_limits<T>::max(),
                          std::numeric_limits<T>::denorm_min(), T(0)};
    const std::size_t count = 1 + g() % 4;
    for (std::size_t c = 0; c < count; ++c) v[g() % n] = specials[g() % 7];
  }
  if (n > 0 && chance(g, 0.1)) std::fill(v.begin(), v.end(), -inf<T>);  // a fully masked input
  return v;
}

std::size_t fuzz_cols(Rng& g) { return pick(g, {0, 1, 2, 3, 7, 13, 31, 64, 127, 511, 512, 513, 1031, 4099, 70001}); }
std::size_t fuzz_rows(Rng& g) { return pick(g, {0, 1, 2, 3, 5, 7, 13, 17, 64}); }

/// softmax, log_softmax or logsumexp of rows x cols values, any layout, in place or not; rank 1
/// for a single row some of the time.
template <class T, class L>
std::string fuzz_rows_case(Rng& g) {
  using Exec = AExec;
  std::size_t rows = fuzz_rows(g), cols = fuzz_cols(g);
  if (cols > 4099) rows = std::min<std::size_t>(rows, 2);
  const std::vector<T> host = fuzz_values<T>(g, rows * cols);
  const int op = int(g() % 3);
  const bool in_place = op < 2 && chance(g, 0.3), rank1 = rows == 1 && chance(g, 0.5);
  const std::string where = std::string(op == 0 ? "softmax" : op == 1 ? "log_softmax" : "logsumexp") + " " +
                            std::to_string(rows) + "x" + std::to_string(cols) + (in_place ? " in place" : "") +
                            (rank1 ? " rank 1" : "");
  const auto x = make_matrix<T, L, Exec>(rows, cols, host);
  std::vector<T> got;
  if (op == 2) {
    if (rank1) {
      Kokkos::View<T, AMem> out("out");
      kflash::logsumexp(Exec(), Kokkos::subview(x, 0, Kokkos::ALL), out);
      got.resize(1);
      Kokkos::deep_copy(got[0], out);
    } else {
      Kokkos::View<T*, AMem> out("out", rows);
      kflash::logsumexp(Exec(), x, out);
      got = to_host(out);
    }
    const ld rel_l = std::is_same<T, float>::value ? 2e-6L : 2e-13L;
    for (std::size_t r = 0; r < rows; ++r) {
      expect_lse_matches(reference_row(host.data() + r * cols, cols), got[r], rel_l, where + " row " + std::to_string(r));
      if (::testing::Test::HasFatalFailure()) break;
    }
    return where;
  }
  const auto y = in_place ? x : make_matrix<T, L, Exec>(rows, cols, std::vector<T>(rows * cols, T(7)));
  auto run = [&](const auto& xv, const auto& yv) {
    if (op == 0) kflash::softmax(Exec(), xv, yv);
    else kflash::log_softmax(Exec(), xv, yv);
  };
  if (rank1) run(Kokkos::subview(x, 0, Kokkos::ALL), Kokkos::subview(y, 0, Kokkos::ALL));
  else run(x, y);
  got = to_host_row_major(y);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = host.data() + r * cols;
    expect_row_matches(reference_row(xr, cols), xr, got.data() + r * cols, cols, op == 1,
                       where + " row " + std::to_string(r));
    if (::testing::Test::HasFatalFailure()) break;
  }
  return where;
}

template <class T>
std::string fuzz_cross_entropy_case(Rng& g) {
  std::size_t rows = fuzz_rows(g), cols = std::max<std::size_t>(1, fuzz_cols(g));
  if (cols > 4099) rows = std::min<std::size_t>(rows, 2);
  const std::vector<T> host = fuzz_values<T>(g, rows * cols);
  kflash::CrossEntropyOptions o;
  if (chance(g, 0.4)) o.label_smoothing = pick(g, {0, 1, 5, 10, 25, 100}) / 100.0;
  if (chance(g, 0.4)) o.z_loss = pick(g, {1, 10, 100}) * 1e-4;
  if (chance(g, 0.3)) o.ignore_index = std::int64_t(g() % cols);
  // Label smoothing sums a row's logits in T: a row whose finite logits add up past T's range is
  // outside what cross_entropy promises (README, Cross-entropy), so such rows go without smoothing.
  for (std::size_t r = 0; r < rows && o.label_smoothing != 0; ++r) {
    ld finite_sum = 0;
    for (std::size_t c = 0; c < cols; ++c)
      if (std::isfinite(host[r * cols + c])) finite_sum += std::fabs(ld(host[r * cols + c]));
    if (finite_sum > ld(std::numeric_limits<T>::max()) / 2) o.label_smoothing = 0;
  }
  const auto targets = random_targets(rows, cols, unsigned(g()), pick(g, {0, 2, 3}), o.ignore_index);
  const std::string where = "cross_entropy " + std::to_string(rows) + "x" + std::to_string(cols) + " smoothing " +
                            std::to_string(o.label_smoothing) + " z " + std::to_string(o.z_loss) + " ignore " +
                            std::to_string(o.ignore_index);
  if (chance(g, 0.5)) check_cross_entropy<T, Kokkos::LayoutRight>(rows, cols, host, targets, o, where);
  else check_cross_entropy<T, Kokkos::LayoutStride, std::int32_t>(rows, cols, host, targets, o, where);
  return where;
}

/// Attention with a random shape (GQA/MQA, empty sides, odd head dimensions), layout, schedule and
/// mix of options, against the reference that applies the documented semantics literally.
template <class T>
std::string fuzz_attention_case(Rng& g) {
  AttnShape s{};
  s.B = pick(g, {1, 1, 2, 3});
  s.Hk = pick(g, {1, 1, 2});
  s.Hq = s.Hk * pick(g, {1, 2, 3});
  s.Nq = pick(g, {0, 1, 2, 5, 17, 64, 129});
  s.Nk = pick(g, {0, 1, 3, 16, 31, 128, 257});
  s.D = pick(g, {1, 3, 8, 16, 32, 64, 80, 128});
  s.Dv = chance(g, 0.5) ? s.D : pick(g, {1, 5, 16, 24, 64});
  s.causal = chance(g, 0.4);
  const auto a = make_attn_data<T>(s, unsigned(g()), chance(g, 0.2) ? 4.0 : 1.0);
  RefTerms t;
  if (chance(g, 0.3)) t.left = int(g() % (s.Nk + 2));
  if (chance(g, 0.3)) t.right = int(g() % (s.Nk + 2));
  if (chance(g, 0.25)) t.softcap = ld(pick(g, {5, 10, 30}));
  if (chance(g, 0.25)) {
    t.slopes_batched = chance(g, 0.5);
    t.slopes = rounded<T>(uniform_values<T>(s.Hq * (t.slopes_batched ? s.B : 1), unsigned(g()), 0, 0.5));
  }
  if (chance(g, 0.25)) t.sinks = rounded<T>(uniform_values<T>(s.Hq, unsigned(g()), -2, 2));
  if (chance(g, 0.25)) {
    t.bias_b = chance(g, 0.5) ? s.B : 1, t.bias_h = chance(g, 0.5) ? s.Hq : 1;
    t.bias = rounded<T>(uniform_values<T>(t.bias_b * t.bias_h * s.Nq * s.Nk, unsigned(g()), -3, 3));
    if (!t.bias.empty() && chance(g, 0.3)) t.bias[g() % t.bias.size()] = -inf<ld>;
  }
  if (chance(g, 0.25)) {
    t.mask_b = chance(g, 0.5) ? s.B : 1, t.mask_h = chance(g, 0.5) ? s.Hq : 1;
    t.mask.resize(t.mask_b * t.mask_h * s.Nq * s.Nk);
    for (char& m : t.mask) m = chance(g, 0.8);
  }
  kflash::AttentionOptions opt = schedules(s.causal)[g() % 3];
  if (chance(g, 0.2)) opt.scale = double(T(pick(g, {1, 3, 50}) / 100.0));
  const bool bnhd = chance(g, 0.4);
  const std::string where = "attention (" + std::string(opt.schedule == kflash::AttentionSchedule::prefill ? "prefill"
                                                        : opt.schedule == kflash::AttentionSchedule::split_kv
                                                            ? "split_kv"
                                                            : "auto") +
                            ", window " + std::to_string(t.left) + "/" + std::to_string(t.right) + ", softcap " +
                            std::to_string(double(t.softcap)) + ", alibi " + std::to_string(t.slopes.size()) +
                            ", sinks " + std::to_string(t.sinks.size()) + ", bias " + std::to_string(t.bias.size()) +
                            ", mask " + std::to_string(t.mask.size()) + ")";
  run_attention<T>(a, opt, bnhd, where, LibraryAttention<>(), t);
  return where + " " + describe(s);
}

/// merge_attention of the attention results over random cuts of the keys.
template <class T>
std::string fuzz_merge_case(Rng& g) {
  AttnShape s{pick(g, {1, 2}), 0, pick(g, {1, 2}), pick(g, {1, 3, 17}), pick(g, {1, 40, 203}), pick(g, {8, 16, 64}),
              pick(g, {8, 24})};
  s.Hq = s.Hk * pick(g, {1, 2});
  std::vector<std::size_t> cuts = {0, s.Nk};
  const std::size_t extra = g() % 4;
  for (std::size_t c = 0; c < extra; ++c) cuts.push_back(g() % (s.Nk + 1));
  std::sort(cuts.begin(), cuts.end());
  const std::string where = "merge_attention of " + std::to_string(cuts.size() - 1) + " parts " + describe(s);
  check_merge_of_parts<T>(s, unsigned(g()), cuts, where);
  return where;
}

/// A SoftmaxStream fed in tiles of a random width, in order or shuffled.
template <class T>
std::string fuzz_stream_case(Rng& g) {
  const std::size_t rows = pick(g, {1, 2, 5}), cols = std::max<std::size_t>(1, pick(g, {1, 7, 64, 513, 1031}));
  const std::vector<T> host = fuzz_values<T>(g, rows * cols);
  const std::size_t width = 1 + g() % cols;
  const unsigned order = chance(g, 0.5) ? 0u : unsigned(1 + g() % 1000);
  const std::string where = "SoftmaxStream " + std::to_string(rows) + "x" + std::to_string(cols) + " width " +
                            std::to_string(width);
  if (chance(g, 0.5)) check_softmax_stream<T, Kokkos::LayoutRight>(rows, cols, host, width, order);
  else check_softmax_stream<T, Kokkos::LayoutLeft>(rows, cols, host, width, order);
  return where;
}

/// One case, every choice drawn from the case seed. Returns what it ran, for the report.
std::string run_case(std::uint64_t case_seed, std::map<std::string, int>& counts) {
  Rng g(case_seed);
  const bool fp32 = chance(g, 0.5);
  const int kind = int(g() % 8);
  std::string kind_name;
  std::string what;
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    switch (kind) {
      case 0: kind_name = "rows (LayoutRight)"; what = fuzz_rows_case<T, Kokkos::LayoutRight>(g); break;
      case 1: kind_name = "rows (LayoutLeft)"; what = fuzz_rows_case<T, Kokkos::LayoutLeft>(g); break;
      case 2: kind_name = "rows (LayoutStride)"; what = fuzz_rows_case<T, Kokkos::LayoutStride>(g); break;
      case 3: kind_name = "cross_entropy"; what = fuzz_cross_entropy_case<T>(g); break;
      case 4:
      case 5: kind_name = "attention"; what = fuzz_attention_case<T>(g); break;
      case 6: kind_name = "merge_attention"; what = fuzz_merge_case<T>(g); break;
      default: kind_name = "SoftmaxStream"; what = fuzz_stream_case<T>(g); break;
    }
  };
  if (fp32) typed(float());
  else typed(double());
  ++counts[kind_name + (fp32 ? " fp32" : " fp64")];
  return std::string(fp32 ? "fp32 " : "fp64 ") + what;
}

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : fallback;
}

/// The case seeds of a run: a SplitMix64 sequence from the run's seed.
std::uint64_t case_seed_of(std::uint64_t run_seed, std::uint64_t i) {
  std::uint64_t z = run_seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

TEST(Fuzz, EntryPointsAgainstReferences) {
  std::map<std::string, int> counts;
  const char* one = std::getenv("KFLASH_FUZZ_CASE");
  const std::string program = ::testing::internal::GetArgvs()[0];
  if (one && *one) {
    const std::uint64_t c = env_u64("KFLASH_FUZZ_CASE", 0);
    const std::string what = run_case(c, counts);
    std::cout << "kflash fuzz: case " << c << ": " << what << "\n";
    return;
  }
  const auto now = std::chrono::steady_clock::now;
  const std::uint64_t seed =
      env_u64("KFLASH_FUZZ_SEED", std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count()));
  const double seconds = double(env_u64("KFLASH_FUZZ_SECONDS", 30));
  std::cout << "kflash fuzz: seed " << seed << ", " << seconds << " s (KFLASH_FUZZ_SEED=" << seed
            << " KFLASH_FUZZ_SECONDS=" << seconds << " " << program << " runs the same cases)\n";
  const auto start = now();
  std::uint64_t i = 0;
  for (; std::chrono::duration<double>(now() - start).count() < seconds; ++i) {
    const std::uint64_t c = case_seed_of(seed, i);
    std::string what;
    {
      SCOPED_TRACE("fuzz case " + std::to_string(c) + " (reproduce: KFLASH_FUZZ_CASE=" + std::to_string(c) + " " +
                   program + ")");
      what = run_case(c, counts);
    }
    if (::testing::Test::HasFailure()) {
      std::cout << "kflash fuzz: case " << c << " failed: " << what << "\n  reproduce: KFLASH_FUZZ_CASE=" << c << " "
                << program << "\n";
      break;
    }
  }
  std::cout << "kflash fuzz: " << i << " cases";
  for (const auto& [name, n] : counts) std::cout << ", " << name << " " << n;
  std::cout << "\n";
  EXPECT_GT(i, 0u) << "no case ran within the budget";
}

}  // namespace
}  // namespace kflash_test

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  int result = 0;
  {
    ::testing::InitGoogleTest(&argc, argv);
    result = RUN_ALL_TESTS();
  }
  Kokkos::finalize();
  return result;
}
