// Calls from several host threads at once (std::thread, each with its own Views; the cached
// workspace shared between them): every result bit-identical to the same call made on one thread,
// one call after another. The C interface from threads, each keeping its own last error. Built
// with ThreadSanitizer by the 'threads' lane of cmake/kflash-dev.sh.
//
// Kokkos 4.4 and later run kernels launched from any host thread; before, OpenMP runs them only
// from the thread that initialised it, and kflash refuses the other threads' calls with a message
// (tested here too).
#include <Kokkos_Core.hpp>
#include <kflash/kflash.h>
#include <kflash/kflash.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int thread_count = 4;
constexpr int repeats = 3;

/// Deterministic values in [-range, range) for the thread `seed`.
template <class T>
std::vector<T> values(std::size_t n, std::uint64_t seed, double range) {
  std::vector<T> v(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = T(range * (double(s >> 11) / double(1ull << 53) * 2 - 1));
  }
  return v;
}

template <class View, class... Extents>
View filled(const char* label, std::uint64_t seed, double range, Extents... extents) {
  View v{std::string(label), std::size_t(extents)...};
  auto h = Kokkos::create_mirror_view(v);
  const auto src = values<typename View::value_type>(v.size(), seed, range);
  std::memcpy(h.data(), src.data(), src.size() * sizeof(src[0]));
  Kokkos::deep_copy(v, h);
  return v;
}

/// The bytes of a View's elements (contiguous Views only).
template <class View>
std::vector<unsigned char> bytes(const View& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  const auto* p = reinterpret_cast<const unsigned char*>(h.data());
  return std::vector<unsigned char>(p, p + h.span() * sizeof(typename View::value_type));
}

/// One thread's calls of every entry point that launches kernels, on its own inputs (drawn from
/// `seed`); the outputs' bytes, in a fixed order. Shapes take the paths that use the shared
/// workspace: long rows split over teams, split_kv attention, streams.
template <class Exec>
std::vector<std::vector<unsigned char>> calls(const Exec& exec, std::uint64_t seed) {
  // Views of Exec: their allocation and initialisation run on Exec too.
  using V1 = Kokkos::View<float*, Exec>;
  using V2 = Kokkos::View<float**, Exec>;
  using V3 = Kokkos::View<float***, Exec>;
  using V4 = Kokkos::View<float****, Exec>;
  std::vector<std::vector<unsigned char>> out;

  const auto long_rows = filled<V2>("long rows", seed, 30, 2, 200003);
  V2 p("p", 2, 200003);
  V1 lse("lse", 2);
  kflash::softmax(exec, long_rows, p);
  kflash::logsumexp(exec, long_rows, lse);
  const auto rows = filled<Kokkos::View<double**, Exec>>("rows", seed + 1, 10, 33, 1031);
  kflash::log_softmax(exec, rows, rows);  // in place
  exec.fence();
  out.push_back(bytes(p)), out.push_back(bytes(lse)), out.push_back(bytes(rows));

  const auto q = filled<V4>("q", seed + 2, 1, 1, 4, 67, 64);
  const auto k = filled<V4>("k", seed + 3, 1, 1, 2, 301, 64);
  const auto v = filled<V4>("v", seed + 4, 1, 1, 2, 301, 32);
  V4 o("o", 1, 4, 67, 32);
  V3 o_lse("o lse", 1, 4, 67);
  kflash::AttentionOptions causal;
  causal.causal = true;
  kflash::attention(exec, q, k, v, o, causal, o_lse);
  exec.fence();
  out.push_back(bytes(o)), out.push_back(bytes(o_lse));

  const auto q1 = filled<V4>("q decode", seed + 5, 1, 1, 4, 1, 64);
  const auto k1 = filled<V4>("k decode", seed + 6, 1, 1, 2, 5003, 64);
  const auto v1 = filled<V4>("v decode", seed + 7, 1, 1, 2, 5003, 64);
  V4 o1("o decode", 1, 4, 1, 64);
  kflash::AttentionOptions split;
  split.schedule = kflash::AttentionSchedule::split_kv;
  split.num_splits = 7;
  kflash::attention(exec, q1, k1, v1, o1, split);

  const auto o_parts = filled<Kokkos::View<float*****, Exec>>("o parts", seed + 8, 1, 3, 1, 2, 5, 16);
  const auto lse_parts = filled<V4>("lse parts", seed + 9, 5, 3, 1, 2, 5);
  V4 merged("merged", 1, 2, 5, 16);
  V3 merged_lse("merged lse", 1, 2, 5);
  kflash::merge_attention(exec, o_parts, lse_parts, merged, merged_lse);

  const auto logits = filled<V2>("logits", seed + 10, 20, 17, 1031);
  Kokkos::View<int*, Exec> targets("targets", 17);
  Kokkos::parallel_for(Kokkos::RangePolicy<Exec>(exec, 0, 17), [=](int i) { targets(i) = (i * 61) % 1031; });
  V1 loss("loss", 17);
  Kokkos::View<float, Exec> mean("mean");
  kflash::cross_entropy(exec, logits, targets, loss, mean);
  exec.fence();
  out.push_back(bytes(o1)), out.push_back(bytes(merged)), out.push_back(bytes(merged_lse));
  out.push_back(bytes(loss)), out.push_back(bytes(mean));

  V2 streamed("streamed", 3, 1500);
  const auto tiles = filled<V2>("tiles", seed + 11, 8, 3, 1500);
  {
    kflash::SoftmaxStream<float, Exec> s(exec, streamed);
    s.update(exec, Kokkos::subview(tiles, Kokkos::ALL, Kokkos::make_pair(700, 1500)), 700);
    s.update(exec, Kokkos::subview(tiles, Kokkos::ALL, Kokkos::make_pair(0, 700)), 0);
    s.finalize(exec, streamed, kflash::Normalize::prob);
    kflash::AttentionStream<float, Exec> a(exec, q, 32);
    a.update(exec, Kokkos::subview(k, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(0, 150), Kokkos::ALL),
             Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(0, 150), Kokkos::ALL), 0);
    a.update(exec, Kokkos::subview(k, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(150, 301), Kokkos::ALL),
             Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, Kokkos::make_pair(150, 301), Kokkos::ALL), 150);
    a.result(exec, o, o_lse);
    exec.fence();
  }
  out.push_back(bytes(streamed)), out.push_back(bytes(o)), out.push_back(bytes(o_lse));
  return out;
}

