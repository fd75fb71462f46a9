// attention, merge_attention, AttentionStream and attention_backward on 16-bit q, k, v, o
// (kflash::bhalf_t, kflash::half_t; lse and the options float) on TEST_EXECSPACE, against the
// long-double reference on the same 16-bit inputs: the attention tests' cases, run through a runner
// that stores the Views in 16 bits (GUIDE §9).
#pragma once

#include <BackwardCommon.hpp>
#include <SequencesCommon.hpp>
#include <StreamsCommon.hpp>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace kflash_test {

template <class H>
const char* name16() {
  return std::is_same<H, kflash::half_t>::value ? "half_t" : "bhalf_t";
}

/// The relative rounding of one 16-bit output (half a unit in the last place): 2^-8 for bfloat16,
/// 2^-11 for binary16, GUIDE §9's bounds.
template <class H>
ld rounding16() {
  return std::ldexp(1.0L, std::is_same<H, kflash::half_t>::value ? -11 : -8);
}

template <class H>
float round16(float x) {
  return kflash::impl::widen(kflash::impl::store_as<H>(x));
}

/// The data rounded to H, so that the reference sees the values kflash reads.
template <class H>
AttnData<float> rounded16(AttnData<float> a) {
  for (auto* v : {&a.q, &a.k, &a.v})
    for (float& x : *v) x = round16<H>(x);
  return a;
}

/// The View of H, of layout L, that stored16 makes of float View F.
template <class H, class L, class F>
using Stored16 = Kokkos::View<typename DataOfRank<H, int(F::rank)>::type, L, AMem>;

/// A View of H with the extents of float View f, of layout L (f's layout and strides where L is
/// f's own), holding f's values rounded to H. (The return type is spelled out: nvcc refuses
/// KOKKOS_LAMBDAs inside a function whose return type is deduced.)
template <class H, class L, class F>
Stored16<H, L, F> stored16(const F& f) {
  using View = Stored16<H, L, F>;
  View h;
  if constexpr (std::is_same<L, typename F::array_layout>::value) {
    h = View("h", f.layout());
  } else if constexpr (F::rank == 3) {
    h = View("h", f.extent(0), f.extent(1), f.extent(2));
  } else {
    h = View("h", f.extent(0), f.extent(1), f.extent(2), f.extent(3));
  }
  if constexpr (F::rank == 3) {
    Kokkos::parallel_for(
        Kokkos::MDRangePolicy<AExec, Kokkos::Rank<3>>({0, 0, 0}, {f.extent(0), f.extent(1), f.extent(2)}),
        KOKKOS_LAMBDA(std::size_t a, std::size_t b, std::size_t c) {
          h(a, b, c) = kflash::impl::store_as<H>(f(a, b, c));
        });
  } else {
    Kokkos::parallel_for(
        Kokkos::MDRangePolicy<AExec, Kokkos::Rank<4>>({0, 0, 0, 0},
                                                      {f.extent(0), f.extent(1), f.extent(2), f.extent(3)}),
        KOKKOS_LAMBDA(std::size_t a, std::size_t b, std::size_t c, std::size_t d) {
          h(a, b, c, d) = kflash::impl::store_as<H>(f(a, b, c, d));
        });
  }
  return h;
}

/// f = h widened (the same extents).
template <class F, class V>
void widened_into(const F& f, const V& h) {
  if constexpr (F::rank == 3) {
    Kokkos::parallel_for(
        Kokkos::MDRangePolicy<AExec, Kokkos::Rank<3>>({0, 0, 0}, {f.extent(0), f.extent(1), f.extent(2)}),
        KOKKOS_LAMBDA(std::size_t a, std::size_t b, std::size_t c) { f(a, b, c) = kflash::impl::widen(h(a, b, c)); });
  } else {
    Kokkos::parallel_for(
        Kokkos::MDRangePolicy<AExec, Kokkos::Rank<4>>({0, 0, 0, 0},
                                                      {f.extent(0), f.extent(1), f.extent(2), f.extent(3)}),
        KOKKOS_LAMBDA(std::size_t a, std::size_t b, std::size_t c, std::size_t d) {
          f(a, b, c, d) = kflash::impl::widen(h(a, b, c, d));
        });
  }
  Kokkos::fence();
}

/// kflash::attention on TEST_EXECSPACE.
struct CallAttention {
  template <class Q, class K, class V, class O, class L>
  void operator()(const Q& q, const K& k, const V& v, const O& o, const kflash::AttentionOptions& opt,
                  const L& lse) const {
    kflash::attention(AExec(), q, k, v, o, opt, lse);
  }
};

