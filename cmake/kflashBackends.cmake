# Which Kokkos backends kflash builds for, and the warning flags of kflash's own targets.

# Sets OUT to the enabled backends among Serial, OpenMP and Cuda, whether Kokkos came from
# find_package (kokkos_check) or from the parent project's add_subdirectory (Kokkos_ENABLE_*).
function(kflash_detect_backends out)
  set(found)
  foreach(backend Serial OpenMP Cuda)
    string(TOUPPER ${backend} upper)
    set(enabled OFF)
    if(COMMAND kokkos_check)
      kokkos_check(DEVICES ${backend} RETURN_VALUE enabled)
    elseif(Kokkos_ENABLE_${upper})
      set(enabled ON)
    endif()
    if(enabled)
      list(APPEND found ${backend})
    endif()
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# Warnings for kflash's own targets only; nothing is forced on consumers. With
# KFLASH_CUDA_DEVICE_WERROR (the CUDA lane of CI), nvcc's device-code diagnostics become errors:
# a __host__ function called from __host__ __device__ code (cudafe 20011) and an implicit capture
# of 'this' in an extended lambda (20178).
option(KFLASH_CUDA_DEVICE_WERROR "Make nvcc device-code diagnostics errors for kflash's targets" OFF)
option(KFLASH_WERROR "Make warnings errors for kflash's own targets (CI lanes)" OFF)
function(kflash_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra $<$<BOOL:${KFLASH_WERROR}>:-Werror>)
  endif()
  if(KFLASH_CUDA_DEVICE_WERROR)
    target_compile_options(${target} PRIVATE "SHELL:-Xcudafe --diag_error=20011"
                           "SHELL:-Xcudafe --diag_error=20178" --Wext-lambda-captures-this)
  endif()
endfunction()

# add_test that, in a build whose Kokkos has Cuda, first checks for a GPU: Kokkos cannot initialize
# without one, so there the test is reported as skipped (not passed, not silently left out). The
# test runs with 2 OpenMP threads unless kflash_test_threads says otherwise.
function(kflash_add_test name)
  if(KFLASH_HAS_CUDA)
    add_test(NAME ${name} COMMAND ${PROJECT_SOURCE_DIR}/tests/run-if-gpu.sh ${ARGN})
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  else()
    add_test(NAME ${name} COMMAND ${ARGN})
  endif()
  kflash_test_threads(${name} 2)
endfunction()

# kflash_test_threads(test threads [VAR=value...]): the test's environment (OpenMP threads, unbound,
# and the variables given) and the processors it occupies, which `ctest -j` counts: tests of one
# thread run side by side, none oversubscribes the machine.
function(kflash_test_threads name threads)
  set(environment OMP_NUM_THREADS=${threads} OMP_PROC_BIND=false ${ARGN})
  set_tests_properties(${name} PROPERTIES PROCESSORS ${threads} ENVIRONMENT "${environment}")
endfunction()
