// What the attention tests share: data, a long-double reference that materialises the scores and
// applies the documented semantics of every option literally, Views in TEST_EXECSPACE's memory, the
// checks, and the callers of kflash::attention.
#pragma once

#include <TestCommon.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>

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
  ld max_abs_dot = 0;  // max over pairs of the magnitudes summed into a score: its rounding scale
};

/// The options beyond the shape, as the reference applies them (README's semantics, literally);
/// with_terms() hands the same values, rounded to T, to kflash as AttentionOptions.
struct RefTerms {
  int left = -1, right = -1;  // window; AttnShape::causal sets right = 0
  ld softcap = 0;
  std::vector<ld> slopes;      // ALiBi: (Hq), or (B, Hq) when slopes_batched
  bool slopes_batched = false;
  std::vector<ld> sinks;       // (Hq)
  std::vector<ld> bias;        // (bias_b, bias_h, Nq, Nk), bias_b in {1, B}, bias_h in {1, Hq}
  std::size_t bias_b = 1, bias_h = 1;
  std::vector<char> mask;      // the same shape rules: nonzero = visible
  std::size_t mask_b = 1, mask_h = 1;
  std::function<ld(ld, std::size_t, std::size_t, std::size_t, std::size_t)> score_mod;
  std::function<ld(ld, std::size_t, std::size_t, std::size_t, std::size_t)> score_mod_derivative;  // backward
  std::function<bool(std::size_t, std::size_t, std::size_t, std::size_t)> mask_mod;
};

/// One pair of the reference: whether query row (b, h, i) sees key j, its final score x, the
/// magnitude of what was summed into it (its rounding scale), dx / d(scale q . k) (slope) and dx /
/// d(the score after softcap, ALiBi and bias) (mod_slope: the score_mod's derivative).
struct RefPair {
  bool seen = false;
  ld x = 0, mag = 0, slope = 1, mod_slope = 1;
};

template <class T>
RefPair reference_pair(const AttnData<T>& a, ld scale, const RefTerms& t, std::size_t b, std::size_t h, std::size_t i,
                       std::size_t j) {
  const AttnShape& s = a.s;
  const long long right = s.causal ? 0 : t.right;
  const std::size_t hk = h / (s.Hq / s.Hk);
  const long long c = (long long)i + (long long)s.Nk - (long long)s.Nq, jj = (long long)j;
  RefPair r;
  r.seen = !(t.left >= 0 && jj < c - t.left) && !(right >= 0 && jj > c + right);
  if (t.mask.size()) r.seen = r.seen && t.mask[(((t.mask_b > 1 ? b : 0) * t.mask_h + (t.mask_h > 1 ? h : 0)) * s.Nq + i) * s.Nk + j];
  if (t.mask_mod) r.seen = r.seen && t.mask_mod(b, h, i, j);
  if (!r.seen) return r;
  const T* qi = &a.q[((b * s.Hq + h) * s.Nq + i) * s.D];
  const T* kj = &a.k[((b * s.Hk + hk) * s.Nk + j) * s.D];
  ld dot = 0, absdot = 0;
  for (std::size_t d = 0; d < s.D; ++d) {
    dot += ld(qi[d]) * ld(kj[d]);
    absdot += std::fabs(ld(qi[d]) * ld(kj[d]));
  }
  r.x = scale * dot, r.mag = std::fabs(scale) * absdot;
  if (t.softcap != 0) {
    const ld th = std::tanh(r.x / t.softcap);
    r.x = t.softcap * th;
    r.slope = 1 - th * th;
    r.mag = 2 * t.softcap;  // tanh's error is absolute, in units of softcap
  }
  if (t.slopes.size()) {
    const ld term = -t.slopes[(t.slopes_batched ? b * s.Hq : 0) + h] * std::fabs(ld(c - jj));
    r.x += term;
    r.mag += std::fabs(term);
  }
  if (t.bias.size()) {
    const ld term = t.bias[(((t.bias_b > 1 ? b : 0) * t.bias_h + (t.bias_h > 1 ? h : 0)) * s.Nq + i) * s.Nk + j];
    r.x += term;
    if (std::isfinite(term)) r.mag += std::fabs(term);
  }
  if (t.score_mod) {
    if (t.score_mod_derivative) r.mod_slope = t.score_mod_derivative(r.x, b, h, i, j);
    r.slope *= r.mod_slope;
    r.x = t.score_mod(r.x, b, h, i, j);
  }
  return r;
}

