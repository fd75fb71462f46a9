// The (m, l) monoid: laws and the numerics contract, on the host and inside TEST_EXECSPACE kernels.
#pragma once

#include <TestCommon.hpp>

namespace kflash_test {

template <class T>
kflash::SoftmaxState<T> state_of(const std::vector<T>& xs) {
  auto s = kflash::SoftmaxState<T>::identity();
  for (T x : xs) s.push(x);
  return s;
}

/// The state of each given row computed inside a TEST_EXECSPACE kernel (one row per index).
template <class T>
std::vector<kflash::SoftmaxState<T>> states_on_device(const std::vector<std::vector<T>>& rows) {
  using mem = TEST_EXECSPACE::memory_space;
  std::size_t width = 0;
  for (auto& r : rows) width = std::max(width, r.size());
  Kokkos::View<T**, Kokkos::LayoutRight, mem> x("x", rows.size(), width);
  Kokkos::View<int*, mem> len("len", rows.size());
  auto hx = Kokkos::create_mirror_view(x);
  auto hlen = Kokkos::create_mirror_view(len);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    hlen(r) = static_cast<int>(rows[r].size());
    for (std::size_t c = 0; c < rows[r].size(); ++c) hx(r, c) = rows[r][c];
  }
  Kokkos::deep_copy(x, hx);
  Kokkos::deep_copy(len, hlen);
  Kokkos::View<kflash::SoftmaxState<T>*, mem> out("out", rows.size());
  Kokkos::parallel_for(
      Kokkos::RangePolicy<TEST_EXECSPACE>(0, rows.size()), KOKKOS_LAMBDA(int r) {
        // Half the row by push, half as a separate state merged in: both operations on the device.
        auto a = kflash::SoftmaxState<T>::identity();
        auto b = kflash::SoftmaxState<T>::identity();
        for (int c = 0; c < len(r); ++c) (c % 2 ? b : a).push(x(r, c));
        a.merge(b);
        out(r) = a;
      });
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  return std::vector<kflash::SoftmaxState<T>>(h.data(), h.data() + h.extent(0));
}

/// Element access and a store that discards, for the shared tile functions (callable from both
/// sides, as they are under nvcc).
template <class T>
struct ElementOf {
  const T* p;
  KOKKOS_INLINE_FUNCTION T operator()(kflash::impl::index_t i) const { return p[i]; }
};
template <class T>
struct Discard {
  KOKKOS_INLINE_FUNCTION void operator()(kflash::impl::index_t, T) const {}
};

template <class T>
struct SoftmaxStateTest : ::testing::Test {};
TYPED_TEST_SUITE(SoftmaxStateTest, Scalars);

TYPED_TEST(SoftmaxStateTest, IdentityIsNeutral) {
  using T = TypeParam;
  using S = kflash::SoftmaxState<T>;
  const S e = S::identity();
  EXPECT_EQ(e.max, -inf<T>);
  EXPECT_EQ(e.total(), T(0));
  EXPECT_EQ(e.logsumexp(), -inf<T>);
  const auto xs = normal_values<T>(100, 1);
  const S s = state_of(xs);
  S left = e, right = s;
  left.merge(s);
  right.merge(e);
  for (const S& m : {left, right}) {
    EXPECT_EQ(m.max, s.max);
    EXPECT_EQ(m.total(), s.total());
  }
}

