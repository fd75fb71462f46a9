// The C interface in an application that initializes Kokkos itself: kflash_initialize and
// kflash_finalize leave its Kokkos alone, and calls work between them and after.
#include <kflash/kflash.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdio>

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
    if (failures) std::fprintf(stderr, "%d failures: %s\n", failures, kflash_last_error());
  }
  Kokkos::finalize();
  return failures ? 1 : 0;
}