/// kflash::attention without lse into o (the output checked), then with lse into a copy of o (lse
/// only): a call that asks for no lse serves 16-bit outputs alone, and the host kernels then take
/// a shorter exp for its weights.
struct CallAttentionWithoutLse {
  template <class Q, class K, class V, class O, class L>
  void operator()(const Q& q, const K& k, const V& v, const O& o, const kflash::AttentionOptions& opt,
                  const L& lse) const {
    kflash::attention(AExec(), q, k, v, o, opt);
    const typename O::non_const_type lse_call("o with lse", o.layout());
    kflash::attention(AExec(), q, k, v, lse_call, opt, lse);
  }
};

/// Runs `call` (kflash::attention, or a schedule the test names) on q, k, v and o stored in H (in
/// the float Views' layout, or LayoutLeft with `left`), lse and the options in float; o's 16-bit
/// result comes back widened into o.
template <class H, bool left = false, class Call = CallAttention>
struct StoredAs16 {
  Call call{};
  template <class Q, class K, class V, class O, class L>
  void operator()(const Q& q, const K& k, const V& v, const O& o, const kflash::AttentionOptions& opt,
                  const L& lse) const {
    const auto store = [](const auto& f) {
      using F = std::decay_t<decltype(f)>;
      using Layout = std::conditional_t<left, Kokkos::LayoutLeft, typename F::array_layout>;
      return stored16<H, Layout>(f);
    };
    const auto o16 = store(o);
    call(store(q), store(k), store(v), o16, opt, lse);
    widened_into(o, o16);
  }
};

/// Makes attention_tolerance() add the 16-bit outputs' rounding while it lives.
struct Storage16Scope {
  explicit Storage16Scope(ld r) { storage_rounding() = r; }
  ~Storage16Scope() { storage_rounding() = 0; }
};

/// Attention data (D = 64, one K/V head) rounded to H whose every query row scores about 100 with
/// key 21 and about 200 with key `far`: q's first dimension 1, those keys' 800 and 1600.
template <class H>
AttnData<float> scores_far_apart(const AttnShape& s, unsigned seed, std::size_t far) {
  AttnData<float> data = make_attn_data<float>(s, seed);
  for (std::size_t r = 0; r < s.Hq * s.Nq; ++r) data.q[r * s.D] = 1;
  data.k[21 * s.D] = 800;
  data.k[far * s.D] = 1600;
  return rounded16<H>(data);
}