TYPED_TEST(SoftmaxStateTest, MergeIsAssociativeAndOrderIndependent) {
  using T = TypeParam;
  using S = kflash::SoftmaxState<T>;
  const auto xs = normal_values<T>(3000, 2, 5.0);
  const RefRow ref = reference_row(xs.data(), xs.size());
  // Three parts of different sizes; every bracketing and order gives the reference within rounding.
  const std::vector<T> pa(xs.begin(), xs.begin() + 1000), pb(xs.begin() + 1000, xs.begin() + 1700),
      pc(xs.begin() + 1700, xs.end());
  const S a = state_of(pa), b = state_of(pb), c = state_of(pc);
  S ab_c = a; ab_c.merge(b); ab_c.merge(c);
  S bc = b; bc.merge(c);
  S a_bc = a; a_bc.merge(bc);
  S cba = c; cba.merge(b); cba.merge(a);
  S bac = b; bac.merge(a); bac.merge(c);
  for (const S& s : {ab_c, a_bc, cba, bac}) {
    EXPECT_EQ(ld(s.max), ref.max);
    EXPECT_LE(std::fabs(s.total() - ref.l) / ref.l, 4 * eps<T>);
  }
  // A single-element-at-a-time tree of merges agrees as well.
  std::vector<S> level;
  for (T x : xs) level.push_back(S::of(x));
  while (level.size() > 1) {
    std::vector<S> next;
    for (std::size_t i = 0; i + 1 < level.size(); i += 2) {
      S m = level[i];
      m.merge(level[i + 1]);
      next.push_back(m);
    }
    if (level.size() % 2) next.push_back(level.back());
    level.swap(next);
  }
  EXPECT_LE(std::fabs(level[0].total() - ref.l) / ref.l, 16 * eps<T>);
}

TYPED_TEST(SoftmaxStateTest, NumericsContract) {
  using T = TypeParam;
  const T big = std::numeric_limits<T>::max();
  struct Case {
    std::vector<T> xs;
    ld lse;  // expected; NaN means NaN
    const char* what;
  };
  const ld lnan = std::numeric_limits<ld>::quiet_NaN();
  const std::vector<Case> cases = {
      {{}, -inf<ld>, "empty"},
      {{-inf<T>}, -inf<ld>, "single -inf"},
      {{-inf<T>, -inf<T>, -inf<T>}, -inf<ld>, "all -inf"},
      {{T(3)}, 3, "single finite"},
      {{-inf<T>, T(2), -inf<T>}, 2, "finite among -inf"},
      {{T(1), nan<T>, T(2)}, lnan, "NaN in the middle"},
      {{nan<T>}, lnan, "single NaN"},
      {{-inf<T>, nan<T>}, lnan, "NaN after -inf"},
      {{nan<T>, -inf<T>}, lnan, "-inf after NaN"},
      {{T(1), inf<T>, T(2)}, inf<ld>, "+inf"},
      {{inf<T>, inf<T>}, inf<ld>, "two +inf"},
      {{-inf<T>, inf<T>}, inf<ld>, "-inf then +inf"},
      {{inf<T>, nan<T>}, lnan, "+inf then NaN"},
      {{nan<T>, inf<T>}, lnan, "NaN then +inf"},
      {{big, big}, ld(big) + std::log(2.0L), "two +max"},
      {{-big, big}, ld(big), "-max and +max"},
      {{-big, -big}, -ld(big) + std::log(2.0L), "two -max"},
      {{T(1e30), T(-1e30), T(1e30)}, ld(T(1e30)) + std::log(2.0L), "1e30"},
  };
  auto check = [&](const kflash::SoftmaxState<T>& s, const Case& c, const char* how) {
    const T got = s.logsumexp();
    if (std::isnan(c.lse)) {
      EXPECT_TRUE(std::isnan(got)) << c.what << " (" << how << "): " << got;
    } else if (std::isinf(c.lse)) {
      EXPECT_EQ(ld(got), c.lse) << c.what << " (" << how << ")";
    } else {
      EXPECT_LE(std::fabs(got - c.lse), 2 * eps<T> * std::fabs(c.lse)) << c.what << " (" << how << ")";
    }
  };
  std::vector<std::vector<T>> rows;
  for (const Case& c : cases) {
    check(state_of(c.xs), c, "push");
    // The same elements as single-element states merged left to right and right to left.
    auto fwd = kflash::SoftmaxState<T>::identity(), bwd = fwd;
    for (T x : c.xs) fwd.merge(kflash::SoftmaxState<T>::of(x));
    for (auto it = c.xs.rbegin(); it != c.xs.rend(); ++it) bwd.merge(kflash::SoftmaxState<T>::of(*it));
    check(fwd, c, "merge forward");
    check(bwd, c, "merge backward");
    rows.push_back(c.xs);
  }
  const auto dev = states_on_device(rows);
  for (std::size_t i = 0; i < cases.size(); ++i) check(dev[i], cases[i], "device push + merge");
}

