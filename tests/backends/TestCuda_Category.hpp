// Compiles the test bodies for the Cuda backend.
#pragma once
#include <Kokkos_Core.hpp>
#define TEST_EXECSPACE Kokkos::Cuda
#define TEST_CATEGORY cuda
