// The C interface in an application that initializes Kokkos itself: kflash_initialize and
// kflash_finalize leave its Kokkos alone, and calls work between them and after. Device memory:
// on a build with a device, softmax and attention on device arrays give the host arrays' results
// (within 1e-5: the device and host kernels round differently); without one, the status says so.
#include <kflash/kflash.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

kflash_array array(void* data, int rank, std::initializer_list<std::int64_t> extents) {
  kflash_array a;
  std::memset(&a, 0, sizeof a);
  a.data = data, a.dtype = KFLASH_FLOAT32, a.rank = rank;
  int d = 0;
  for (std::int64_t e : extents) a.extent[d++] = e;
  return a;
}

/// Softmax of 7 x 300 and causal GQA attention (1, 4, 9, 16) over (1, 2, 13, 16), once on host
/// arrays and once on copies in the default execution space's memory; returns the failures.
int device_memory() {
  const int rows = 7, cols = 300, nq = 9, nk = 13, d = 16;
  std::vector<float> x(rows * cols), q(4 * nq * d), kv(2 * nk * d);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * double(i)) * 9);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = float(std::cos(0.11 * double(i)));
  for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = float(std::sin(0.23 * double(i)));
  std::vector<float> y(x.size()), o(q.size()), lse(4 * nq);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.causal = 1;
  int failures = kflash_softmax_f32(KFLASH_MEMORY_HOST, rows, cols, x.data(), cols, y.data(), cols) != KFLASH_SUCCESS;
  kflash_array aq = array(q.data(), 4, {1, 4, nq, d}), ak = array(kv.data(), 4, {1, 2, nk, d}),
               ao = array(o.data(), 4, {1, 4, nq, d}), al = array(lse.data(), 3, {1, 4, nq});
  failures += kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &ak, &ao, &al, &opt) != KFLASH_SUCCESS;

  using Mem = Kokkos::DefaultExecutionSpace::memory_space;
  const auto to_device = [](const std::vector<float>& h) {
    Kokkos::View<float*, Mem> v("kflash::test", h.size());
    Kokkos::deep_copy(v, Kokkos::View<const float*, Kokkos::HostSpace>(h.data(), h.size()));
    return v;
  };
  const auto xd = to_device(x), qd = to_device(q), kvd = to_device(kv);
  const Kokkos::View<float*, Mem> yd("y", y.size()), od("o", o.size()), lsed("lse", lse.size());
  const kflash_status want = kflash_has_device() ? KFLASH_SUCCESS : KFLASH_ERROR_UNSUPPORTED;
  failures += kflash_softmax_f32(KFLASH_MEMORY_DEVICE, rows, cols, xd.data(), cols, yd.data(), cols) != want;
  kflash_array dq = array(qd.data(), 4, {1, 4, nq, d}), dk = array(kvd.data(), 4, {1, 2, nk, d}),
               dout = array(od.data(), 4, {1, 4, nq, d}), dl = array(lsed.data(), 3, {1, 4, nq});
  failures += kflash_attention(KFLASH_MEMORY_DEVICE, &dq, &dk, &dk, &dout, &dl, &opt) != want;
  if (!kflash_has_device()) return failures + (std::strstr(kflash_last_error(), "without a device backend") == nullptr);
  const auto near = [](const std::vector<float>& h, const Kokkos::View<float*, Mem>& v) {
    const auto back = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    int bad = 0;
    for (std::size_t i = 0; i < h.size(); ++i) bad += !(std::fabs(back(i) - h[i]) <= 1e-5f * (1 + std::fabs(h[i])));
    return bad;
  };
  return failures + near(y, yd) + near(o, od) + near(lse, lsed);
}

}  // namespace

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  int failures = 0;
  {
    const float x[3] = {0.f, 0.f, 0.f};
    float y[3] = {0.f, 0.f, 0.f};
    failures += kflash_initialize() != KFLASH_SUCCESS;
    failures += kflash_softmax_f32(KFLASH_MEMORY_HOST, 1, 3, x, 3, y, 3) != KFLASH_SUCCESS;
    failures += kflash_finalize() != KFLASH_SUCCESS;
    failures += !Kokkos::is_initialized();  // still the application's
    failures += kflash_softmax_f32(KFLASH_MEMORY_HOST, 1, 3, x, 3, y, 3) != KFLASH_SUCCESS;
    for (float v : y) failures += std::fabs(v - 1.f / 3.f) > 1e-7f;
    failures += device_memory();
    if (failures) std::fprintf(stderr, "%d failures: %s\n", failures, kflash_last_error());
  }
  Kokkos::finalize();
  return failures ? 1 : 0;
}