TYPED_TEST(SoftmaxStateTest, ExpNonpositiveAccuracy) {
  // The library's exp for arguments <= 0: within 2 ulp of exp over [lowest normal result, 0],
  // exact at 0, exactly 0 below (and for -inf), NaN for NaN.
  using T = TypeParam;
  using C = kflash::impl::ExpConstants<T>;
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  ld worst = 0;
  for (int i = 0; i < 1000000; ++i) {
    // Uniform over the range, and log-uniform near 0 where exp is close to 1.
    const T x = i % 2 ? T(u(gen) * C::lowest) : T(-std::pow(10.0, -12 * u(gen)));
    const ld ref = std::exp(ld(x));
    worst = std::max(worst, std::fabs(kflash::impl::exp_nonpositive(x) - ref) / ref);
  }
  EXPECT_LE(worst, 2 * eps<T>) << "worst relative error " << double(worst);
  EXPECT_EQ(kflash::impl::exp_nonpositive(T(0)), T(1));
  EXPECT_EQ(kflash::impl::exp_nonpositive(-inf<T>), T(0));
  EXPECT_EQ(kflash::impl::exp_nonpositive(T(C::lowest) * T(1.01)), T(0));
  EXPECT_EQ(kflash::impl::exp_nonpositive(-std::numeric_limits<T>::max()), T(0));
  EXPECT_TRUE(std::isnan(kflash::impl::exp_nonpositive(nan<T>)));
}

TYPED_TEST(SoftmaxStateTest, HostKernelExpAccuracy) {
  // The same exp compiled into the host kernels' variant in use (FMA contraction, other vector
  // widths): y = exp(x - 0) * 1 through the prob step, within 2 ulp, with the special values.
  using T = TypeParam;
  using C = kflash::impl::ExpConstants<T>;
  namespace host = kflash::impl::host;
  const char* wanted = std::getenv("KFLASH_HOST_ISA");
  if (wanted != nullptr && std::string(wanted) == "baseline") {
    EXPECT_EQ(host::isa(), host::Isa::baseline);
  }
  std::mt19937_64 gen(6);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<T> special = {T(0), -inf<T>, T(C::lowest) * T(1.01), -std::numeric_limits<T>::max(), nan<T>};
  // The special values first (in the first whole vector, so through the vector exp), then random
  // arguments, the last few through the scalar tail.
  const std::size_t s = special.size(), k = (std::size_t(1) << 20) + 3;
  std::vector<T> x(s + k), y(x.size());
  for (std::size_t i = 0; i < s; ++i) x[i] = special[i];
  for (std::size_t i = s; i < s + k; ++i) x[i] = i % 2 ? T(u(gen) * C::lowest) : T(-std::pow(10.0, -12 * u(gen)));
  const kflash::SoftmaxNormalizer<T> identity(kflash::SoftmaxState<T>::of(T(0)));  // exp(x - 0) / 1
  host::write_row(kflash::impl::RowOp::softmax, x.data(), y.data(), kflash::impl::index_t(x.size()), identity, false);
  ld worst = 0;
  for (std::size_t i = s; i < s + k; ++i) {
    const ld ref = std::exp(ld(x[i]));
    worst = std::max(worst, std::fabs(y[i] - ref) / ref);
  }
  EXPECT_LE(worst, 2 * eps<T>) << "worst relative error " << double(worst) << " (host kernels: "
                               << host::isa_name(host::isa()) << ")";
  EXPECT_EQ(y[0], T(1));
  EXPECT_EQ(y[1], T(0));
  EXPECT_EQ(y[2], T(0));
  EXPECT_EQ(y[3], T(0));
  EXPECT_TRUE(std::isnan(y[4]));
}