template <class T>
AttnRef reference_attention(const AttnData<T>& a, ld scale, const RefTerms& t = {}) {
  const AttnShape& s = a.s;
  AttnRef r;
  r.o.assign(s.B * s.Hq * s.Nq * s.Dv, 0);
  r.lse.assign(s.B * s.Hq * s.Nq, -inf<ld>);
  std::vector<ld> sc(s.Nk);
  std::vector<char> seen(s.Nk);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.Hq; ++h) {
      const std::size_t hk = h / (s.Hq / s.Hk);
      for (std::size_t i = 0; i < s.Nq; ++i) {
        ld m = -inf<ld>;
        for (std::size_t j = 0; j < s.Nk; ++j) {
          const RefPair pair = reference_pair(a, scale, t, b, h, i, j);
          seen[j] = pair.seen;
          if (!seen[j]) continue;
          sc[j] = pair.x;
          r.max_abs_dot = std::max(r.max_abs_dot, pair.mag);
          m = std::max(m, sc[j]);
        }
        const ld sink = t.sinks.size() ? t.sinks[h] : -inf<ld>;
        const std::size_t row = (b * s.Hq + h) * s.Nq + i;
        const ld mm = std::max(m, sink);
        if (mm == -inf<ld>) continue;  // no visible key and no sink: O = 0, lse = -inf
        ld l = sink == -inf<ld> ? 0 : std::exp(sink - mm);
        std::vector<ld> acc(s.Dv, 0);
        for (std::size_t j = 0; j < s.Nk; ++j) {
          if (!seen[j]) continue;
          const ld w = std::exp(sc[j] - mm);
          l += w;
          const T* vj = &a.v[((b * s.Hk + hk) * s.Nk + j) * s.Dv];
          for (std::size_t d = 0; d < s.Dv; ++d) acc[d] += w * ld(vj[d]);
        }
        for (std::size_t d = 0; d < s.Dv; ++d) {
          r.o[row * s.Dv + d] = acc[d] / l;
          r.max_abs_o = std::max(r.max_abs_o, std::fabs(r.o[row * s.Dv + d]));
        }
        r.lse[row] = mm + std::log(l);
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
/// Large scores add the rounding of the scores themselves: 4 eps * max sum_d |scale q_d k_d| (fp32 on
/// devices: 3 2^-22 more, below); 16-bit outputs their rounding (storage_rounding()).
/// The relative rounding the outputs' storage adds to attention_tolerance (0, or 2^-8 and 2^-11
/// while a 16-bit test runs: its Storage16Scope sets it).
inline ld& storage_rounding() {
  static ld r = 0;
  return r;
}

template <class T>
ld attention_tolerance(const AttnRef& ref) {
  const ld base = std::is_same<T, float>::value ? 2e-5L : 1e-12L;
  // fp32 on devices: the warp schedule's 3xTF32 products lose under 3 2^-22 of each product more.
  const ld split =
      std::is_same<T, float>::value && !kflash::impl::ScheduleTraits<AExec>::is_host ? std::ldexp(3.0L, -22) : 0.0L;
  return base + (4 * eps<T> + split) * ref.max_abs_dot + storage_rounding();
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
  // lse is a float output in every call: the 16-bit outputs' rounding is no part of its bound.
  const ld lse_tol = tol - storage_rounding();
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (ref.lse[i] == -inf<ld>) {
      ASSERT_EQ(lse[i], -inf<ld>) << where << " row " << i << " sees no key";
      for (std::size_t d = 0; d < o.size() / lse.size(); ++d)
        ASSERT_EQ(o[i * (o.size() / lse.size()) + d], 0) << where << " row " << i << " sees no key";
    } else {
      ASSERT_LE(std::fabs(lse[i] - ref.lse[i]), lse_tol * std::max<ld>(1, std::fabs(ref.lse[i])))
          << where << " lse row " << i;
    }
  }
}

/// A View in TEST_EXECSPACE's memory holding values (rounded to V), with the given extents.
template <class V, int N>
struct DataOfRank {
  using type = typename DataOfRank<V, N - 1>::type*;
};
template <class V>
struct DataOfRank<V, 0> {
  using type = V;
};
template <class V, class... E>
auto option_view(const std::vector<ld>& values, E... extents) {
  using View = Kokkos::View<typename DataOfRank<V, int(sizeof...(E))>::type, Kokkos::LayoutRight, AMem>;
  View view("option", std::size_t(extents)...);
  auto h = Kokkos::create_mirror_view(view);
  for (std::size_t n = 0; n < values.size(); ++n) h.data()[n] = V(values[n]);
  Kokkos::deep_copy(view, h);
  return view;
}

/// opt with the options of t (Views made from t's values, rounded to T).
template <class T>
kflash::AttentionOptions with_terms(kflash::AttentionOptions opt, const AttnShape& s, const RefTerms& t) {
  opt.window_left = t.left;
  opt.window_right = t.right;
  opt.softcap = double(t.softcap);
  if (t.slopes.size()) {
    if (t.slopes_batched) opt.alibi_slopes = option_view<T>(t.slopes, s.B, s.Hq);
    else opt.alibi_slopes = option_view<T>(t.slopes, s.Hq);
  }
  if (t.sinks.size()) opt.sinks = option_view<T>(t.sinks, s.Hq);
  if (t.bias.size()) opt.bias = option_view<T>(t.bias, t.bias_b, t.bias_h, s.Nq, s.Nk);
  if (t.mask.size())
    opt.mask = option_view<bool>(std::vector<ld>(t.mask.begin(), t.mask.end()), t.mask_b, t.mask_h, s.Nq, s.Nk);
  return opt;
}

/// Values rounded to T (so that the reference sees what kflash sees).
template <class T>
std::vector<ld> rounded(std::vector<ld> v) {
  for (ld& x : v) x = ld(T(x));
  return v;
}

/// Calls kflash::attention with the schedule its traits choose, and the user functors if any.
template <class ScoreMod = kflash::NoScoreMod, class MaskMod = kflash::NoMaskMod>
struct LibraryAttention {
  ScoreMod score_mod{};
  MaskMod mask_mod{};
  template <class Q, class K, class V, class O, class L>
  void operator()(const Q& q, const K& k, const V& v, const O& o, const kflash::AttentionOptions& opt,
                  const L& lse) const {
    if constexpr (std::is_same<ScoreMod, kflash::NoScoreMod>::value && std::is_same<MaskMod, kflash::NoMaskMod>::value)
      kflash::attention(AExec(), q, k, v, o, opt, lse);
    else
      kflash::attention(AExec(), q, k, v, o, opt, lse, score_mod, mask_mod);
  }
};

/// Runs attention (by default kflash::attention) on the data with the options of opt and terms, and
/// checks it against the reference; returns (o, lse) flattened.
template <class T, class Runner = LibraryAttention<>>
std::pair<std::vector<ld>, std::vector<ld>> run_attention(const AttnData<T>& a,
                                                          const kflash::AttentionOptions& opt, bool bnhd,
                                                          const std::string& what, const Runner& run = {},
                                                          const RefTerms& terms = {}) {
  const AttnShape& s = a.s;
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, bnhd, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, bnhd, a.k);
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, bnhd, a.v);
  auto o = make_tensor<T>(s.B, s.Hq, s.Nq, s.Dv, bnhd, std::vector<T>(s.B * s.Hq * s.Nq * s.Dv, T(9)));
  Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  run(q.view, k.view, v.view, o.view, with_terms<T>(opt, s, terms), lse);
  auto result = std::make_pair(flatten4(o.view), flatten3(lse));
  const ld scale = opt.scale != 0 ? opt.scale : 1 / std::sqrt(ld(s.D));
  const AttnRef ref = reference_attention(a, scale, terms);
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

