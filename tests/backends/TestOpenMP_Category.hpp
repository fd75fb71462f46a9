// Compiles the test bodies for the OpenMP backend.
#pragma once
#include <Kokkos_Core.hpp>
#define TEST_EXECSPACE Kokkos::OpenMP
#define TEST_CATEGORY openmp
