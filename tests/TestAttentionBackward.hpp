// kflash::attention_backward on TEST_EXECSPACE against a long-double reference (FlashAttention 2's
// equations applied to the reference forward of AttentionCommon.hpp, pair by pair), the reference
// itself against central differences, determinism, and bad input.
#pragma once

#include <BackwardCommon.hpp>

#include <cmath>

namespace kflash_test {

/// Runs kflash's forward then attention_backward on the data (q, k, v, o, dout and the gradients in
/// (B, N, H, D) memory with bnhd), with the user functors unless they are kflash::NoScoreMod /
/// NoMaskMod; returns the gradients flattened.
template <class T, class ScoreMod = kflash::NoScoreMod, class MaskMod = kflash::NoMaskMod>
AttnGrads run_backward(const AttnData<T>& a, const kflash::AttentionOptions& opt, bool bnhd,
                       const std::vector<ld>& dout, const ScoreMod& score_mod = {}, const MaskMod& mask_mod = {}) {
  const AttnShape& s = a.s;
  const std::vector<T> poison9(1, T(9));
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, bnhd, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, bnhd, a.k);
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, bnhd, a.v);
  auto o = make_tensor<T>(s.B, s.Hq, s.Nq, s.Dv, bnhd, {});
  auto dO = make_tensor<T>(s.B, s.Hq, s.Nq, s.Dv, bnhd, std::vector<T>(dout.begin(), dout.end()));
  auto dq = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, bnhd, std::vector<T>(s.B * s.Hq * s.Nq * s.D, T(9)));
  auto dk = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, bnhd, std::vector<T>(s.B * s.Hk * s.Nk * s.D, T(9)));
  auto dv = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, bnhd, std::vector<T>(s.B * s.Hk * s.Nk * s.Dv, T(9)));
  Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  // The options' gradients wherever the options are set, in Views poisoned with 9.
  kflash::AttentionGrads grads;
  Kokkos::View<T*, AMem> dsinks;
  Kokkos::View<T****, AMem> dbias;
  if (!opt.sinks.empty()) {
    dsinks = Kokkos::View<T*, AMem>("dsinks", opt.sinks.extent(0));
    Kokkos::deep_copy(dsinks, T(9));
    grads.dsinks = dsinks;
  }
  if (!opt.bias.empty()) {
    dbias = Kokkos::View<T****, AMem>("dbias", opt.bias.extent(0), opt.bias.extent(1), opt.bias.extent(2),
                                      opt.bias.extent(3));
    Kokkos::deep_copy(dbias, T(9));
    grads.dbias = dbias;
  }
  constexpr bool plain = std::is_same<ScoreMod, kflash::NoScoreMod>::value && std::is_same<MaskMod, kflash::NoMaskMod>::value;
  if constexpr (plain) {
    kflash::attention(AExec(), q.view, k.view, v.view, o.view, opt, lse);
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, dq.view, dk.view, dv.view, opt,
                               grads);
  } else {
    kflash::attention(AExec(), q.view, k.view, v.view, o.view, opt, lse, score_mod, mask_mod);
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, dq.view, dk.view, dv.view, opt,
                               grads, score_mod, mask_mod);
  }
  AttnGrads got{flatten4(dq.view), flatten4(dk.view), flatten4(dv.view), {}, {}};
  if (dsinks.size()) {
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dsinks);
    got.dsinks.assign(h.data(), h.data() + h.size());
  }
  if (dbias.size()) got.dbias = flatten4(dbias);
  return got;
}