/// Calls the team schedule (the device schedule) with a given shape on TEST_EXECSPACE, whatever
/// the traits choose there: on host spaces its teams are OpenMP teams of one or two threads.
template <class Shape, class ScoreMod = kflash::NoScoreMod, class MaskMod = kflash::NoMaskMod>
struct TeamScheduleAttention {
  ScoreMod score_mod{};
  MaskMod mask_mod{};
  template <class Q, class K, class V, class O, class L>
  void operator()(const Q& q, const K& k, const V& v, const O& o, const kflash::AttentionOptions& opt,
                  const L& lse) const {
    kflash::impl::attention_with_shape<Shape>(AExec(), q, k, v, o, opt, lse, score_mod, mask_mod);
  }
};

/// Calls f with a pointer of a small TeamAttentionShape type (8 x 8 blocks of 2 x 4 scores, Dv up
/// to 16) whose teams this space can run: 2 threads on host spaces with two or more, 1 on one
/// thread, 8 elsewhere.
template <class T, class F>
void with_small_team_shape(F&& f) {
  using kflash::impl::TeamAttentionShape;
  if (AExec().concurrency() >= 2) {
    f(static_cast<TeamAttentionShape<T, 8, 8, 2, 4, 16, kflash::impl::ScheduleTraits<AExec>::is_host ? 4 : 1>*>(nullptr));
  } else {
    f(static_cast<TeamAttentionShape<T, 8, 8, 2, 4, 16, 8>*>(nullptr));
  }
}

/// Calls f with a pointer of a small WarpAttentionShape type of storage S (fp32 or 16-bit; one warp,
/// tiles of 16 keys, Dv up to 16, prefetched or not) whose teams this space can run: 2 threads on
/// host spaces with two or more (16 lanes each), 1 on one thread, a warp elsewhere.
template <class S, bool Prefetch = true, class F>
void with_small_warp_shape(F&& f) {
  using kflash::impl::WarpAttentionShape;
  constexpr bool host = kflash::impl::ScheduleTraits<AExec>::is_host;
  if (AExec().concurrency() >= 2) f(static_cast<WarpAttentionShape<S, 1, 16, 16, host ? 16 : 1, Prefetch>*>(nullptr));
  else f(static_cast<WarpAttentionShape<S, 1, 16, 16, 32, Prefetch>*>(nullptr));
}

/// n values drawn uniformly from [lo, hi), rounded to T.
template <class T>
std::vector<ld> uniform_values(std::size_t n, unsigned seed, ld lo, ld hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist{double(lo), double(hi)};
  std::vector<ld> v(n);
  for (ld& x : v) x = ld(T(dist(gen)));
  return v;
}

/// The schedules a call can take: the automatic one, prefill, and split-K/V in 3 parts.
inline std::vector<kflash::AttentionOptions> schedules(bool causal) {
  std::vector<kflash::AttentionOptions> all(3);
  for (auto& o : all) o.causal = causal;
  all[1].schedule = kflash::AttentionSchedule::prefill;
  all[2].schedule = kflash::AttentionSchedule::split_kv;
  all[2].num_splits = 3;
  return all;
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

}  // namespace kflash_test