template <class H>
void half_attention_cases() {
  const Storage16Scope scope(rounding16<H>());
  const std::string type = name16<H>();
  // Prefill with GQA (K/V transposed and packed once per head), causal and not, every schedule
  // (split K/V merges float parts into the 16-bit o), dense and (B, N, H, D) strides; 600 keys: two
  // whole tiles and a partial one at bf16's 256 keys a tile (HostTraits::block_k_bf16).
  for (bool causal : {false, true}) {
    AttnShape s{2, 4, 2, 70, 600, 64, 64, causal};
    const auto a = rounded16<H>(make_attn_data<float>(s, 101));
    for (const auto& opt : schedules(causal))
      for (bool bnhd : {false, true}) {
        run_attention<float>(a, opt, bnhd, type + " prefill", StoredAs16<H>());
        if (::testing::Test::HasFailure()) return;
      }
    run_attention<float>(a, schedules(causal)[1], false, type + " prefill without lse",
                         StoredAs16<H, false, CallAttentionWithoutLse>());
  }
  // Scores far apart: every query row scores about 100 with key 21 (the first tile) and about 200
  // with key 305 (the second), each in the second half of a 32-key block. Weights against anything
  // below a tile's maximum by 88 or more overflow fp32, so the maxima that the bf16 products take as
  // they store the scores, and the rows' running maxima, must cover every column.
  {
    const auto a = scores_far_apart<H>(AttnShape{1, 2, 1, 20, 600, 64, 64}, 109, 305);
    for (const auto& opt : schedules(false))
      run_attention<float>(a, opt, false, type + " scores far apart", StoredAs16<H>());
    run_attention<float>(a, schedules(false)[1], false, type + " scores far apart without lse",
                         StoredAs16<H, false, CallAttentionWithoutLse>());
    if (::testing::Test::HasFailure()) return;
  }
  // Causal blocks of 64 rows whose last tile ends on a whole step of 32 keys (Nq = Nk = 320: tiles
  // of 64, 128, 192 and 256 keys with hidden ones, the first block's with no running maximum yet),
  // with key 300 scoring about 200 and key 21 about 100: the rows that do not see them must keep
  // them out of their maxima (the bf16 products may take each row's maximum over a whole tile).
  {
    const auto a = scores_far_apart<H>(AttnShape{1, 1, 1, 320, 320, 64, 64, true}, 111, 300);
    for (const auto& opt : schedules(true))
      run_attention<float>(a, opt, false, type + " causal diagonal tiles", StoredAs16<H>());
    if (::testing::Test::HasFailure()) return;
  }
  // Decode (a K/V head's 8 query rows: K read by rows), Dv != D (V padded), a block of one row, odd
  // D, Dv and Nk (bf16 pairs padded with zeros). K and V read in place (bf16 pairs formed in
  // registers): 3 and 5 rows a block, D past the last 32 values (odd, and even), odd Nk (a last key
  // without its pair), several 32-column strips of V, and Dv past its last whole strip (80, odd 45,
  // 8: V's last columns loaded through a mask). D = 128 and 8 query rows over three tiles of keys:
  // every row's 32 chunks of 4 values laid out in lanes, P's rows a whole tile apart.
  for (const AttnShape& s :
       {AttnShape{1, 8, 1, 1, 300, 64, 64}, AttnShape{1, 8, 1, 1, 530, 128, 128}, AttnShape{1, 2, 2, 33, 90, 32, 40},
        AttnShape{1, 1, 1, 1, 5, 8, 8}, AttnShape{1, 2, 1, 40, 77, 33, 17}, AttnShape{1, 6, 2, 1, 301, 45, 96},
        AttnShape{1, 5, 1, 1, 71, 100, 32}, AttnShape{1, 4, 1, 1, 97, 64, 80}, AttnShape{1, 3, 1, 1, 50, 40, 45}}) {
    const auto a = rounded16<H>(make_attn_data<float>(s, 103));
    for (const auto& opt : schedules(false)) run_attention<float>(a, opt, false, type + " decode", StoredAs16<H>());
  }
  // LayoutLeft: no unit stride along D, every element staged by itself.
  {
    AttnShape s{1, 2, 1, 20, 45, 16, 24, true};
    const auto a = rounded16<H>(make_attn_data<float>(s, 105));
    run_attention<float>(a, schedules(true)[0], false, type + " LayoutLeft", StoredAs16<H, true>());
  }
  // Every score option at once (softcap, ALiBi, sinks, bias, a mask), and a window, with float
  // option Views: prefill with a mask hiding one row whole, and decode (K and V in place).
  const auto all_options = [](const AttnShape& s, unsigned seed, int left, std::size_t hide_every) {
    RefTerms t;
    t.softcap = 5;
    t.left = left;
    t.slopes = rounded<float>(uniform_values<float>(s.Hq, seed, 0.01L, 0.2L));
    t.sinks = rounded<float>(uniform_values<float>(s.Hq, seed + 1, -1, 1));
    t.bias = rounded<float>(uniform_values<float>(s.B * s.Hq * s.Nq * s.Nk, seed + 2, -1, 1));
    t.bias_b = s.B, t.bias_h = s.Hq;
    t.mask.assign(s.Nq * s.Nk, 1);
    for (std::size_t i = 0; i < t.mask.size(); i += hide_every) t.mask[i] = 0;
    return t;
  };
  {
    AttnShape s{2, 4, 4, 40, 60, 32, 32};
    const auto a = rounded16<H>(make_attn_data<float>(s, 107, 2.0));
    RefTerms t = all_options(s, 108, 30, 7);
    for (std::size_t j = 0; j < s.Nk; ++j) t.mask[3 * s.Nk + j] = 0;  // row 3 sees no key (the sink only)
    for (const auto& opt : schedules(false)) run_attention<float>(a, opt, false, type + " options", StoredAs16<H>(), t);
    run_attention<float>(a, schedules(false)[1], false, type + " options without lse",
                         StoredAs16<H, false, CallAttentionWithoutLse>(), t);
  }
  {
    AttnShape s{1, 8, 2, 1, 150, 40, 32};
    const auto a = rounded16<H>(make_attn_data<float>(s, 112, 2.0));
    const RefTerms t = all_options(s, 114, 100, 5);
    for (const auto& opt : schedules(false))
      run_attention<float>(a, opt, false, type + " decode options", StoredAs16<H>(), t);
  }
  // Sequences of their own lengths: varlen (packed, and strided windows of a padded buffer) and
  // paged K/V (decode and prefill).
  for (bool causal : {false, true}) {
    std::vector<AttnData<float>> seqs =
        make_sequences<float>({0, 4, 2, 0, 0, 32, 16, causal}, {9, 0, 40, 1}, {30, 5, 70, 1}, 111);
    for (auto& q : seqs) q = rounded16<H>(q);
    const kflash::AttentionOptions opt = schedules(causal)[0];
    run_varlen<float>(seqs, opt, {}, type, StoredAs16<H>());
    run_varlen<float>(seqs, opt, {}, type + " strided", StoredAs16<H>(), true);
    for (std::size_t nq : {std::size_t(1), std::size_t(12)}) {
      std::vector<AttnData<float>> paged =
          make_sequences<float>({0, 4, 1, 0, 0, 32, 32, causal}, {nq, nq}, {50, 130}, 113);
      for (auto& q : paged) q = rounded16<H>(q);
      run_paged<float>(paged, 16, opt, {}, type, StoredAs16<H>());
    }
  }
}