/// kflash's gradients of data a with options opt (and the reference's terms t) against the
/// reference; dout drawn from the seed.
template <class T, class ScoreMod = kflash::NoScoreMod, class MaskMod = kflash::NoMaskMod>
AttnGrads check_backward(const AttnData<T>& a, kflash::AttentionOptions opt, const RefTerms& t, bool bnhd,
                         unsigned seed, const std::string& what, const ScoreMod& score_mod = {},
                         const MaskMod& mask_mod = {}) {
  const AttnShape& s = a.s;
  const std::vector<T> dout_t = normal_values<T>(s.B * s.Hq * s.Nq * s.Dv, seed);
  const std::vector<ld> dout(dout_t.begin(), dout_t.end());
  opt.causal = s.causal;
  const AttnGrads got = run_backward<T>(a, with_terms<T>(opt, s, t), bnhd, dout, score_mod, mask_mod);
  const ld scale = opt.scale != 0 ? opt.scale : 1 / std::sqrt(ld(s.D));
  expect_grads_match<T>(reference_attention_backward(a, scale, t, dout), got,
                        what + " " + describe(s) + (bnhd ? " (B,N,H,D) LayoutStride" : ""));
  return got;
}

template <class T>
struct AttentionBackwardTest : ::testing::Test {};
TYPED_TEST_SUITE(AttentionBackwardTest, Scalars);

TYPED_TEST(AttentionBackwardTest, GqaHeadDimsAndLayouts) {
  using T = TypeParam;
  for (bool bnhd : {false, true}) {
    check_backward<T>(make_attn_data<T>({2, 4, 2, 19, 27, 16, 24}, 300), {}, {}, bnhd, 301, "GQA, Dv != D");
    check_backward<T>(make_attn_data<T>({1, 3, 1, 8, 40, 32, 8}, 302), {}, {}, bnhd, 303, "MQA");
  }
  kflash::AttentionOptions opt;
  opt.scale = 0.3;
  check_backward<T>(make_attn_data<T>({1, 2, 2, 13, 13, 8, 8, true}, 304), opt, {}, false, 305, "causal, scale 0.3");
}

TYPED_TEST(AttentionBackwardTest, EveryScoreOption) {
  // Softcap (through tanh's derivative), ALiBi, a broadcast bias, a mask, sinks and a window on a
  // causal mask.
  using T = TypeParam;
  const AttnShape s{2, 2, 1, 17, 29, 8, 12, true};
  RefTerms t;
  t.left = 9;
  t.softcap = 3;
  t.slopes = rounded<T>(uniform_values<T>(s.Hq, 310, 0.05, 0.4));
  t.sinks = rounded<T>(uniform_values<T>(s.Hq, 311, -1, 2));
  t.bias = rounded<T>(uniform_values<T>(s.Hq * s.Nq * s.Nk, 312, -1, 1));
  t.bias_h = s.Hq;
  t.mask.resize(s.B * s.Nq * s.Nk);
  t.mask_b = s.B;
  for (std::size_t n = 0; n < t.mask.size(); ++n) t.mask[n] = char(n % 7 != 3);
  check_backward<T>(make_attn_data<T>(s, 313, 1.5), {}, t, false, 314, "every score option");
}

TYPED_TEST(AttentionBackwardTest, SeveralBlocksOfRowsAndKeys) {
  // Sequences longer than the host schedule's blocks of 64 rows and keys, with partial last blocks,
  // head dimensions that are not multiples of its padding, GQA, and causal and windowed masks whose
  // blocks are partly hidden; a bias, a mask and softcap on the pairs of every tile; varlen's
  // sequences are in Varlen.
  using T = TypeParam;
  check_backward<T>(make_attn_data<T>({1, 4, 2, 150, 203, 20, 36, true}, 370), {}, {}, false, 371,
                    "GQA causal, several blocks");
  check_backward<T>(make_attn_data<T>({2, 2, 2, 97, 70, 40, 8}, 372), {}, {}, true, 373, "several blocks");
  // The same within the device-schedule lane's team width (D and Dv <= 32): its blocks of rows span
  // two query heads of a group, its blocks of keys end past the last key; rows of D = 10 are staged
  // element by element (not whole 16-byte chunks).
  check_backward<T>(make_attn_data<T>({1, 6, 2, 61, 75, 10, 28, true}, 377), {}, {}, true, 378,
                    "GQA causal, strided, several team blocks");
  RefTerms t;
  t.left = 70;
  t.softcap = 4;
  t.bias = rounded<T>(uniform_values<T>(130 * 140, 374, -1, 1));
  t.mask.resize(130 * 140);
  for (std::size_t n = 0; n < t.mask.size(); ++n) t.mask[n] = char(n % 11 != 5);
  check_backward<T>(make_attn_data<T>({1, 2, 1, 130, 140, 32, 32, true}, 375, 1.5), {}, t, false, 376,
                    "window, softcap, bias and mask over several blocks");
}