TYPED_TEST(SoftmaxStateTest, ScalarAndVectorLanesAgree) {
  // The tile recurrence is one template over lane-block policies: the host kernels' vector lanes
  // (each compiled variant) against the plain scalar lanes, tile by tile through RowTiles as the
  // host kernels add them (against the running maximum, the first against start_at's guess, unless
  // a tile overshoots it), on rows of every length up to three tiles and a few past (a tail past
  // whole blocks, a partial last tile), of normal values, of values spread over 1e4, and with -inf
  // entries. The maxima agree bit for bit, and so do the sums of the baseline variant (no contraction, the same
  // exp) on rows of whole blocks. The vector lanes add a row's last values as one more block to the
  // lanes' sums, the scalar lanes one by one (compensated): there, as wherever AVX2 and AVX-512
  // contract the exp polynomial into multiply-adds and AVX-512 fp64 takes exp from a table, the
  // totals agree within 8 ulp.
  using T = TypeParam;
  namespace host = kflash::impl::host;
  using kflash::impl::index_t;
  using Lanes = kflash::impl::ScalarLanes<T>;
  constexpr index_t tile = kflash::impl::HostTraits::tile;
  std::mt19937_64 gen(21);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<index_t> lengths;
  for (index_t n = 1; n <= 3 * tile + 40; n += n < 64 ? 1 : 37) lengths.push_back(n);
  for (host::Isa which : {host::Isa::baseline, host::Isa::avx2, host::Isa::avx512}) {
    if (int(which) > int(host::isa())) continue;  // a variant this CPU (or KFLASH_HOST_ISA) rules out
    ld worst = 0;
    for (int kind = 0; kind < 3; ++kind)
      for (index_t n : lengths) {
        std::vector<T> x(static_cast<std::size_t>(n));
        for (auto& v : x) v = T(kind == 1 ? 1e4 * normal(gen) : normal(gen));
        if (kind == 2)
          for (std::size_t i = 0; i < x.size(); i += 3) x[i] = -inf<T>;
        kflash::impl::RowTiles<Lanes, T> tiles;
        for (index_t b = 0; b < n; b += tile) {
          const index_t e = std::min(n, b + tile);
          T ref;
          if (b == 0) tiles.start_at(b, e, ElementOf<T>{x.data()});
          if (!tiles.try_running_max() ||
              !tiles.add_against_running_max(b, e, ElementOf<T>{x.data()}, Discard<T>{}, tiles.slack, ref))
            tiles.add_own_max(b, e, ElementOf<T>{x.data()}, Discard<T>{});
        }
        const kflash::SoftmaxState<T> ref = tiles.state;
        const auto got = host::row_state(which, x.data(), n);
        const std::string where = std::string(host::isa_name(which)) + " n = " + std::to_string(n) +
                                  " kind " + std::to_string(kind);
        ASSERT_EQ(got.max, ref.max) << where;
        if (which == host::Isa::baseline && n % Lanes::width == 0) {
          ASSERT_EQ(got.total(), ref.total()) << where;
        } else {
          worst = std::max(worst, std::fabs(ld(got.total()) - ld(ref.total())) / ld(ref.total()));
        }
      }
    EXPECT_LE(worst, 8 * eps<T>) << host::isa_name(which) << ": worst relative difference of l "
                                 << double(worst / eps<T>) << " eps";
  }
}

