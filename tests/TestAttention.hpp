// kflash::attention, merge_attention and AttentionState on TEST_EXECSPACE against a long-double
// reference that materialises the scores.
#pragma once

#include <TestCommon.hpp>

#include <cstdio>
#include <cstdlib>

namespace kflash_test {

using AExec = TEST_EXECSPACE;
using AMem = AExec::memory_space;

struct AttnShape {
  std::size_t B, Hq, Hk, Nq, Nk, D, Dv;
  bool causal = false;
};

inline std::string describe(const AttnShape& s) {
  return "B=" + std::to_string(s.B) + " Hq=" + std::to_string(s.Hq) + " Hk=" + std::to_string(s.Hk) +
         " Nq=" + std::to_string(s.Nq) + " Nk=" + std::to_string(s.Nk) + " D=" + std::to_string(s.D) +
         " Dv=" + std::to_string(s.Dv) + (s.causal ? " causal" : "");
}

/// Host data in logical (b, h, n, d) order, row-major.
template <class T>
struct AttnData {
  AttnShape s;
  std::vector<T> q, k, v;
};

template <class T>
AttnData<T> make_attn_data(const AttnShape& s, unsigned seed, double sigma = 1.0) {
  return {s, normal_values<T>(s.B * s.Hq * s.Nq * s.D, seed, sigma),
          normal_values<T>(s.B * s.Hk * s.Nk * s.D, seed + 1, sigma),
          normal_values<T>(s.B * s.Hk * s.Nk * s.Dv, seed + 2)};
}

struct AttnRef {
  std::vector<ld> o, lse;
  ld max_abs_o = 0;
  ld max_abs_dot = 0;  // max over rows and keys of sum_d |scale q_d k_d|: the scores' rounding scale
};

template <class T>
AttnRef reference_attention(const AttnData<T>& a, ld scale) {
  const AttnShape& s = a.s;
  AttnRef r;
  r.o.assign(s.B * s.Hq * s.Nq * s.Dv, 0);
  r.lse.assign(s.B * s.Hq * s.Nq, -inf<ld>);
  std::vector<ld> sc(s.Nk);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.Hq; ++h) {
      const std::size_t hk = h / (s.Hq / s.Hk);
      for (std::size_t i = 0; i < s.Nq; ++i) {
        const T* qi = &a.q[((b * s.Hq + h) * s.Nq + i) * s.D];
        const long long last = s.causal ? (long long)i + (long long)s.Nk - (long long)s.Nq : (long long)s.Nk - 1;
        ld m = -inf<ld>;
        for (std::size_t j = 0; j < s.Nk && (long long)j <= last; ++j) {
          const T* kj = &a.k[((b * s.Hk + hk) * s.Nk + j) * s.D];
          ld dot = 0, absdot = 0;
          for (std::size_t d = 0; d < s.D; ++d) {
            dot += ld(qi[d]) * ld(kj[d]);
            absdot += std::fabs(ld(qi[d]) * ld(kj[d]));
          }
          sc[j] = scale * dot;
          r.max_abs_dot = std::max(r.max_abs_dot, std::fabs(scale) * absdot);
          m = std::max(m, sc[j]);
        }
        const std::size_t row = (b * s.Hq + h) * s.Nq + i;
        if (m == -inf<ld>) continue;  // no visible key: O = 0, lse = -inf
        ld l = 0;
        std::vector<ld> acc(s.Dv, 0);
        for (std::size_t j = 0; j < s.Nk && (long long)j <= last; ++j) {
          const ld w = std::exp(sc[j] - m);
          l += w;
          const T* vj = &a.v[((b * s.Hk + hk) * s.Nk + j) * s.Dv];
          for (std::size_t d = 0; d < s.Dv; ++d) acc[d] += w * ld(vj[d]);
        }
        for (std::size_t d = 0; d < s.Dv; ++d) {
          r.o[row * s.Dv + d] = acc[d] / l;
          r.max_abs_o = std::max(r.max_abs_o, std::fabs(r.o[row * s.Dv + d]));
        }
        r.lse[row] = m + std::log(l);
      }
    }
  return r;
}

