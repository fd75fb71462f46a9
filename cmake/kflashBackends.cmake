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

# Warnings for kflash's own targets only; nothing is forced on consumers.
function(kflash_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra)
  endif()
endfunction()