/// The device schedule of Shape on 16-bit q, k, v, o (a TeamAttentionShape: the team schedule, its
/// tiles widened to float; a WarpAttentionShape: the warp-product schedule, its tiles as stored):
/// K/V staged by 16-byte chunks of 8 elements where the rows allow (D, Dv multiples of 8) and
/// element by element where not, on blocks and tiles not filled, GQA, causal rows that see no key,
/// split K/V.
template <class H, class Shape>
void half_team_schedule_cases() {
  const Storage16Scope scope(rounding16<H>());
  const std::string name = std::string(name16<H>()) + " team schedule " + std::to_string(Shape::BQ) + "x" +
                           std::to_string(Shape::BK) + " Dv " + std::to_string(Shape::DV);
  const StoredAs16<H, false, TeamScheduleAttention<Shape>> team{};
  constexpr std::size_t d = Shape::DV;
  unsigned seed = 120;
  for (AttnShape s :
       {AttnShape{1, 2, 1, 19, 45, d, d}, AttnShape{2, 6, 2, 13, 70, 3, 5}, AttnShape{1, 4, 2, 8, 40, d, d / 2},
        AttnShape{1, 2, 2, 8, 8, 40, d}, AttnShape{1, 8, 1, 1, 77, d, d}}) {
    run_attention<float>(rounded16<H>(make_attn_data<float>(s, seed++)), {}, false, name, team);
    if (::testing::Test::HasFailure()) return;
  }
  kflash::AttentionOptions opt;
  opt.causal = true;
  for (AttnShape s : {AttnShape{1, 2, 1, 33, 33, 8, 8, true}, AttnShape{1, 2, 1, 30, 11, d, d, true}}) {
    run_attention<float>(rounded16<H>(make_attn_data<float>(s, seed++)), opt, true, name + " causal", team);
    if (::testing::Test::HasFailure()) return;
  }
  opt.schedule = kflash::AttentionSchedule::split_kv;
  opt.num_splits = 3;
  run_attention<float>(rounded16<H>(make_attn_data<float>({1, 2, 1, 5, 61, d, d, true}, seed++)), opt, false,
                       name + " split_kv", team);
}