TYPED_TEST(AttentionBackwardTest, RowsWithoutVisibleKeys) {
  // Causal with Nq > Nk: the first Nq - Nk rows see no key (lse = -inf) and give nothing, never NaN;
  // with a sink they see only the sink. A fully masked row of a mask the same, and no rows at all.
  using T = TypeParam;
  check_backward<T>(make_attn_data<T>({1, 2, 2, 12, 5, 8, 8, true}, 320), {}, {}, false, 321, "no visible key");
  RefTerms t;
  t.sinks = {0.5, -0.25};
  check_backward<T>(make_attn_data<T>({1, 2, 2, 12, 5, 8, 8, true}, 322), {}, t, false, 323, "only a sink");
  RefTerms m;
  m.mask.assign(6 * 9, 1);
  for (std::size_t j = 0; j < 9; ++j) m.mask[2 * 9 + j] = 0;  // row 2 sees nothing
  check_backward<T>(make_attn_data<T>({1, 1, 1, 6, 9, 4, 4}, 324), {}, m, false, 325, "a fully masked row");
  // No query row at all: dk, dv and dsinks are written as 0 (their Views hold 9 before).
  RefTerms z;
  z.sinks = {0.5, -0.25};
  check_backward<T>(make_attn_data<T>({1, 2, 1, 0, 7, 8, 8}, 326), {}, z, false, 327, "no query row");
}

/// A score_mod with its derivative: s - s^3 / 30 + 0.1 h (and its reference as std::function).
template <class T>
struct CubicScore {
  KOKKOS_INLINE_FUNCTION T operator()(T s, std::int64_t, std::int64_t h, std::int64_t, std::int64_t) const {
    return s - s * s * s / T(30) + T(0.1) * T(h);
  }
  KOKKOS_INLINE_FUNCTION T derivative(T s, std::int64_t, std::int64_t, std::int64_t, std::int64_t) const {
    return T(1) - s * s / T(10);
  }
};
/// A mask_mod that hides every third pair along each diagonal.
struct EveryThirdDiagonal {
  KOKKOS_INLINE_FUNCTION bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    return (i - j + 300) % 3 != 1;
  }
};

TYPED_TEST(AttentionBackwardTest, UserFunctors) {
  using T = TypeParam;
  RefTerms t;
  t.score_mod = [](ld s, std::size_t, std::size_t h, std::size_t, std::size_t) { return s - s * s * s / 30 + ld(T(0.1)) * ld(h); };
  t.score_mod_derivative = [](ld s, std::size_t, std::size_t, std::size_t, std::size_t) { return 1 - s * s / 10; };
  t.mask_mod = [](std::size_t, std::size_t, std::size_t i, std::size_t j) {
    return ((long long)i - (long long)j + 300) % 3 != 1;
  };
  check_backward<T>(make_attn_data<T>({1, 2, 1, 14, 23, 8, 8}, 330), {}, t, false, 331, "score_mod and mask_mod",
                    CubicScore<T>{}, EveryThirdDiagonal{});
}