/// Runs f(t) on thread_count threads at once; what each throws, as a message ("" if nothing).
std::vector<std::string> on_threads(const std::function<void(int)>& f) {
  std::vector<std::string> errors(thread_count);
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t)
    threads.emplace_back([&, t] {
      try {
        f(t);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  return errors;
}

/// Whether kflash accepts calls on Exec from threads other than the one that initialised Kokkos.
template <class Exec>
bool other_threads_launch() {
  bool ok = false;
  std::thread([&] { ok = kflash::impl::launches_from_this_thread<Exec>(); }).join();
  return ok;
}

template <class Exec>
void expect_concurrent_calls_match_sequential() {
  const Exec exec;
  std::vector<std::vector<std::vector<unsigned char>>> sequential(thread_count);
  for (int t = 0; t < thread_count; ++t) sequential[t] = calls(exec, std::uint64_t(t));

  if (!other_threads_launch<Exec>()) {  // Views made here: Kokkos refuses to initialise them there
    const Kokkos::View<float**, Exec> x("x", 3, 100);
    const Kokkos::View<float*, Exec> lse("lse", 3);
    const auto errors = on_threads([&](int t) {
      if (t % 2) kflash::logsumexp(exec, x, lse);
      else kflash::softmax(exec, x, x);
    });
    for (int t = 0; t < thread_count; ++t)
      EXPECT_EQ(errors[t].rfind(std::string("kflash::") + (t % 2 ? "logsumexp" : "softmax") +
                                    ": this host thread cannot launch " + Exec::name() + " kernels",
                                0),
                0u)
          << errors[t];
    return;
  }
  for (int r = 0; r < repeats; ++r) {
    std::vector<std::vector<std::vector<unsigned char>>> concurrent(thread_count);
    const auto errors = on_threads([&](int t) { concurrent[t] = calls(exec, std::uint64_t(t)); });
    for (int t = 0; t < thread_count; ++t) {
      ASSERT_EQ(errors[t], "") << "thread " << t;
      ASSERT_EQ(concurrent[t].size(), sequential[t].size());
      for (std::size_t i = 0; i < sequential[t].size(); ++i)
        EXPECT_TRUE(concurrent[t][i] == sequential[t][i]) << "repeat " << r << ", thread " << t << ", output " << i;
    }
  }
}

TEST(threads, default_host_space_calls_match_sequential) {
  expect_concurrent_calls_match_sequential<Kokkos::DefaultHostExecutionSpace>();
}

#if defined(KOKKOS_ENABLE_SERIAL)
TEST(threads, serial_calls_match_sequential) { expect_concurrent_calls_match_sequential<Kokkos::Serial>(); }
#endif

// Several threads at once through the C interface: results as on one thread, and each thread's
// kflash_last_error() its own (a bad call with the thread's own extents).
TEST(threads, c_interface) {
  constexpr std::int64_t rows = 5, cols = 70001;
  std::vector<std::vector<float>> x(thread_count), sequential(thread_count);
  for (int t = 0; t < thread_count; ++t) {
    x[t] = values<float>(std::size_t(rows * cols), std::uint64_t(t + 100), 12);
    sequential[t].resize(x[t].size());
    ASSERT_EQ(kflash_softmax_f32(KFLASH_MEMORY_HOST, rows, cols, x[t].data(), cols, sequential[t].data(), cols),
              KFLASH_SUCCESS)
        << kflash_last_error();
  }
  const bool launches = other_threads_launch<Kokkos::DefaultHostExecutionSpace>();
  std::vector<std::vector<float>> y(thread_count, std::vector<float>(std::size_t(rows * cols)));
  std::vector<int> status(thread_count), bad_status(thread_count);
  std::vector<std::string> message(thread_count), bad_message(thread_count);
  on_threads([&](int t) {
    for (int r = 0; r < repeats; ++r) {
      status[t] = kflash_softmax_f32(KFLASH_MEMORY_HOST, rows, cols, x[t].data(), cols, y[t].data(), cols);
      message[t] = kflash_last_error();
      bad_status[t] = kflash_logsumexp_f32(KFLASH_MEMORY_HOST, -1 - t, cols, x[t].data(), cols, y[t].data());
      bad_message[t] = kflash_last_error();
    }
  });
  for (int t = 0; t < thread_count; ++t) {
    if (launches) {
      EXPECT_EQ(status[t], KFLASH_SUCCESS) << message[t];
      EXPECT_TRUE(y[t] == sequential[t]) << "thread " << t;
    } else {
      EXPECT_EQ(status[t], KFLASH_ERROR_UNSUPPORTED);
      EXPECT_EQ(message[t].rfind("kflash_softmax_f32: this host thread cannot launch", 0), 0u) << message[t];
    }
    EXPECT_EQ(bad_status[t], KFLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(bad_message[t], "kflash_logsumexp_f32: negative extents (rows = " + std::to_string(-1 - t) +
                                  ", cols = " + std::to_string(cols) + ")");
  }
}

}  // namespace