/// A rank-4 View with logical extents (e0, e1, e2, e3) in the execution space's memory, filled from
/// logical row-major host data. With bnhd, the memory is (e0, e2, e1, e3) (as PyTorch users hold
/// (B, N, H, D)) and the View a LayoutStride over it; `storage` keeps the allocation alive.
template <class T>
struct Tensor4 {
  Kokkos::View<T****, Kokkos::LayoutRight, AMem> storage;
  Kokkos::View<T****, Kokkos::LayoutStride, AMem> view;
};

template <class T>
Tensor4<T> make_tensor(std::size_t e0, std::size_t e1, std::size_t e2, std::size_t e3, bool bnhd,
                       const std::vector<T>& host) {
  Tensor4<T> t;
  if (bnhd) {
    t.storage = Kokkos::View<T****, Kokkos::LayoutRight, AMem>("bnhd", e0, e2, e1, e3);
    t.view = Kokkos::View<T****, Kokkos::LayoutStride, AMem>(
        t.storage.data(), Kokkos::LayoutStride(e0, e2 * e1 * e3, e1, e3, e2, e1 * e3, e3, 1));
  } else {
    t.storage = Kokkos::View<T****, Kokkos::LayoutRight, AMem>("bhnd", e0, e1, e2, e3);
    t.view = t.storage;
  }
  if (!host.empty()) {
    auto h = Kokkos::create_mirror_view(t.view);
    for (std::size_t a = 0; a < e0; ++a)
      for (std::size_t b = 0; b < e1; ++b)
        for (std::size_t c = 0; c < e2; ++c)
          for (std::size_t d = 0; d < e3; ++d) h(a, b, c, d) = host[((a * e1 + b) * e2 + c) * e3 + d];
    Kokkos::deep_copy(t.view, h);
  }
  return t;
}

template <class V>
std::vector<ld> flatten4(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<ld> out;
  for (std::size_t a = 0; a < h.extent(0); ++a)
    for (std::size_t b = 0; b < h.extent(1); ++b)
      for (std::size_t c = 0; c < h.extent(2); ++c)
        for (std::size_t d = 0; d < h.extent(3); ++d) out.push_back(h(a, b, c, d));
  return out;
}

template <class V>
std::vector<ld> flatten3(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<ld> out;
  for (std::size_t a = 0; a < h.extent(0); ++a)
    for (std::size_t b = 0; b < h.extent(1); ++b)
      for (std::size_t c = 0; c < h.extent(2); ++c) out.push_back(h(a, b, c));
  return out;
}

/// The accuracy bounds: fp32 max |O - ref| / max |ref| <= 2e-5, fp64 <= 1e-12, lse relative the same.
/// Large scores add the rounding of the scores themselves: 4 eps * max sum_d |scale q_d k_d|.
template <class T>
ld attention_tolerance(const AttnRef& ref) {
  const ld base = std::is_same<T, float>::value ? 2e-5L : 1e-12L;
  return base + 4 * eps<T> * ref.max_abs_dot;
}