/// merge_attention of 16-bit parts (lse float): attention over three key ranges into 16-bit parts,
/// merged into a 16-bit o, against the reference over all keys. Each part is rounded once, and the
/// merge once more: the bound is the rounding of the largest part and of the result, plus float's.
template <class H>
void half_merge_case() {
  const AttnShape s{1, 4, 2, 9, 100, 32, 24};
  const auto a = rounded16<H>(make_attn_data<float>(s, 115));
  const std::vector<std::size_t> cuts{0, 10, 55, 100};
  const std::size_t parts = cuts.size() - 1;
  const auto q = stored16<H, Kokkos::LayoutRight>(make_tensor<float>(s.B, s.Hq, s.Nq, s.D, false, a.q).view);
  const auto k = stored16<H, Kokkos::LayoutRight>(make_tensor<float>(s.B, s.Hk, s.Nk, s.D, false, a.k).view);
  const auto v = stored16<H, Kokkos::LayoutRight>(make_tensor<float>(s.B, s.Hk, s.Nk, s.Dv, false, a.v).view);
  Kokkos::View<H*****, AMem> o_parts("o_parts", parts, s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<float****, AMem> lse_parts("lse_parts", parts, s.B, s.Hq, s.Nq);
  for (std::size_t p = 0; p < parts; ++p) {
    const auto keys = std::make_pair(cuts[p], cuts[p + 1]);
    kflash::attention(AExec(), q, Kokkos::subview(k, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL),
                      Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL),
                      Kokkos::subview(o_parts, p, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL),
                      kflash::AttentionOptions(), Kokkos::subview(lse_parts, p, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL));
  }
  Kokkos::View<H****, AMem> o16("o", s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<float****, AMem> o("o", s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<float***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  kflash::merge_attention(AExec(), o_parts, lse_parts, o16, lse);
  widened_into(o, o16);
  auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o_parts);
  ld max_part = 0;
  for (std::size_t i = 0; i < hp.span(); ++i)
    max_part = std::max<ld>(max_part, std::fabs(kflash::impl::widen(hp.data()[i])));
  const AttnRef ref = reference_attention(a, 1 / std::sqrt(ld(s.D)));
  const ld tol = attention_tolerance<float>(ref) + rounding16<H>() * max_part / ref.max_abs_o;
  expect_attention_matches<float>(ref, flatten4(o), flatten3(lse), tol, std::string(name16<H>()) + " merge_attention");
}

TEST(TEST_CATEGORY, HalfAttention) {
  // The host kernels' set in use never exceeds the one KFLASH_HOST_ISA names: the ISA lanes run
  // bf16 attention through each set's products below the best.
  namespace host = kflash::impl::host;
  const char* wanted = std::getenv("KFLASH_HOST_ISA");
  const char* names[] = {"baseline", "avx2", "avx512", "avx512bf16", "amx"};
  for (int i = 0; i < 5; ++i) {
    if (wanted != nullptr && std::string(wanted) == names[i]) {
      EXPECT_LE(int(host::isa()), i) << "KFLASH_HOST_ISA=" << wanted << ", in use: " << host::isa_name(host::isa());
    }
  }
  half_attention_cases<kflash::bhalf_t>();
  if (::testing::Test::HasFailure()) return;
  half_attention_cases<kflash::half_t>();
}

/// Where Space has no host kernels: the plan picks the traits' shapes for 16-bit storage, and the
/// cases above run through each of them. (A template, so that host traits, which have no team
/// shapes, never instantiate the branch.)
template <class Space>
void half_traits_shape_cases() {
  using Traits = kflash::impl::ScheduleTraits<Space>;
  if constexpr (!Traits::host_kernels) {
    constexpr int small = Traits::team_dv_small, large = Traits::team_dv_large;
    kflash::impl::AttentionPlan p;
    p.B = 1, p.Hq = 4, p.Hk = 2, p.Nq = 40, p.Nk = 300, p.D = p.Dv = small;
    EXPECT_EQ((kflash::impl::plan_attention<kflash::bhalf_t, Traits>(Space(), p).team_dv), small);
    p.Dv = large;
    EXPECT_EQ((kflash::impl::plan_attention<kflash::half_t, Traits>(Space(), p).team_dv), large);
    half_team_schedule_cases<kflash::bhalf_t, typename Traits::template team_shape<float, small, false>>();
    half_team_schedule_cases<kflash::bhalf_t, typename Traits::template team_shape<float, large, true>>();
    half_team_schedule_cases<kflash::half_t, typename Traits::template team_shape<float, large, false>>();
    half_team_schedule_cases<kflash::half_t, typename Traits::template team_shape<float, small, true>>();
    // The warp-product schedule, which the plan takes for 16-bit storage but in decoding's blocks.
    using kflash::impl::is_warp_shape;
    using BfSmall = typename Traits::template warp_shape<kflash::bhalf_t, small, false>;
    using HalfLarge = typename Traits::template warp_shape<kflash::half_t, large, false>;
    static_assert(is_warp_shape<BfSmall> && is_warp_shape<HalfLarge>, "kflash tests: no warp shape for 16 bits");
    static_assert(std::is_void<typename Traits::template warp_shape<kflash::bhalf_t, small, true>>::value,
                  "kflash tests: a warp shape for decoding's blocks");
    half_team_schedule_cases<kflash::bhalf_t, BfSmall>();
    half_team_schedule_cases<kflash::half_t, HalfLarge>();
    half_team_schedule_cases<kflash::bhalf_t, typename Traits::template warp_shape<kflash::bhalf_t, large, false>>();
  }
}

TEST(TEST_CATEGORY, HalfAttentionTeamSchedule) {
  // The device schedule on 16-bit storage: on host teams through a small shape (every backend),
  // and through the traits' own shapes where this space has no host kernels.
  with_small_team_shape<float>([](auto shape) {
    using Shape = std::remove_pointer_t<decltype(shape)>;
    half_team_schedule_cases<kflash::bhalf_t, Shape>();
    if (::testing::Test::HasFailure()) return;
    half_team_schedule_cases<kflash::half_t, Shape>();
  });
  if (::testing::Test::HasFailure()) return;
  with_small_warp_shape<kflash::bhalf_t>([](auto shape) {
    half_team_schedule_cases<kflash::bhalf_t, std::remove_pointer_t<decltype(shape)>>();
  });
  with_small_warp_shape<kflash::half_t>([](auto shape) {
    half_team_schedule_cases<kflash::half_t, std::remove_pointer_t<decltype(shape)>>();
  });
  half_traits_shape_cases<AExec>();
}

/// warp_product against long double: one warp's block C (16 x 8, each lane's four values where
/// WarpBlock places them) += A B^T over 32 of k in two calls, from A and B of H (16-bit or float) in
/// team scratch whose rows are 40 and 48 elements apart. On CUDA devices of compute capability 8.0
/// and newer this checks the warp matrix instructions' layout of their operands and results (float:
/// the 3xTF32 products); elsewhere the lanes' own sums. The lanes' values must cover the block once.
template <class H>
void warp_product_case() {
  using kflash::impl::WarpBlock;
  const int lda = 40, ldb = 48, depth = 32;
  std::vector<float> a(16 * lda, 0.0f), b(8 * ldb, 0.0f);
  const std::vector<ld> values = uniform_values<float>(16 * depth + 8 * depth, 131, -2, 2);
  for (int i = 0; i < 16 * depth; ++i) a[i / depth * lda + i % depth] = round16<H>(float(values[i]));
  for (int i = 0; i < 8 * depth; ++i) b[i / depth * ldb + i % depth] = round16<H>(float(values[16 * depth + i]));
  Kokkos::View<H*, AMem> av("a", a.size()), bv("b", b.size());
  auto ah = Kokkos::create_mirror_view(av);
  auto bh = Kokkos::create_mirror_view(bv);
  for (std::size_t i = 0; i < a.size(); ++i) ah(i) = kflash::impl::store_as<H>(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) bh(i) = kflash::impl::store_as<H>(b[i]);
  Kokkos::deep_copy(av, ah);
  Kokkos::deep_copy(bv, bh);
  Kokkos::View<float**, AMem> out("out", WarpBlock::lanes, 4);
  using Policy = Kokkos::TeamPolicy<AExec>;
  const int team = kflash::impl::ScheduleTraits<AExec>::is_host ? 1 : WarpBlock::lanes;
  const std::size_t bytes = (a.size() + b.size()) * sizeof(H) + 64;
  Kokkos::parallel_for(
      "warp_product", Policy(AExec(), 1, team).set_scratch_size(0, Kokkos::PerTeam(bytes)),
      KOKKOS_LAMBDA(const typename Policy::member_type& m) {
        H* as = static_cast<H*>(m.team_scratch(0).get_shmem_aligned(sizeof(H) * 16 * lda, 16));
        H* bs = static_cast<H*>(m.team_scratch(0).get_shmem_aligned(sizeof(H) * 8 * ldb, 16));
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, 16 * lda), [&](int i) { as[i] = av(i); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, 8 * ldb), [&](int i) { bs[i] = bv(i); });
        m.team_barrier();
        for (int lane = m.team_rank(); lane < WarpBlock::lanes; lane += m.team_size()) {
          float c[4] = {0.5f, -0.25f, 1.0f, 0.0f};
          for (int k = 0; k < depth; k += WarpBlock::depth)
            kflash::impl::warp_product(c, as + k, lda, bs + k, ldb, lane);
          for (int i = 0; i < 4; ++i) out(lane, i) = c[i];
        }
      });
  const auto oh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  const ld init[4] = {0.5L, -0.25L, 1.0L, 0.0L};
  const char* what = std::is_same<H, float>::value ? "float" : name16<H>();
  // float on the tensor cores (3xTF32): each product also loses the parts below its TF32 splits,
  // under 3 2^-22 of it.
  const ld split = std::is_same<H, float>::value ? std::ldexp(3.0L, -22) : 0.0L;
  std::vector<int> seen(WarpBlock::rows * WarpBlock::cols, 0);
  for (int lane = 0; lane < WarpBlock::lanes; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int r = WarpBlock::row(lane, i), c = WarpBlock::col(lane, i);
      ++seen[r * WarpBlock::cols + c];
      ld ref = init[i], mag = std::fabs(init[i]);
      for (int k = 0; k < depth; ++k) {
        ref += ld(a[r * lda + k]) * ld(b[c * ldb + k]);
        mag += std::fabs(ld(a[r * lda + k]) * ld(b[c * ldb + k]));
      }
      // 16-bit products are exact in fp32, float's round once with their sums (FMA); each of the
      // 33 sums rounds (or truncates) once.
      EXPECT_LE(std::fabs(oh(lane, i) - ref), (2 * (depth + 1) * eps<float> + split) * mag)
          << what << " warp_product lane " << lane << " value " << i << " (row " << r << ", column " << c << ")";
    }
  for (int rc = 0; rc < WarpBlock::rows * WarpBlock::cols; ++rc)
    EXPECT_EQ(seen[rc], 1) << "warp_product: block value (" << rc / WarpBlock::cols << ", " << rc % WarpBlock::cols
                           << ") held by " << seen[rc] << " lanes";
}

