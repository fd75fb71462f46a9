// Serial and OpenMP give the same results within rounding, whatever the OpenMP thread count.
#include <TestCommon.hpp>

namespace kflash_test {
namespace {

template <class Exec, class T>
std::vector<T> run(const std::vector<T>& host, std::size_t rows, std::size_t cols, int op) {
  auto x = make_matrix<T, Kokkos::LayoutRight, Exec>(rows, cols, host);
  if (op == 2) {
    Kokkos::View<T*, typename Exec::memory_space> out("out", rows);
    kflash::logsumexp(Exec(), x, out);
    return to_host(out);
  }
  Kokkos::View<T**, Kokkos::LayoutRight, typename Exec::memory_space> y("y", rows, cols);
  if (op == 0) kflash::softmax(Exec(), x, y);
  else kflash::log_softmax(Exec(), x, y);
  return to_host_row_major(y);
}

template <class T>
void compare(std::size_t rows, std::size_t cols) {
  const auto host = normal_values<T>(rows * cols, 77, 3.0);
  for (int op = 0; op < 3; ++op) {
    const auto a = run<Kokkos::Serial>(host, rows, cols, op);
    const auto b = run<Kokkos::OpenMP>(host, rows, cols, op);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const ld tol = 32 * eps<T> * (1 + std::fabs(ld(a[i])));
      ASSERT_LE(std::fabs(ld(a[i]) - ld(b[i])), tol)
          << "op " << op << " shape " << rows << "x" << cols << " element " << i;
    }
  }
}

template <class T>
struct CrossBackendTest : ::testing::Test {};
TYPED_TEST_SUITE(CrossBackendTest, Scalars);

TYPED_TEST(CrossBackendTest, SerialMatchesOpenMP) {
  std::cout << "OpenMP threads: " << Kokkos::OpenMP().concurrency() << "\n";
  const std::vector<std::pair<std::size_t, std::size_t>> shapes = {{1000, 64}, {7, 5000}, {1, 1 << 20}, {3, 300001}};
  for (const auto& shape : shapes) {
    compare<TypeParam>(shape.first, shape.second);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace kflash_test
