#include <Kokkos_Core.hpp>
#include <kflash/kflash.hpp>

#include <gtest/gtest.h>

#include <iostream>

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  int result = 0;
  {
    ::testing::InitGoogleTest(&argc, argv);
    kflash::print_configuration(std::cout);
    std::cout << "default execution space: " << Kokkos::DefaultExecutionSpace::name()
              << ", concurrency " << Kokkos::DefaultExecutionSpace().concurrency() << "\n";
    result = RUN_ALL_TESTS();
  }
  Kokkos::finalize();
  return result;
}
