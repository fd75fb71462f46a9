# Configures the add_subdirectory consumer (no build) with and without sanitizer flags, and checks that the host
# kernels' file compiles without GCC's points-to analysis exactly where GCC's flags ask for ASan or UBSan.
# cmake -DSOURCE_DIR=<kflash> -DWORK_DIR=<dir> -DKOKKOS_DIR=<dir> -DCXX_COMPILER=<c++> -DCOMPILER_ID=<id>
#       -DGENERATOR=<generator> -P host_kernel_options.cmake
foreach(variable IN ITEMS SOURCE_DIR WORK_DIR KOKKOS_DIR CXX_COMPILER COMPILER_ID GENERATOR)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "host_kernel_options.cmake: -D${variable}=... is missing")
  endif()
endforeach()

# check(<case> <expect the option: TRUE/FALSE> <cmake arguments>...)
function(check name expected)
  set(dir ${WORK_DIR}/${name})
  file(REMOVE_RECURSE ${dir})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/add_subdirectory -B ${dir} -G ${GENERATOR}
            -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DKokkos_DIR=${KOKKOS_DIR} -DKFLASH_SOURCE_DIR=${SOURCE_DIR}
            -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=TRUE -DKFLASH_ENABLE_FORTRAN=OFF ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: the configure failed (${rc}):\n${out}")
  endif()
  file(READ ${dir}/compile_commands.json commands)
  string(REGEX MATCH "\"command\": \"[^\"]*src/host/isa_variants\\.cpp\"" command "${commands}")
  if(NOT command)
    message(FATAL_ERROR "${name}: no compile command of src/host/isa_variants.cpp in ${dir}/compile_commands.json")
  endif()
  string(FIND "${command}" " -fno-tree-pta " at)
  if(at EQUAL -1)
    set(found FALSE)
  else()
    set(found TRUE)
  endif()
  if(NOT found STREQUAL expected)
    message(FATAL_ERROR "${name}: -fno-tree-pta expected ${expected}, found ${found} in\n${command}")
  endif()
  message(STATUS "${name}: -fno-tree-pta ${found}, as expected")
endfunction()

set(gnu FALSE)  # the option is GCC's; other compilers never get it
if(COMPILER_ID STREQUAL "GNU")
  set(gnu TRUE)
endif()
check(plain FALSE -DCMAKE_BUILD_TYPE=Release)
check(flags ${gnu} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=-fno-omit-frame-pointer -fsanitize=address,undefined")
check(undefined_in_debug ${gnu} -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -fsanitize=undefined")
check(debug_flags_in_release FALSE -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_DEBUG=-g -fsanitize=undefined")
check(parent_options ${gnu} -DCMAKE_BUILD_TYPE=Release -DKFLASH_CONSUMER_COMPILE_OPTIONS=-fsanitize=address)
check(thread_sanitizer FALSE -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-fsanitize=thread)