template <class T>
void expect_attention_matches(const AttnRef& ref, const std::vector<ld>& o, const std::vector<ld>& lse,
                              ld tol, const std::string& where) {
  ASSERT_EQ(o.size(), ref.o.size()) << where;
  ld err = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    ASSERT_FALSE(std::isnan(o[i])) << where << " NaN at " << i;
    err = std::max(err, std::fabs(o[i] - ref.o[i]));
  }
  const ld rel = ref.max_abs_o > 0 ? err / ref.max_abs_o : err;
  ld lse_err = 0;
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (std::isfinite(ref.lse[i])) lse_err = std::max(lse_err, std::fabs(lse[i] - ref.lse[i]) / std::max<ld>(1, std::fabs(ref.lse[i])));
  if (std::getenv("KFLASH_TEST_REPORT")) {  // the measured errors, for reports
    std::printf("  %-70s O rel err %.2e  lse rel err %.2e  (bound %.1e)\n", where.c_str(), double(rel),
                double(lse_err), double(tol));
  }
  EXPECT_LE(rel, tol) << where << ": max |O - ref| / max |ref| = " << double(rel);
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (ref.lse[i] == -inf<ld>) {
      ASSERT_EQ(lse[i], -inf<ld>) << where << " row " << i << " sees no key";
      for (std::size_t d = 0; d < o.size() / lse.size(); ++d)
        ASSERT_EQ(o[i * (o.size() / lse.size()) + d], 0) << where << " row " << i << " sees no key";
    } else {
      ASSERT_LE(std::fabs(lse[i] - ref.lse[i]), tol * std::max<ld>(1, std::fabs(ref.lse[i])))
          << where << " lse row " << i;
    }
  }
}

/// Calls kflash::attention with the schedule its traits choose.
struct LibraryAttention {
  template <class Q, class K, class V, class O, class L>
  void operator()(const Q& q, const K& k, const V& v, const O& o, const kflash::AttentionOptions& opt,
                  const L& lse) const {
    kflash::attention(AExec(), q, k, v, o, opt, lse);
  }
};

/// Runs attention (by default kflash::attention) on the data and checks it; returns (o, lse) flattened.
template <class T, class Runner = LibraryAttention>
std::pair<std::vector<ld>, std::vector<ld>> run_attention(const AttnData<T>& a,
                                                          const kflash::AttentionOptions& opt, bool bnhd,
                                                          const std::string& what, const Runner& run = {}) {
  const AttnShape& s = a.s;
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, bnhd, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, bnhd, a.k);
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, bnhd, a.v);
  auto o = make_tensor<T>(s.B, s.Hq, s.Nq, s.Dv, bnhd, std::vector<T>(s.B * s.Hq * s.Nq * s.Dv, T(9)));
  Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  run(q.view, k.view, v.view, o.view, opt, lse);
  auto result = std::make_pair(flatten4(o.view), flatten3(lse));
  const ld scale = opt.scale != 0 ? opt.scale : 1 / std::sqrt(ld(s.D));
  const AttnRef ref = reference_attention(a, scale);
  expect_attention_matches<T>(ref, result.first, result.second, attention_tolerance<T>(ref),
                              what + " " + describe(s) + (bnhd ? " (B,N,H,D) LayoutStride" : ""));
  return result;
}

/// One query row's AttentionState, reduced over Nk keys by a RangePolicy (q (D), k (Nk x D),
/// v (Nk x Dv), row-major).
template <class T, int Dv, int D, class V>
kflash::AttentionState<T, Dv> reduce_attention_state(const V& q, const V& k, const V& v, T scale, std::size_t nk) {
  kflash::AttentionState<T, Dv> st;
  Kokkos::parallel_reduce(
      Kokkos::RangePolicy<AExec>(0, nk),
      KOKKOS_LAMBDA(int j, kflash::AttentionState<T, Dv>& acc) {
        T score = 0;
        for (int d = 0; d < D; ++d) score += q(d) * k(j * D + d);
        acc.push(scale * score, [&](int d) { return v(j * Dv + d); });
      },
      kflash::OnlineAttention<T, Dv>(st));
  return st;
}

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

/// Calls the team schedule (the device schedule) with a given shape on TEST_EXECSPACE, whatever
/// the traits choose there: on host spaces its teams are OpenMP teams of one or two threads.
template <class Shape>
struct TeamScheduleAttention {
  template <class Q, class K, class V, class O, class L>
  void operator()(const Q& q, const K& k, const V& v, const O& o, const kflash::AttentionOptions& opt,
                  const L& lse) const {
    kflash::impl::attention_with_shape<Shape>(AExec(), q, k, v, o, opt, lse);
  }
};

