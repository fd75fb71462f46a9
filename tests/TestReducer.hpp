// kflash::OnlineSoftmax used as a user would: in Kokkos::parallel_reduce at every policy level.
#pragma once

#include <TestCommon.hpp>

namespace kflash_test {

template <class T>
using DevMatrix = Kokkos::View<T**, Kokkos::LayoutRight, TEST_EXECSPACE::memory_space>;
template <class T>
using DevStates = Kokkos::View<kflash::SoftmaxState<T>*, TEST_EXECSPACE::memory_space>;

/// Checks each row's state against the long-double reference: max exact, l to `rel` relative.
template <class T>
void expect_states_match(const std::vector<T>& host, std::size_t rows, std::size_t cols,
                         const DevStates<T>& states, ld rel, const char* how) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), states);
  for (std::size_t r = 0; r < rows; ++r) {
    const RefRow ref = reference_row(host.data() + r * cols, cols);
    ASSERT_EQ(ld(h(r).max), ref.max) << how << " row " << r;
    ASSERT_LE(std::fabs(h(r).total() - ref.l) / ref.l, rel) << how << " row " << r;
  }
}

/// Rows with a few -inf (masked) entries.
template <class T>
std::vector<T> masked_rows(std::size_t rows, std::size_t cols, unsigned seed) {
  auto v = normal_values<T>(rows * cols, seed, 3.0);
  for (std::size_t i = 0; i < v.size(); i += 7) v[i] = -inf<T>;
  return v;
}

template <class T>
void reduce_range_policy(std::size_t n, ld rel) {
  const auto host = normal_values<T>(n, 11);
  auto x = make_vector<T, TEST_EXECSPACE>(host);
  const RefRow ref = reference_row(host.data(), n);
  // Into a host value...
  kflash::SoftmaxState<T> s;
  Kokkos::parallel_reduce(
      "reduce", Kokkos::RangePolicy<TEST_EXECSPACE>(0, n),
      KOKKOS_LAMBDA(int i, kflash::SoftmaxState<T>& acc) { acc.push(x(i)); }, kflash::OnlineSoftmax<T>(s));
  EXPECT_EQ(ld(s.max), ref.max);
  EXPECT_LE(std::fabs(s.total() - ref.l) / ref.l, rel) << "RangePolicy, host result";
  // ...and into a result View in the execution space's memory.
  Kokkos::View<kflash::SoftmaxState<T>, TEST_EXECSPACE::memory_space> result("result");
  Kokkos::parallel_reduce(
      "reduce", Kokkos::RangePolicy<TEST_EXECSPACE>(0, n),
      KOKKOS_LAMBDA(int i, kflash::SoftmaxState<T>& acc) { acc.push(x(i)); },
      kflash::OnlineSoftmax<T, TEST_EXECSPACE::memory_space>(result));
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), result);
  EXPECT_EQ(ld(h().max), ref.max);
  EXPECT_LE(std::fabs(h().total() - ref.l) / ref.l, rel) << "RangePolicy, result View";
}

template <class T>
void reduce_mdrange_policy() {
  const std::size_t rows = 45, cols = 301;
  const auto host = masked_rows<T>(rows, cols, 12);
  auto x = make_matrix<T, Kokkos::LayoutRight, TEST_EXECSPACE>(rows, cols, host);
  kflash::SoftmaxState<T> s;
  Kokkos::parallel_reduce(
      Kokkos::MDRangePolicy<TEST_EXECSPACE, Kokkos::Rank<2>>({0, 0}, {int(rows), int(cols)}),
      KOKKOS_LAMBDA(int r, int c, kflash::SoftmaxState<T>& acc) { acc.push(x(r, c)); },
      kflash::OnlineSoftmax<T>(s));
  const RefRow ref = reference_row(host.data(), host.size());
  EXPECT_EQ(ld(s.max), ref.max);
  EXPECT_LE(std::fabs(s.total() - ref.l) / ref.l, 8 * eps<T>);
}

enum class Nested { team_thread, thread_vector, team_vector };

template <class T>
void reduce_nested(Nested level) {
  const std::size_t rows = 37, cols = 1001;
  const auto host = masked_rows<T>(rows, cols, 13);
  auto x = make_matrix<T, Kokkos::LayoutRight, TEST_EXECSPACE>(rows, cols, host);
  DevStates<T> states("states", rows);
  using policy = Kokkos::TeamPolicy<TEST_EXECSPACE>;
  using member = policy::member_type;
  const int n = static_cast<int>(cols);
  if (level == Nested::thread_vector) {
    // One row per team thread, the row's elements over the thread's vector lanes.
    const int rows_per_team = 4;
    const int league = (static_cast<int>(rows) + rows_per_team - 1) / rows_per_team;
    Kokkos::parallel_for(
        policy(league, Kokkos::AUTO, policy::vector_length_max() > 8 ? 8 : policy::vector_length_max()),
        KOKKOS_LAMBDA(const member& team) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows_per_team), [&](int k) {
            const int r = team.league_rank() * rows_per_team + k;
            if (r >= x.extent_int(0)) return;
            kflash::SoftmaxState<T> s;
            Kokkos::parallel_reduce(
                Kokkos::ThreadVectorRange(team, n),
                [&](int c, kflash::SoftmaxState<T>& acc) { acc.push(x(r, c)); },
                kflash::OnlineSoftmax<T>(s));
            Kokkos::single(Kokkos::PerThread(team), [&]() { states(r) = s; });
          });
        });
  } else {
    Kokkos::parallel_for(
        policy(static_cast<int>(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const member& team) {
          const int r = team.league_rank();
          kflash::SoftmaxState<T> s;
          auto body = [&](int c, kflash::SoftmaxState<T>& acc) { acc.push(x(r, c)); };
          if (level == Nested::team_thread) {
            Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, n), body, kflash::OnlineSoftmax<T>(s));
          } else {
            Kokkos::parallel_reduce(Kokkos::TeamVectorRange(team, n), body, kflash::OnlineSoftmax<T>(s));
          }
          Kokkos::single(Kokkos::PerTeam(team), [&]() { states(r) = s; });
        });
  }
  expect_states_match(host, rows, cols, states, 8 * eps<T>,
                      level == Nested::team_thread     ? "TeamThreadRange"
                      : level == Nested::thread_vector ? "ThreadVectorRange"
                                                       : "TeamVectorRange");
}

template <class T>
struct ReducerTest : ::testing::Test {};
TYPED_TEST_SUITE(ReducerTest, Scalars);

TYPED_TEST(ReducerTest, RangePolicyShort) { reduce_range_policy<TypeParam>(1000, 8 * eps<TypeParam>); }
TYPED_TEST(ReducerTest, RangePolicy2Pow20Accuracy) {
  // Accuracy of a sequential run: 2^20 normal values pushed one by one, l within 1e-6 (fp32).
  reduce_range_policy<TypeParam>(std::size_t(1) << 20,
                                 std::is_same<TypeParam, float>::value ? 1e-6L : 1e-13L);
}
TYPED_TEST(ReducerTest, MDRangePolicy) { reduce_mdrange_policy<TypeParam>(); }
TYPED_TEST(ReducerTest, TeamThreadRange) { reduce_nested<TypeParam>(Nested::team_thread); }
TYPED_TEST(ReducerTest, ThreadVectorRange) { reduce_nested<TypeParam>(Nested::thread_vector); }
TYPED_TEST(ReducerTest, TeamVectorRange) { reduce_nested<TypeParam>(Nested::team_vector); }

}  // namespace kflash_test
