// kflash calls made before Kokkos::initialize and after Kokkos::finalize raise kflash's own error,
// naming the call, rather than whatever Kokkos does with an uninitialized execution space. This
// program runs its test without initializing Kokkos first, so it has its own main.
#include <kflash/kflash.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Host = Kokkos::DefaultHostExecutionSpace;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
using Matrix = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;
using Vector = Kokkos::View<double*, Kokkos::HostSpace, Unmanaged>;
using Targets = Kokkos::View<std::int64_t*, Kokkos::HostSpace, Unmanaged>;
using Tensor4 = Kokkos::View<double****, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;
using Tensor5 = Kokkos::View<double*****, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;
using Tensor3 = Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;

/// Host arrays wrapped in unmanaged Views: making them needs no initialized Kokkos.
struct Arrays {
  std::vector<double> xs = std::vector<double>(12, 0.5), ys = std::vector<double>(12), out = std::vector<double>(3);
  std::vector<std::int64_t> ts = std::vector<std::int64_t>(3, 1);
  std::vector<double> qs = std::vector<double>(8, 0.25), ks = std::vector<double>(8, 0.5), vs = std::vector<double>(8, 1),
                      os = std::vector<double>(8), parts = std::vector<double>(16, 1), lparts = std::vector<double>(4),
                      lse = std::vector<double>(2);
  Matrix x{xs.data(), 3, 4}, y{ys.data(), 3, 4};
  Vector lse_rows{out.data(), 3};
  Targets targets{ts.data(), 3};
  Tensor4 q{qs.data(), 1, 1, 2, 4}, k{ks.data(), 1, 1, 2, 4}, v{vs.data(), 1, 1, 2, 4}, o{os.data(), 1, 1, 2, 4};
  Tensor5 o_parts{parts.data(), 2, 1, 1, 2, 4};
  Tensor4 lse_parts{lparts.data(), 2, 1, 1, 2};
  Tensor3 lse_out{lse.data(), 1, 1, 2};
};

void expect_uninitialized_error(const std::function<void()>& call, const std::string& name, const char* when) {
  try {
    call();
    ADD_FAILURE() << name << " " << when << ": no exception";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kflash::" + name + ": Kokkos is not initialized"), std::string::npos)
        << name << " " << when << ": " << msg;
  }
}

void expect_every_call_refused(Arrays& a, const char* when) {
  expect_uninitialized_error([&] { kflash::softmax(a.x, a.y); }, "softmax", when);
  expect_uninitialized_error([&] { kflash::log_softmax(a.x, a.y); }, "log_softmax", when);
  expect_uninitialized_error([&] { kflash::logsumexp(a.x, a.lse_rows); }, "logsumexp", when);
  expect_uninitialized_error([&] { kflash::cross_entropy(a.x, a.targets, a.lse_rows); }, "cross_entropy", when);
  expect_uninitialized_error([&] { kflash::attention(a.q, a.k, a.v, a.o); }, "attention", when);
  expect_uninitialized_error([&] { kflash::attention(a.q, a.k, a.v, a.o, {}, a.lse_out); }, "attention", when);
  expect_uninitialized_error([&] { kflash::merge_attention(a.o_parts, a.lse_parts, a.o, a.lse_out); },
                             "merge_attention", when);
  expect_uninitialized_error([&] { kflash::SoftmaxStream<double, Host> s(a.y); }, "SoftmaxStream", when);
  expect_uninitialized_error([&] { kflash::AttentionStream<double, Host> s(a.q, 4); }, "AttentionStream", when);
}

TEST(Uninitialized, CallsBeforeInitializeAndAfterFinalizeNameThemselves) {
  Arrays a;
  ASSERT_FALSE(Kokkos::is_initialized());
  expect_every_call_refused(a, "before Kokkos::initialize");
  Kokkos::initialize();
  kflash::softmax(a.x, a.y);
  Kokkos::fence();
  EXPECT_DOUBLE_EQ(a.ys[0], 0.25);  // four equal logits
  Kokkos::finalize();
  expect_every_call_refused(a, "after Kokkos::finalize");
}

}  // namespace

int main(int argc, char* argv[]) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