TYPED_TEST(AttentionBackwardTest, Varlen) {
  // Three packed sequences (one without queries: its keys get 0), each against its own dense
  // reference.
  using T = TypeParam;
  const std::size_t Hq = 2, Hk = 1, D = 8, Dv = 6;
  const std::vector<std::size_t> nq{5, 0, 9}, nk{7, 4, 11};
  std::vector<AttnData<T>> seqs;
  std::vector<std::vector<ld>> douts;
  std::size_t tq = 0, tk = 0;
  for (std::size_t b = 0; b < nq.size(); ++b) {
    seqs.push_back(make_attn_data<T>({1, Hq, Hk, nq[b], nk[b], D, Dv, true}, 340 + unsigned(b)));
    const std::vector<T> d = normal_values<T>(Hq * nq[b] * Dv, 350 + unsigned(b));
    douts.emplace_back(d.begin(), d.end());
    tq += nq[b], tk += nk[b];
  }
  // Packed (total, H, d) host arrays from the sequences' (1, H, n, d) data.
  const auto pack = [&](auto member, std::size_t H, const std::vector<std::size_t>& n, std::size_t width, std::size_t total) {
    Kokkos::View<T***, AMem> view("packed", total, H, width);
    auto h = Kokkos::create_mirror_view(view);
    std::size_t start = 0;
    for (std::size_t b = 0; b < n.size(); ++b) {
      for (std::size_t x = 0; x < H; ++x)
        for (std::size_t i = 0; i < n[b]; ++i)
          for (std::size_t d = 0; d < width; ++d) h(start + i, x, d) = member(b, (x * n[b] + i) * width + d);
      start += n[b];
    }
    Kokkos::deep_copy(view, h);
    return view;
  };
  const auto q = pack([&](std::size_t b, std::size_t e) { return seqs[b].q[e]; }, Hq, nq, D, tq);
  const auto k = pack([&](std::size_t b, std::size_t e) { return seqs[b].k[e]; }, Hk, nk, D, tk);
  const auto v = pack([&](std::size_t b, std::size_t e) { return seqs[b].v[e]; }, Hk, nk, Dv, tk);
  const auto dout = pack([&](std::size_t b, std::size_t e) { return T(douts[b][e]); }, Hq, nq, Dv, tq);
  Kokkos::View<T***, AMem> o("o", tq, Hq, Dv), dq("dq", tq, Hq, D), dk("dk", tk, Hk, D), dv("dv", tk, Hk, Dv);
  Kokkos::deep_copy(dk, T(9));
  Kokkos::deep_copy(dv, T(9));
  Kokkos::View<T**, AMem> lse("lse", Hq, tq);
  Kokkos::View<std::int32_t*, AMem> cu_q("cu_q", nq.size() + 1), cu_k("cu_k", nk.size() + 1);
  auto hq = Kokkos::create_mirror_view(cu_q);
  auto hk = Kokkos::create_mirror_view(cu_k);
  hq(0) = hk(0) = 0;
  for (std::size_t b = 0; b < nq.size(); ++b) hq(b + 1) = hq(b) + std::int32_t(nq[b]), hk(b + 1) = hk(b) + std::int32_t(nk[b]);
  Kokkos::deep_copy(cu_q, hq);
  Kokkos::deep_copy(cu_k, hk);
  kflash::AttentionOptions opt;
  opt.causal = true;
  opt.cu_seqlens_q = cu_q;
  opt.cu_seqlens_k = cu_k;
  kflash::attention(AExec(), q, k, v, o, opt, lse);
  kflash::attention_backward(AExec(), q, k, v, o, lse, dout, dq, dk, dv, opt);
  const auto hdq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dq);
  const auto hdk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dk);
  const auto hdv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dv);
  std::size_t sq = 0, sk = 0;
  for (std::size_t b = 0; b < nq.size(); ++b) {
    const AttnGrads ref = reference_attention_backward(seqs[b], 1 / std::sqrt(ld(D)), {}, douts[b]);
    AttnGrads got;
    for (std::size_t x = 0; x < Hq; ++x)
      for (std::size_t i = 0; i < nq[b]; ++i)
        for (std::size_t d = 0; d < D; ++d) got.dq.push_back(hdq(sq + i, x, d));
    for (std::size_t x = 0; x < Hk; ++x)
      for (std::size_t j = 0; j < nk[b]; ++j) {
        for (std::size_t d = 0; d < D; ++d) got.dk.push_back(hdk(sk + j, x, d));
        for (std::size_t d = 0; d < Dv; ++d) got.dv.push_back(hdv(sk + j, x, d));
      }
    expect_grads_match<T>(ref, got, "varlen sequence " + std::to_string(b));
    sq += nq[b], sk += nk[b];
  }
}