TYPED_TEST(SoftmaxStateTest, HostKernelShortRowLogAccuracy) {
  // Rows of at most one tile take their logs in vectors (not libm's): logsumexp and log_softmax
  // of rows of 64, whose l sweeps [1, 64] (every binade, both sides of each sqrt(2) f), against
  // the state of the shared code with a long-double log. That state's l may differ from the
  // kernels' by a few ulp (their exp is contracted to FMAs), which moves log l by a few eps: the
  // bound on log l is 4 eps + an ulp of it, on logsumexp half an ulp more of the result.
  using T = TypeParam;
  namespace host = kflash::impl::host;
  using kflash::impl::index_t;
  using kflash::impl::RowOp;
  const index_t rows = 4099, cols = 64;  // not a multiple of the kernels' group of rows
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<T> x(rows * cols), y(x.size()), out(rows);
  std::vector<index_t> at_max(rows);
  for (index_t r = 0; r < rows; ++r) {
    const double shift = 200 * u(gen) - 100;           // the maximum, at a random column
    const double c = -std::pow(10.0, 3 * u(gen) - 2);  // the others: l from 1 + 63 e^-10 to about 64
    for (index_t j = 0; j < cols; ++j) x[r * cols + j] = T(shift + c * (1 + 0.01 * u(gen)));
    at_max[r] = index_t(u(gen) * cols);
    x[r * cols + at_max[r]] = T(shift);
  }
  for (RowOp op : {RowOp::logsumexp, RowOp::log_softmax}) {
    host::RowBlock<T> block{op, x.data(), cols, y.data(), cols, out.data(), 1, rows, cols};
    host::run_rows(block);
    ld worst = 0;
    for (index_t r = 0; r < rows; ++r) {
      const T* row = x.data() + r * cols;
      const auto s = kflash::impl::tile_state<kflash::impl::ScalarLanes<T>, T>(index_t(0), cols, ElementOf<T>{row}, Discard<T>{});
      const ld log_l = std::log(ld(s.total()));
      if (op == RowOp::logsumexp) {
        const ld ref = ld(s.max) + log_l;
        worst = std::max(worst, std::fabs(out[r] - ref) / (4 + 2 * log_l + std::fabs(ref)));
      } else {
        const ld log_sum = -ld(y[r * cols + at_max[r]]);  // there y = (max - max) - log l = -log l
        worst = std::max(worst, std::fabs(log_sum - log_l) / (4 + 2 * log_l));
      }
    }
    EXPECT_LE(worst, eps<T>) << (op == RowOp::logsumexp ? "logsumexp" : "log_softmax")
                             << ": worst error, in units of the bound, " << double(worst / eps<T>);
  }
}

