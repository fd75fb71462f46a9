// Streaming attention: a prompt's queries attend to a KV cache that is filled chunk by chunk
// (chunked prefill), with a causal mask aligned to the queries' positions. After each chunk the
// stream gives the attention over the keys so far; at the end it is checked against one
// kflash::attention call over the whole cache.
#include <kflash/kflash.hpp>

#include <Kokkos_Random.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    using Exec = Kokkos::DefaultExecutionSpace;
    using View4 = Kokkos::View<float****, Kokkos::LayoutRight, Exec::memory_space>;
    const int B = 1, Hq = 8, Hk = 2, Nq = 64, Nk = 1024, D = 64, chunk = 256;
    const Exec exec;

    View4 q("q", B, Hq, Nq, D), k("k", B, Hk, Nk, D), v("v", B, Hk, Nk, D);
    Kokkos::Random_XorShift64_Pool<Exec> pool(2026);
    Kokkos::fill_random(q, pool, -1.0f, 1.0f);
    Kokkos::fill_random(k, pool, -1.0f, 1.0f);
    Kokkos::fill_random(v, pool, -1.0f, 1.0f);

    // The queries are the cache's last Nq positions.
    kflash::AttentionOptions options;
    options.causal = true;
    kflash::AttentionStream<float, Exec> stream(exec, q, D, options, /*query_offset=*/Nk - Nq);
    View4 o("o", B, Hq, Nq, D);
    Kokkos::View<float***, Exec::memory_space> lse("lse", B, Hq, Nq);
    for (int k0 = 0; k0 < Nk; k0 += chunk) {
      const auto keys = Kokkos::make_pair(k0, k0 + chunk);
      stream.update(exec, Kokkos::subview(k, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL),
                    Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, keys, Kokkos::ALL), k0);
      stream.result(exec, o, lse);
      const auto l = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
      std::printf("after keys [0, %d): lse of the first query row %.5f, of the last %.5f\n", k0 + chunk,
                  double(l(0, 0, 0)), double(l(0, 0, Nq - 1)));
    }

    View4 ref("ref", B, Hq, Nq, D);
    kflash::attention(exec, q, k, v, ref, options);
    float err = 0;
    Kokkos::parallel_reduce(
        "compare", Kokkos::MDRangePolicy<Exec, Kokkos::Rank<4>>(exec, {0, 0, 0, 0}, {B, Hq, Nq, D}),
        KOKKOS_LAMBDA(int b, int h, int i, int d, float& e) {
          const float x = o(b, h, i, d) > ref(b, h, i, d) ? o(b, h, i, d) - ref(b, h, i, d) : ref(b, h, i, d) - o(b, h, i, d);
          if (x > e) e = x;
        },
        Kokkos::Max<float>(err));
    std::printf("streamed attention vs one call: max |difference| = %.3g\n", double(err));
    status = err <= 1e-5f ? 0 : 1;
  }
  Kokkos::finalize();
  return status;
}