TYPED_TEST(AttentionBackwardTest, Deterministic) {
  // The same call twice gives the same bits; on a host space of the same schedule, so does
  // Kokkos::Serial (one thread) from the same forward results.
  using T = TypeParam;
  const std::size_t B = 1, Hq = 4, Hk = 2, N = 150, Nk = 170, D = 16;  // several blocks of the host schedule
  using HV = Kokkos::View<T****, Kokkos::LayoutRight, Kokkos::HostSpace>;
  HV q("q", B, Hq, N, D), k("k", B, Hk, Nk, D), v("v", B, Hk, Nk, D), dout("dout", B, Hq, N, D);
  const HV inputs[] = {q, k, v, dout};
  unsigned seed = 360;
  for (const HV& x : inputs) {
    const std::vector<T> values = normal_values<T>(x.size(), seed++);
    std::copy(values.begin(), values.end(), x.data());
  }
  // Copies in their own allocations (a mirror of host data on a host space would be the same View).
  const auto on_device = [](const HV& x) {
    Kokkos::View<T****, Kokkos::LayoutRight, AMem> y("copy", x.extent(0), x.extent(1), x.extent(2), x.extent(3));
    Kokkos::deep_copy(y, x);
    return y;
  };
  const auto dq_ = on_device(q), dk_ = on_device(k), dv_ = on_device(v);
  const auto o = on_device(dout);
  Kokkos::View<T***, AMem> lse("lse", B, Hq, N);
  kflash::AttentionOptions opt;
  opt.causal = true;
  kflash::attention(AExec(), on_device(q), on_device(k), on_device(v), o, opt, lse);
  std::vector<ld> runs[2][3];
  for (auto& run : runs) {
    kflash::attention_backward(AExec(), on_device(q), on_device(k), on_device(v), o, lse, on_device(dout), dq_, dk_,
                               dv_, opt);
    run[0] = flatten4(dq_), run[1] = flatten4(dk_), run[2] = flatten4(dv_);
  }
  for (int g = 0; g < 3; ++g) EXPECT_EQ(runs[0][g], runs[1][g]) << "gradient " << g << " differs between two runs";
  {  // The inputs as Views of const values (o and lse are inputs here): the same bits.
    using CV = Kokkos::View<const T****, Kokkos::LayoutRight, AMem>;
    const CV qc = on_device(q), kc = on_device(k), vc = on_device(v), oc = o, dc = on_device(dout);
    const Kokkos::View<const T***, AMem> lc = lse;
    kflash::attention_backward(AExec(), qc, kc, vc, oc, lc, dc, dq_, dk_, dv_, opt);
    EXPECT_EQ(runs[0][0], flatten4(dq_)) << "dq from const Views";
    EXPECT_EQ(runs[0][1], flatten4(dk_)) << "dk from const Views";
    EXPECT_EQ(runs[0][2], flatten4(dv_)) << "dv from const Views";
  }
#if defined(KOKKOS_ENABLE_SERIAL)
  // (A space of the other schedule sums in another order: the host schedule's blocks against the
  // device schedule's rows.)
  if constexpr (Kokkos::SpaceAccessibility<AExec, Kokkos::HostSpace>::accessible &&
                !std::is_same<AExec, Kokkos::Serial>::value &&
                kflash::impl::ScheduleTraits<AExec>::host_kernels ==
                    kflash::impl::ScheduleTraits<Kokkos::Serial>::host_kernels) {
    HV dq("dq", B, Hq, N, D), dk("dk", B, Hk, Nk, D), dv("dv", B, Hk, Nk, D);
    const auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
    const auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
    kflash::attention_backward(Kokkos::Serial(), q, k, v, ho, hl, dout, dq, dk, dv, opt);
    EXPECT_EQ(runs[0][0], flatten4(dq)) << "dq on Kokkos::Serial";
    EXPECT_EQ(runs[0][1], flatten4(dk)) << "dk on Kokkos::Serial";
    EXPECT_EQ(runs[0][2], flatten4(dv)) << "dv on Kokkos::Serial";
  }
#endif
}