TYPED_TEST(SoftmaxStateTest, HostAttentionTileStepsAgree) {
  // The host tile kernel takes the tile step of its rows a group at a time, the lanes of a vector's
  // worth of rows reduced by one tree (tile_steps): against tile_step on plain scalar lanes, row by
  // row, for each compiled variant, on the tile's update part (scores given). 21 rows (a whole group
  // and a partial one at every width); tiles of 128 and 77 keys (a tail past whole blocks of 16);
  // each row's scores on its own scale and centre, so that no row's maximum is another's; rows that
  // see part of the tile or none of it; running states that are empty or whose maximum lies above,
  // below or inside the tile's. The maxima agree bit for bit; l and the weights within 8 ulp (AVX2
  // and AVX-512 contract the exp into multiply-adds or take it from a table; weights near the
  // underflow within the smallest normal number); O (Dv = 32) within 16
  // ulp of its terms' magnitude, against a long-double sum of the reference's weights.
  using T = TypeParam;
  namespace host = kflash::impl::host;
  using kflash::impl::index_t;
  using kflash::impl::KeyRange;
  using State = kflash::SoftmaxState<T>;
  constexpr index_t rows = 21, bk = 128, dv = 32;
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (index_t nk : {bk, index_t(77)}) {
    std::vector<T> scores(rows * bk, T(0)), v(bk * dv), o0(rows * dv);
    std::vector<State> st0(rows);
    std::vector<KeyRange> keys(rows, KeyRange{0, nk});
    for (auto& x : v) x = T(u(gen));
    for (auto& x : o0) x = T(u(gen));
    for (index_t r = 0; r < rows; ++r) {
      const double scale = std::pow(10.0, -2 + 5.0 * double(r) / rows), centre = 37.0 * double(r) - 300.0;
      for (index_t j = 0; j < nk; ++j) scores[r * bk + j] = T(centre + scale * u(gen));
      if (r % 5 == 3) keys[r] = KeyRange{r % 7, nk - r};  // part of the tile
      if (r == 9) keys[r] = KeyRange{nk / 2, nk / 2};      // none of it
      switch (r % 4) {
        case 0: st0[r] = State::identity(); break;
        case 1: st0[r] = State{T(centre + 2 * scale), T(3.5), T(0)}; break;  // above the tile's maximum
        case 2: st0[r] = State{T(centre - 2 * scale), T(1.25), T(0)}; break;  // below it
        default: st0[r] = State{T(centre), T(7), T(0)}; break;                  // inside
      }
    }
    // The reference: tile_step on scalar lanes, and O = fa O + sum_j w_j v_j in long double.
    std::vector<T> w_ref = scores;
    std::vector<State> st_ref = st0;
    std::vector<ld> o_ref(rows * dv);
    for (index_t r = 0; r < rows; ++r) {
      T* w = w_ref.data() + r * bk;
      const auto f = kflash::impl::tile_step<kflash::impl::ScalarLanes<T>, T>(
          st_ref[r], keys[r], nk, kflash::impl::Load<T>{w}, kflash::impl::Store<T>{w});
      for (index_t d = 0; d < dv; ++d) {
        ld sum = ld(o0[r * dv + d]) * f.fa;
        for (index_t j = 0; j < nk; ++j) sum += ld(w[j]) * v[j * dv + d];
        o_ref[r * dv + d] = sum;
      }
    }
    for (host::Isa which : {host::Isa::baseline, host::Isa::avx2, host::Isa::avx512}) {
      if (int(which) > int(host::isa())) continue;  // a variant this CPU (or KFLASH_HOST_ISA) rules out
      std::vector<T> s = scores, o = o0;
      std::vector<State> st = st0;
      host::AttentionTile<T> tile{nullptr, nullptr, v.data(), s.data(), o.data(), st.data(), keys.data(),
                                  rows,    nk,      bk,       0,        dv};
      tile.ldv = dv;
      tile.part = host::TilePart::update;
      host::attention_tile(which, tile);
      for (index_t r = 0; r < rows; ++r) {
        const std::string where =
            std::string(host::isa_name(which)) + " nk " + std::to_string(nk) + " row " + std::to_string(r);
        ASSERT_EQ(st[r].max, st_ref[r].max) << where;
        EXPECT_LE(std::fabs(ld(st[r].total()) - ld(st_ref[r].total())), 8 * eps<T> * ld(st_ref[r].total())) << where;
        ld magnitude = 0;
        for (index_t j = 0; j < nk; ++j) {
          const ld ref = w_ref[r * bk + j];
          EXPECT_LE(std::fabs(ld(s[r * bk + j]) - ref), 8 * eps<T> * ref + std::numeric_limits<T>::min()) << where << " key " << j;
          magnitude += ref;
        }
        for (index_t d = 0; d < dv; ++d)
          EXPECT_LE(std::fabs(ld(o[r * dv + d]) - o_ref[r * dv + d]), 16 * eps<T> * (magnitude + std::fabs(o0[r * dv + d])))
              << where << " column " << d;
      }
    }
  }
}

TYPED_TEST(SoftmaxStateTest, LongSequentialPushKeepsAccuracy) {
  // 2^20 pushes one at a time: the compensated sum keeps l within 1e-6 (fp32) / 1e-13 (fp64).
  using T = TypeParam;
  const auto xs = normal_values<T>(std::size_t(1) << 20, 3);
  const auto s = state_of(xs);
  const RefRow ref = reference_row(xs.data(), xs.size());
  ASSERT_EQ(ld(s.max), ref.max);
  const ld rel = std::fabs(s.total() - ref.l) / ref.l;
  EXPECT_LE(rel, (std::is_same<T, float>::value ? 1e-6L : 1e-13L)) << "relative error of l: " << rel;
}

}  // namespace kflash_test