template <class T, class Shape>
void team_schedule_cases() {
  const std::string name = "team schedule " + std::to_string(Shape::BQ) + "x" + std::to_string(Shape::BK) +
                           " team " + std::to_string(Shape::team_size);
  const TeamScheduleAttention<Shape> team;
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
  if (AExec().concurrency() >= 2) {
    team_schedule_cases<T, TeamAttentionShape<T, 8, 8, 2, 4, 16, kflash::impl::ScheduleTraits<AExec>::is_host ? 4 : 1>>();
  } else {
    team_schedule_cases<T, TeamAttentionShape<T, 8, 8, 2, 4, 16, 8>>();
  }
  // The traits' own shapes, whatever space this is.
  using traits = kflash::impl::ScheduleTraits<AExec>;
  if constexpr (!traits::host_kernels) {
    team_schedule_cases<T, typename traits::template team_shape<T, 64, false>>();
    team_schedule_cases<T, typename traits::template team_shape<T, 128, false>>();
    team_schedule_cases<T, typename traits::template team_shape<T, 64, true>>();
    team_schedule_cases<T, typename traits::template team_shape<T, 128, true>>();
  }
  using Shape = TeamAttentionShape<T, 8, 8, 2, 4, 16, 8>;
  const AttnShape wide{1, 1, 1, 4, 4, 8, 17};
  expect_invalid([&] { run_attention<T>(make_attn_data<T>(wide, 1), {}, false, "", TeamScheduleAttention<Shape>()); },
                 {"Dv = 17", "16"});
}

/// Attention over consecutive key ranges [cuts[p], cuts[p + 1]), each into its part, then
/// merge_attention, checked against the single-pass reference over all keys.
template <class T>
void check_merge_of_parts(const AttnShape& s, unsigned seed, const std::vector<std::size_t>& cuts,
                          const std::string& what) {
  const auto a = make_attn_data<T>(s, seed);
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, false, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, false, a.k);
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, false, a.v);
  const std::size_t parts = cuts.size() - 1;
  Kokkos::View<T*****, AMem> o_parts("o_parts", parts, s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<T****, AMem> lse_parts("lse_parts", parts, s.B, s.Hq, s.Nq);
  for (std::size_t p = 0; p < parts; ++p) {
    const auto keys = std::make_pair(cuts[p], cuts[p + 1]);
    auto kp = Kokkos::subview(k.view, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL);
    auto vp = Kokkos::subview(v.view, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL);
    auto op = Kokkos::subview(o_parts, p, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    auto lp = Kokkos::subview(lse_parts, p, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
    kflash::attention(AExec(), q.view, kp, vp, op, kflash::AttentionOptions(), lp);
  }
  Kokkos::View<T****, AMem> o("o", s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  kflash::merge_attention(AExec(), o_parts, lse_parts, o, lse);
  const AttnRef ref = reference_attention(a, 1 / std::sqrt(ld(s.D)));
  expect_attention_matches<T>(ref, flatten4(o), flatten3(lse), attention_tolerance<T>(ref), what);
}

TYPED_TEST(AttentionTest, MergeAttentionMatchesSinglePass) {
  // Three parts of the keys, one of them empty: [0, 80), [80, 80), [80, 203).
  check_merge_of_parts<TypeParam>({2, 4, 2, 29, 203, 32, 24}, 70, {0, 80, 80, 203}, "merge_attention");
}

TYPED_TEST(AttentionTest, MergeAttentionOfOneRow) {
  // Fewer rows than threads: merge_attention takes a column per work item (where the space has
  // more than one thread), each merging the row's states itself. Five parts, one of them empty.
  check_merge_of_parts<TypeParam>({1, 1, 1, 1, 301, 16, 24}, 75, {0, 7, 7, 150, 151, 301}, "merge of one row");
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