TYPED_TEST(AttentionBackwardTest, ReferenceMatchesFiniteDifferences) {
  // The reference gradients against central differences of the reference loss sum <dout, o> (long
  // double, step 1e-5: truncation ~1e-10), every element of q, k, v, the sinks and the bias, with
  // softcap, ALiBi, a bias, sinks, a window and the cubic score_mod.
  AttnData<ld> a{{1, 2, 1, 4, 6, 3, 5, true}, {}, {}, {}};
  a.q = uniform_values<double>(2 * 4 * 3, 370, -1, 1);
  a.k = uniform_values<double>(6 * 3, 371, -1, 1);
  a.v = uniform_values<double>(6 * 5, 372, -1, 1);
  const std::vector<ld> dout = uniform_values<double>(2 * 4 * 5, 373, -1, 1);
  RefTerms t;
  t.left = 3, t.softcap = 2;
  t.slopes = {0.2, 0.3};
  t.sinks = {0.1, -2};
  t.bias = uniform_values<double>(4 * 6, 374, -0.5, 0.5);
  t.score_mod = [](ld s, std::size_t, std::size_t h, std::size_t, std::size_t) { return s - s * s * s / 30 + 0.1L * ld(h); };
  t.score_mod_derivative = [](ld s, std::size_t, std::size_t, std::size_t, std::size_t) { return 1 - s * s / 10; };
  const ld scale = 0.7;
  const AttnGrads g = reference_attention_backward(a, scale, t, dout);
  const auto loss = [&](const AttnData<ld>& x, const RefTerms& terms) {
    const AttnRef r = reference_attention(x, scale, terms);
    ld sum = 0;
    for (std::size_t n = 0; n < dout.size(); ++n) sum += dout[n] * r.o[n];
    return sum;
  };
  const ld step = 1e-5L;
  const std::pair<std::vector<ld> AttnData<ld>::*, const std::vector<ld>*> inputs[] = {
      {&AttnData<ld>::q, &g.dq}, {&AttnData<ld>::k, &g.dk}, {&AttnData<ld>::v, &g.dv}};
  for (const auto& in : inputs) {
    for (std::size_t n = 0; n < (a.*in.first).size(); ++n) {
      AttnData<ld> up = a, down = a;
      (up.*in.first)[n] += step;
      (down.*in.first)[n] -= step;
      const ld fd = (loss(up, t) - loss(down, t)) / (2 * step);
      EXPECT_NEAR(double(fd), double((*in.second)[n]), 1e-8) << "element " << n;
    }
  }
  const std::pair<std::vector<ld> RefTerms::*, const std::vector<ld>*> options[] = {{&RefTerms::sinks, &g.dsinks},
                                                                                   {&RefTerms::bias, &g.dbias}};
  for (const auto& in : options) {
    ASSERT_EQ((t.*in.first).size(), in.second->size());
    for (std::size_t n = 0; n < in.second->size(); ++n) {
      RefTerms up = t, down = t;
      (up.*in.first)[n] += step;
      (down.*in.first)[n] -= step;
      const ld fd = (loss(a, up) - loss(a, down)) / (2 * step);
      EXPECT_NEAR(double(fd), double((*in.second)[n]), 1e-8) << "option element " << n;
    }
  }
}