TEST(TEST_CATEGORY, WarpProduct) {
  warp_product_case<float>();
  warp_product_case<kflash::bhalf_t>();
  warp_product_case<kflash::half_t>();
}

TEST(TEST_CATEGORY, HalfAttentionMerge) {
  {
    const Storage16Scope scope(rounding16<kflash::bhalf_t>());
    half_merge_case<kflash::bhalf_t>();
  }
  const Storage16Scope scope(rounding16<kflash::half_t>());
  half_merge_case<kflash::half_t>();
}

/// AttentionStream<H> over key chunks of `width` (shuffled) with the options of `terms`: q, k, v
/// stored in H ((B, N, H, D) strides for K/V), o rounded once by result(), lse float; against the
/// reference on the same 16-bit values (the caller's Storage16Scope adds o's rounding).
template <class H>
void check_half_attention_stream(const AttnData<float>& a, const RefTerms& terms, std::size_t width,
                                 const std::string& what) {
  const AttnShape& s = a.s;
  const auto q = make_tensor<float>(s.B, s.Hq, s.Nq, s.D, false, a.q);
  const auto k = make_tensor<float>(s.B, s.Hk, s.Nk, s.D, true, a.k);
  const auto v = make_tensor<float>(s.B, s.Hk, s.Nk, s.Dv, true, a.v);
  const auto store = [](const auto& f) { return stored16<H, typename std::decay_t<decltype(f)>::array_layout>(f); };
  const auto q16 = store(q.view), k16 = store(k.view), v16 = store(v.view);
  kflash::AttentionOptions opt;
  opt.causal = s.causal;
  opt = with_terms<float>(opt, s, terms);
  kflash::AttentionStream<H, AExec> stream(AExec(), q16, std::int64_t(s.Dv), opt,
                                           std::int64_t(s.Nk) - std::int64_t(s.Nq));
  for (const auto& t : tiles_of(s.Nk, width, 7)) {
    const auto keys = Kokkos::make_pair(t.first, t.second);
    stream.update(AExec(), Kokkos::subview(k16, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL),
                  Kokkos::subview(v16, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL), std::int64_t(t.first));
  }
  Kokkos::View<H****, AMem> o16("o16", s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<float****, AMem> o("o", s.B, s.Hq, s.Nq, s.Dv);
  Kokkos::View<float***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  stream.result(AExec(), o16, lse);
  widened_into(o, o16);
  const AttnRef ref = reference_attention(a, 1 / std::sqrt(ld(s.D)), terms);
  expect_attention_matches<float>(ref, flatten4(o), flatten3(lse), attention_tolerance<float>(ref),
                                  what + " " + name16<H>() + " AttentionStream " + describe(s) + " chunks of " +
                                      std::to_string(width));
}

template <class H>
void half_attention_streams() {
  const Storage16Scope scope(rounding16<H>());
  const auto a = rounded16<H>(make_attn_data<float>(AttnShape{2, 4, 2, 5, 300, 16, 8}, 111));
  for (std::size_t width : {1, 64, 300}) check_half_attention_stream<H>(a, {}, width, "dense");
  const auto c = rounded16<H>(make_attn_data<float>(AttnShape{1, 2, 1, 6, 200, 32, 32, true}, 113));
  for (std::size_t width : {8, 200}) check_half_attention_stream<H>(c, {}, width, "causal");
  RefTerms mods;
  mods.softcap = 5;
  mods.slopes = rounded<float>({0.5L, 0.25L});
  mods.sinks = rounded<float>({1.5L, -2});
  check_half_attention_stream<H>(c, mods, 16, "softcap + ALiBi + sinks");
}

TEST(TEST_CATEGORY, HalfAttentionStream) {
  half_attention_streams<kflash::bhalf_t>();
  half_attention_streams<kflash::half_t>();
}

/// attention_backward on 16-bit q, k, v, o, dout, dq, dk, dv (lse, options and dsinks float) after
/// the 16-bit forward, against the long-double gradients of the same 16-bit values (D_i from the o
/// the call reads): per gradient within twice the 16-bit rounding of max |reference| plus GUIDE
/// §8's fp32 bound.
template <class H>
void check_half_backward(const AttnShape& s, const RefTerms& terms, unsigned seed, const std::string& what) {
  const auto a = rounded16<H>(make_attn_data<float>(s, seed));
  std::vector<float> dout_f = normal_values<float>(s.B * s.Hq * s.Nq * s.Dv, seed + 1);
  for (float& x : dout_f) x = round16<H>(x);
  kflash::AttentionOptions opt;
  opt.causal = s.causal;
  opt = with_terms<float>(opt, s, terms);
  const auto store = [](const auto& f) { return stored16<H, Kokkos::LayoutRight>(f); };
  const auto q = store(make_tensor<float>(s.B, s.Hq, s.Nq, s.D, false, a.q).view);
  const auto k = store(make_tensor<float>(s.B, s.Hk, s.Nk, s.D, false, a.k).view);
  const auto v = store(make_tensor<float>(s.B, s.Hk, s.Nk, s.Dv, false, a.v).view);
  const auto dout = store(make_tensor<float>(s.B, s.Hq, s.Nq, s.Dv, false, dout_f).view);
  using V4 = Kokkos::View<H****, Kokkos::LayoutRight, AMem>;
  V4 o("o", s.B, s.Hq, s.Nq, s.Dv), dq("dq", s.B, s.Hq, s.Nq, s.D), dk("dk", s.B, s.Hk, s.Nk, s.D),
      dv("dv", s.B, s.Hk, s.Nk, s.Dv);
  Kokkos::View<float***, AMem> lse("lse", s.B, s.Hq, s.Nq);
  kflash::AttentionGrads grads;
  Kokkos::View<float*, AMem> dsinks("dsinks", s.Hq);
  if (!opt.sinks.empty()) grads.dsinks = dsinks;
  kflash::attention(AExec(), q, k, v, o, opt, lse);
  kflash::attention_backward(AExec(), q, k, v, o, lse, dout, dq, dk, dv, opt, grads);
  const auto widened = [](const V4& h) {
    Kokkos::View<float****, AMem> f("f", h.extent(0), h.extent(1), h.extent(2), h.extent(3));
    widened_into(f, h);
    return flatten4(f);
  };
  AttnGrads got{widened(dq), widened(dk), widened(dv), {}, {}};
  if (!opt.sinks.empty()) {
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dsinks);
    got.dsinks.assign(h.data(), h.data() + h.size());
  }
  const std::vector<ld> o_read = widened(o);
  const AttnGrads ref = reference_attention_backward(a, 1 / std::sqrt(ld(s.D)), terms,
                                                     std::vector<ld>(dout_f.begin(), dout_f.end()), &o_read);
  expect_grads_within(ref, got, 2 * rounding16<H>() + 1e-4L, what + " " + name16<H>() + " " + describe(s));
}

template <class H>
void half_attention_backward_cases() {
  check_half_backward<H>(AttnShape{1, 4, 2, 40, 60, 32, 16, true}, {}, 121, "GQA causal");
  RefTerms mods;
  mods.softcap = 5;
  mods.slopes = rounded<float>({0.5L, 0.25L});
  mods.sinks = rounded<float>({1.5L, -2});
  check_half_backward<H>(AttnShape{2, 2, 1, 17, 33, 16, 24}, mods, 123, "softcap + ALiBi + sinks");
}

TEST(TEST_CATEGORY, HalfAttentionBackward) {
  half_attention_backward_cases<kflash::bhalf_t>();
  half_attention_backward_cases<kflash::half_t>();
}

}  // namespace kflash_test