TYPED_TEST(AttentionBackwardTest, BadInputThrows) {
  using T = TypeParam;
  const AttnShape s{1, 2, 1, 5, 7, 4, 3};
  const auto a = make_attn_data<T>(s, 380);
  auto q = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, false, a.q);
  auto k = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, false, a.k);
  auto v = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, false, a.v);
  auto o = make_tensor<T>(s.B, s.Hq, s.Nq, s.Dv, false, {});
  auto dO = make_tensor<T>(s.B, s.Hq, s.Nq, s.Dv, false, {});
  auto dq = make_tensor<T>(s.B, s.Hq, s.Nq, s.D, false, {});
  auto dk = make_tensor<T>(s.B, s.Hk, s.Nk, s.D, false, {});
  auto dv = make_tensor<T>(s.B, s.Hk, s.Nk, s.Dv, false, {});
  auto wrong = make_tensor<T>(s.B, s.Hq, s.Nq, s.D + 1, false, {});
  Kokkos::View<T***, AMem> lse("lse", s.B, s.Hq, s.Nq), short_lse("lse", s.B, s.Hq, s.Nq - 1);
  const auto expect_throw = [&](const std::string& what, const std::string& message, auto&& call) {
    try {
      call();
      ADD_FAILURE() << what << ": no exception";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << what << ": " << e.what();
    }
  };
  kflash::AttentionOptions opt;
  expect_throw("dq not like q", "kflash::attention_backward: argument 'dq (1, 2, 5, 5)' must have the shape of 'q (1, 2, 5, 4)'", [&] {
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, wrong.view, dk.view, dv.view);
  });
  expect_throw("lse short", "kflash::attention_backward:", [&] {
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, short_lse, dO.view, dq.view, dk.view, dv.view);
  });
  expect_throw("dq over q", "dq", [&] {
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, q.view, dk.view, dv.view);
  });
  kflash::AttentionGrads grads;
  grads.dsinks = Kokkos::View<T*, AMem>("dsinks", s.Hq);
  expect_throw("dsinks without sinks", "grads.dsinks (2) is set, but options.sinks is not", [&] {
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, dq.view, dk.view, dv.view, opt,
                               grads);
  });
  kflash::AttentionOptions biased;
  biased.bias = Kokkos::View<T****, AMem>("bias", 1, s.Hq, s.Nq, s.Nk);
  kflash::AttentionGrads wrong_bias;
  wrong_bias.dbias = Kokkos::View<T****, AMem>("dbias", 1, 1, s.Nq, s.Nk);
  expect_throw("dbias not like bias", "grads.dbias (1, 1, 5, 7) must have the shape of options.bias (1, 2, 5, 7)", [&] {
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, dq.view, dk.view, dv.view,
                               biased, wrong_bias);
  });
  kflash::AttentionGrads const_bias;
  const_bias.dbias = Kokkos::View<const T****, AMem>(Kokkos::View<T****, AMem>("dbias", 1, s.Hq, s.Nq, s.Nk));
  expect_throw("const dbias", "must not hold const values", [&] {
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, dq.view, dk.view, dv.view,
                               biased, const_bias);
  });
  kflash::AttentionOptions paged;
  paged.block_table = Kokkos::View<std::int32_t**, AMem>("table", 1, 1);
  paged.cache_seqlens = Kokkos::View<std::int32_t*, AMem>("lengths", 1);
  expect_throw("paged", "paged K/V", [&] {
    kflash::attention_backward(AExec(), q.view, k.view, v.view, o.view, lse, dO.view, dq.view, dk.view, dv.view, paged);
  });
}

}  // namespace kflash_test
