#!/usr/bin/env bash
# kflash developer driver: installs what a fresh Debian 12 machine lacks, finds or builds Kokkos,
# configures and builds kflash, then runs the main job or the tests.
#
#   bash cmake/kflash-dev.sh main [args]   build, then run the main job: kflash-bench [args] --out build/bench
#   bash cmake/kflash-dev.sh test [args]   build, then run every test (ctest [args])
#   bash cmake/kflash-dev.sh cuda [args]   CUDA lane: build everything for Kokkos::Cuda in build-cuda/
#                                          (test bodies for Cuda only: the host build tests the others),
#                                          then ctest [args] (CUDA tests are skipped without a GPU), then
#                                          the static gates of the device schedules (tests/cuda/);
#                                          against Kokkos 4.6.01 (built once into the cache from
#                                          ../shared/deps/) where its tarball is there, else 3.4.01
#   bash cmake/kflash-dev.sh cuda-gates    CI's CUDA lane: only the library (every device kernel) and
#                                          the footprints built for Kokkos::Cuda, then the static gates
#                                          (the test bodies cannot run without a GPU)
#   bash cmake/kflash-dev.sh bundle        CUDA lane's test and benchmark executables with the shared
#                                          libraries they need beyond the C and C++ runtimes, in
#                                          <CUDA build dir>/bundle/, to run on a machine that has a GPU
#                                          (bundle/run-gpu-checks.sh [kflash-bench args]: the tests,
#                                          the bench, PyTorch's peers, ncu and compute-sanitizer)
#   bash cmake/kflash-dev.sh sanitize [calls]  the Serial and OpenMP tests, the C tests and the fuzzer
#                                          built with AddressSanitizer + UndefinedBehaviorSanitizer
#                                          (GCC) in build-sanitize/, run by ctest; against Kokkos 4.6.01
#                                          (built once into the cache from ../shared/deps/) where its
#                                          tarball is there, else against the set-up's Kokkos;
#                                          'calls' (CI's lane): the C tests and the fuzzer only
#   bash cmake/kflash-dev.sh threads       the threads test (several host threads calling at once) built
#                                          with ThreadSanitizer (GCC) in build-threads/, run by ctest
#   bash cmake/kflash-dev.sh fuzz-c        the libFuzzer harness of the C interface (clang, with ASan +
#                                          UBSan) in build-fuzz-c/, run by ctest for a time budget
#   bash cmake/kflash-dev.sh kokkos46      the same tests, optimised, against Kokkos 4.6.01 (skipped,
#                                          with a message, where that tarball is absent)
#   bash cmake/kflash-dev.sh deps          only set up the dependencies
#   bash cmake/kflash-dev.sh build         only set up and build
#
# Environment:
#   Kokkos_ROOT        an installed Kokkos (user's, Spack's) to use; it must have the OpenMP backend
#                      (for 'cuda': the Cuda backend, compiled with $Kokkos_ROOT/bin/nvcc_wrapper)
#   KFLASH_CACHE_DIR   where Kokkos 3.4.01 is built when no suitable Kokkos is found
#                      (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kflash)
#   KFLASH_BUILD_DIR   the build directory (default: build/ in the source tree)
#   KFLASH_JOBS        parallel build jobs, and processors ctest fills (default: nproc); each test tells
#                      ctest how many threads it runs (kflash_test_threads in cmake/kflashBackends.cmake)
#   KFLASH_WERROR      ON: warnings of kflash's own targets are errors in 'main', 'test' and 'build'
#                      (CI sets it; the other lanes always have it, the CUDA lane for device code);
#                      unset, the build directory keeps what it was configured with
#   KFLASH_CUDA_ARCH   the CUDA lane's GPU: ampere80 (default; build-cuda/) or hopper90 (H100, H200;
#                      build-cuda-hopper90/)
set -euo pipefail

src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_dir=${KFLASH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kflash}
build_dir=${KFLASH_BUILD_DIR:-$src_dir/build}
jobs=${KFLASH_JOBS:-$(nproc)}
# Bump the suffix whenever the recipe below changes, so stale caches are rebuilt.
kokkos_tag=kokkos-3.4.01-serial-openmp-r1
kokkos_prefix=$cache_dir/$kokkos_tag
kokkos_src=$cache_dir/kokkos-3.4.01-src
# The CUDA lane's GPU architecture: ampere80 (compute_80 code, CI's default) or hopper90 (sm_90, for
# running on an H100/H200: Kokkos 3.4 refuses to start when the compiled major compute capability
# differs from the device's, so PTX for 8.0 cannot run on a 9.0 device through it).
cuda_arch=${KFLASH_CUDA_ARCH:-ampere80}
case "$cuda_arch" in
  ampere80) cuda_build_default=$src_dir/build-cuda ;;
  hopper90) cuda_build_default=$src_dir/build-cuda-hopper90 ;;
  *) printf '[kflash-dev] error: KFLASH_CUDA_ARCH must be ampere80 or hopper90\n' >&2; exit 1 ;;
esac
cuda_prefix=$cache_dir/kokkos-3.4.01-cuda-$cuda_arch-r1
cuda_build_dir=${KFLASH_CUDA_BUILD_DIR:-$cuda_build_default}

say() { printf '[kflash-dev] %s\n' "$*"; }
die() { printf '[kflash-dev] error: %s\n' "$*" >&2; exit 1; }
# Runs a step with its output in a log file; on failure shows the end of the log.
quietly() {
  local log=$1; shift
  "$@" >>"$log" 2>&1 || { tail -n 40 "$log" >&2; die "step failed: $* (full log: $log)"; }
}

# --- 1. Debian packages -------------------------------------------------------------------------
need_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages: ${missing[*]} (install them as root)"
  say "installing Debian packages: ${missing[*]}"
  if [ -z "${KFLASH_APT_UPDATED:-}" ]; then
    apt-get update -qq
    export KFLASH_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# OpenMPI (libopenmpi-dev, openmpi-bin): the kflash::mpi component, its tests and kflash-mpi-bench.
# gfortran: the Fortran module kflash and its tests. libdnnl-dev: oneDNN, a softmax peer in kflash-bench.
base_packages=(build-essential cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev
               libopenblas-dev nlohmann-json3-dev python3-matplotlib ca-certificates xz-utils
               libopenmpi-dev openmpi-bin gfortran libdnnl-dev)

# --- 2. Kokkos ----------------------------------------------------------------------------------
# Asks CMake's find_package whether a Kokkos with the OpenMP backend is visible from the given root
# (empty: the default search path). Prints the Kokkos version on success.
probe_kokkos() {
  local root=$1 device=${2:-OpenMP} probe
  local cxx=()
  [ "$device" = Cuda ] && cxx=(-DCMAKE_CXX_COMPILER="$root/bin/nvcc_wrapper")
  probe=$(mktemp -d)
  if cmake -S "$src_dir/cmake/probe-kokkos" -B "$probe" ${root:+-DKokkos_ROOT="$root"} \
       -DKFLASH_PROBE_DEVICE="$device" "${cxx[@]}" >"$probe/log" 2>&1; then
    sed -n 's/.*KFLASH_PROBE_KOKKOS_VERSION=//p' "$probe/log"
  fi
  rm -rf "$probe"
}

# Downloads Debian 12's trilinos source package once and keeps Kokkos and Kokkos Kernels from it.
fetch_kokkos_source() {
  [ -f "$kokkos_src/kokkos/CMakeLists.txt" ] && return 0
  local work=$cache_dir/download
  say "  downloading Debian 12's 'trilinos' source package (about 166 MB) for Kokkos 3.4.01"
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/files"
  # A private source list: the system's apt configuration is left untouched.
  echo "deb-src http://deb.debian.org/debian bookworm main" >"$work/sources.list"
  local apt_opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
                  -o Dir::State::Lists="$work/lists" -o APT::Sandbox::User=root)
  quietly "$work/log" apt-get "${apt_opts[@]}" update
  (cd "$work/files" && quietly "$work/log" apt-get "${apt_opts[@]}" source --download-only trilinos)
  say "  extracting packages/kokkos and packages/kokkos-kernels into $kokkos_src"
  tar -xzf "$work"/files/trilinos_*.orig.tar.gz -C "$work" \
      --wildcards '*/packages/kokkos/*' '*/packages/kokkos-kernels/*'
  rm -rf "$kokkos_src" && mkdir -p "$kokkos_src"
  mv "$work"/Trilinos-*/packages/kokkos "$work"/Trilinos-*/packages/kokkos-kernels "$kokkos_src"/
  rm -rf "$work"
}

# build_kokkos PREFIX [cmake options...]: Kokkos 3.4.01 (from $kokkos_build_src, default the
# unpacked source) and Kokkos Kernels (default ETI off).
build_kokkos() {
  local prefix=$1; shift
  fetch_kokkos_source
  local ksrc=${kokkos_build_src:-$kokkos_src/kokkos}
  local work=$cache_dir/build-$(basename "$prefix") log
  rm -rf "$work" && mkdir -p "$work"
  log=$work/build.log
  say "  building Kokkos into $prefix (log: $log)"
  quietly "$log" cmake -S "$ksrc" -B "$work/kokkos" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_STANDARD=17 -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON "$@"
  quietly "$log" cmake --build "$work/kokkos" -j "$jobs"
  quietly "$log" cmake --install "$work/kokkos"
  say "  building Kokkos Kernels (default ETI off)"
  quietly "$log" cmake -S "$kokkos_src/kokkos-kernels" -B "$work/kernels" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DKokkos_ROOT="$prefix" \
        -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DKokkosKernels_ENABLE_TESTS=OFF
  quietly "$log" cmake --build "$work/kernels" -j "$jobs"
  quietly "$log" cmake --install "$work/kernels"
  rm -rf "$work"
  say "  Kokkos installed in $prefix"
}

# Sets kokkos_root to the Kokkos to build against.
setup_kokkos() {
  local version
  if [ -n "${Kokkos_ROOT:-}" ]; then
    version=$(probe_kokkos "$Kokkos_ROOT")
    [ -n "$version" ] || die "Kokkos_ROOT=$Kokkos_ROOT has no usable Kokkos with the OpenMP backend"
    say "using Kokkos $version from Kokkos_ROOT=$Kokkos_ROOT"
    kokkos_root=$Kokkos_ROOT
    return
  fi
  version=$(probe_kokkos "")
  if [ -n "$version" ]; then
    say "using Kokkos $version found by CMake's default search"
    kokkos_root=""
    return
  fi
  if [ -z "$(probe_kokkos "$kokkos_prefix")" ]; then
    say "no Kokkos with OpenMP found: building Kokkos 3.4.01 (Serial + OpenMP) from Debian's sources"
    build_kokkos "$kokkos_prefix" -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON
  fi
  say "using Kokkos 3.4.01 from the cache $kokkos_prefix"
  kokkos_root=$kokkos_prefix
}

setup_deps() {
  need_packages "${base_packages[@]}"
  setup_kokkos
}

# --- 3. CUDA: Debian's CUDA 11.8 toolkit (non-free) with g++-11, and a CUDA-enabled Kokkos ----------
# /usr/local/cuda (13.0 on some machines) is not used: no available Kokkos builds with it.
setup_cuda_toolkit() {
  if [ -x /usr/bin/nvcc ] && /usr/bin/nvcc --version | grep -q "release 11.8" && command -v g++-11 >/dev/null; then
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "the CUDA lane needs Debian's nvidia-cuda-toolkit and g++-11 (install them as root)"
  local work=$cache_dir/cuda-apt
  say "installing Debian's nvidia-cuda-toolkit 11.8 (non-free, about 2.3 GB) and g++-11"
  rm -rf "$work" && mkdir -p "$work/lists/partial"
  echo "deb http://deb.debian.org/debian bookworm main contrib non-free" >"$work/sources.list"
  local apt_opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
                  -o Dir::State::Lists="$work/lists")
  quietly "$work/log" apt-get "${apt_opts[@]}" update
  DEBIAN_FRONTEND=noninteractive quietly "$work/log" apt-get "${apt_opts[@]}" install -y -q \
      --no-install-recommends nvidia-cuda-toolkit g++-11
  rm -rf "$work"
}

# Sets cuda_kokkos_root to a Kokkos with the Cuda backend.
setup_cuda_kokkos() {
  if [ -n "${Kokkos_ROOT:-}" ]; then
    [ -n "$(probe_kokkos "$Kokkos_ROOT" Cuda)" ] || die "Kokkos_ROOT=$Kokkos_ROOT has no Cuda backend"
    say "using the CUDA-enabled Kokkos from Kokkos_ROOT=$Kokkos_ROOT"
    cuda_kokkos_root=$Kokkos_ROOT
    return
  fi
  setup_cuda_toolkit
  if [ -f "$kokkos46_tarball" ]; then
    # Kokkos 4.6 knows sm_90 natively, and its team launch leaves no stack frame in the schedules
    # (3.4's level-1 scratch lock keeps 8 bytes in every team kernel): the gates judge kflash alone.
    local prefix=$cache_dir/kokkos-4.6.01-cuda-$cuda_arch-r1
    if [ -z "$(probe_kokkos "$prefix" Cuda)" ]; then
      local work=$cache_dir/build-kokkos-4.6.01-cuda
      rm -rf "$work" && unpack_kokkos46 "$work/src"
      local arch=AMPERE80
      [ "$cuda_arch" = hopper90 ] && arch=HOPPER90
      say "building Kokkos 4.6.01 with Cuda ($arch, CUDA 11.8, g++-11) + OpenMP + Serial into $prefix"
      install_kokkos "$work/src" "$work" "$prefix" -DCMAKE_CXX_COMPILER="$work/src/bin/nvcc_wrapper" \
          -DKokkos_ARCH_$arch=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_CUDA=ON
      rm -rf "$work"
    fi
    say "using Kokkos 4.6.01 with Cuda from the cache $prefix"
    cuda_kokkos_root=$prefix
    return
  fi
  if [ -z "$(probe_kokkos "$cuda_prefix" Cuda)" ]; then
    say "building Kokkos 3.4.01 with Cuda ($cuda_arch, CUDA 11.8, g++-11) + OpenMP + Serial"
    local arch_options=(-DCMAKE_CXX_FLAGS=-arch=sm_80 -DKokkos_ARCH_AMPERE80=ON)
    if [ "$cuda_arch" = hopper90 ]; then
      # Kokkos 3.4 predates Hopper: a copy of its source whose AMPERE86 option compiles for sm_90
      # (CUDA 11.8 knows sm_90); the Ampere tuning macros it defines suit Hopper as well.
      fetch_kokkos_source
      kokkos_build_src=$cache_dir/kokkos-3.4.01-src-hopper90
      rm -rf "$kokkos_build_src" && cp -r "$kokkos_src/kokkos" "$kokkos_build_src"
      sed -i 's/CHECK_CUDA_ARCH(AMPERE86  sm_86)/CHECK_CUDA_ARCH(AMPERE86  sm_90)/' \
          "$kokkos_build_src/cmake/kokkos_arch.cmake"
      grep -q 'CHECK_CUDA_ARCH(AMPERE86  sm_90)' "$kokkos_build_src/cmake/kokkos_arch.cmake" ||
        die "could not map Kokkos 3.4's AMPERE86 option to sm_90"
      arch_options=(-DCMAKE_CXX_FLAGS=-arch=sm_90 -DKokkos_ARCH_AMPERE86=ON)
    fi
    build_kokkos "$cuda_prefix" -DCMAKE_CXX_COMPILER="$kokkos_src/kokkos/bin/nvcc_wrapper" \
        "${arch_options[@]}" -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON \
        -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON
    kokkos_build_src=
  fi
  say "using Kokkos 3.4.01 with Cuda from the cache $cuda_prefix"
  cuda_kokkos_root=$cuda_prefix
}

build_cuda() {
  need_packages "${base_packages[@]}"
  # Debian's nvcc (11.8) and g++-11 come first, whatever else is on PATH.
  export PATH=/usr/bin:$PATH NVCC_WRAPPER_DEFAULT_COMPILER=${NVCC_WRAPPER_DEFAULT_COMPILER:-g++-11}
  setup_cuda_kokkos
  # A build directory configured against another Kokkos (and so another nvcc_wrapper) starts afresh.
  if [ -f "$cuda_build_dir/CMakeCache.txt" ] &&
     ! grep -qx "Kokkos_ROOT:[A-Z]*=$cuda_kokkos_root" "$cuda_build_dir/CMakeCache.txt"; then
    say "$cuda_build_dir was configured against another Kokkos: removing it"
    rm -rf "$cuda_build_dir"
  fi
  say "configuring and building for CUDA in $cuda_build_dir"
  cmake -S "$src_dir" -B "$cuda_build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_COMPILER="$cuda_kokkos_root/bin/nvcc_wrapper" -DKokkos_ROOT="$cuda_kokkos_root" \
        -DKokkosKernels_ROOT="$cuda_kokkos_root" -DKFLASH_CUDA_DEVICE_WERROR=ON \
        -DKFLASH_ENABLE_TESTS=ON -DKFLASH_ENABLE_PERF=ON -DKFLASH_TEST_BACKENDS=Cuda \
        -DKFLASH_BENCH_BLAS="${cuda_bench_blas:-ON}" >/dev/null
  cmake --build "$cuda_build_dir" -j "$jobs" ${1:+--target "$@"}
}

# --- 4. Build -----------------------------------------------------------------------------------
build() {
  setup_deps
  say "configuring and building in $build_dir"
  cmake -S "$src_dir" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        ${kokkos_root:+-DKokkos_ROOT="$kokkos_root"} ${kokkos_root:+-DKokkosKernels_ROOT="$kokkos_root"} \
        -DKFLASH_ENABLE_TESTS=ON -DKFLASH_ENABLE_PERF=ON ${KFLASH_WERROR:+-DKFLASH_WERROR="$KFLASH_WERROR"} >/dev/null
  cmake --build "$build_dir" -j "$jobs"
}

# --- 5. CI lanes beyond the test command ------------------------------------------------------------
# The test executables these lanes build and run: every test body on Serial and OpenMP, the C
# interface, calls outside initialize/finalize, and the fuzzer.
lane_targets=(kflash_test_serial kflash_test_openmp kflash_test_c_api kflash_test_c_attention
              kflash_test_c_kokkos_first kflash_test_uninitialized kflash_fuzz)
lane_tests='^(serial|openmp_2thread|c_api|c_attention|c_api_kokkos_first|uninitialized|fuzz)$'

# lane NAME BUILD_DIR KOKKOS_ROOT [cmake options...]: configures kflash's tests in BUILD_DIR with
# warnings as errors, builds lane_targets, runs them with ctest, and says how long it took.
lane() {
  local name=$1 dir=$2 root=$3 start=$SECONDS; shift 3
  say "$name lane: configuring and building in $dir"
  cmake -S "$src_dir" -B "$dir" -G Ninja ${root:+-DKokkos_ROOT="$root"} -DKFLASH_ENABLE_TESTS=ON \
        -DKFLASH_ENABLE_PERF=OFF -DKFLASH_ENABLE_FORTRAN=OFF -DKFLASH_ENABLE_MPI=OFF -DKFLASH_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "${lane_targets[@]}"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" -R "$lane_tests"
  say "$name lane: passed in $((SECONDS - start)) s"
}

# unpack_kokkos46 DIR: Kokkos 4.6.01's source from the tarball beside the project, checked against
# its .sha256, into DIR.
kokkos46_tarball=$src_dir/../shared/deps/kokkos-4.6.01.tar.gz
unpack_kokkos46() {
  local sum
  sum=$(cut -d' ' -f1 "$kokkos46_tarball.sha256")
  echo "$sum  $kokkos46_tarball" | sha256sum -c --quiet - || die "$kokkos46_tarball does not match its .sha256"
  mkdir -p "$1" && tar -xzf "$kokkos46_tarball" -C "$1" --strip-components=1
}

# install_kokkos SRC WORK PREFIX [cmake options...]: configures, builds and installs Kokkos from SRC
# into PREFIX, building in WORK (log: WORK/build.log).
install_kokkos() {
  local src=$1 work=$2 prefix=$3; shift 3
  quietly "$work/build.log" cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_STANDARD=17 -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        -DKokkos_ENABLE_TESTS=OFF "$@"
  quietly "$work/build.log" cmake --build "$work/build" -j "$jobs"
  quietly "$work/build.log" cmake --install "$work/build"
}

# Sets kokkos46_root to Kokkos 4.6.01 (Serial + OpenMP), built once into the cache from the tarball
# beside the project, or to nothing (with a message) where that tarball is absent.
setup_kokkos46() {
  kokkos46_root=
  if [ ! -f "$kokkos46_tarball" ]; then
    say "no $kokkos46_tarball (it is beside the project in CI only): Kokkos 4.6 not used"
    return 0
  fi
  local prefix=$cache_dir/kokkos-4.6.01-serial-openmp-r1
  if [ -z "$(probe_kokkos "$prefix")" ]; then
    local work=$cache_dir/build-kokkos-4.6.01
    rm -rf "$work" && unpack_kokkos46 "$work/src"
    say "building Kokkos 4.6.01 (Serial + OpenMP) into $prefix (log: $work/build.log)"
    install_kokkos "$work/src" "$work" "$prefix" -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON
    rm -rf "$work"
  fi
  kokkos46_root=$prefix
}

# ASan + UBSan (GCC), against Kokkos 4.6.01 where its tarball is beside the project (so that CI
# builds and runs the tests on both Kokkos versions without a third build), else against the
# set-up's Kokkos. Any finding stops the program with a report, so ctest fails. Leak checking is
# on; Kokkos itself is not instrumented. The library at -O1, the test programs at -Og, which under
# the sanitizers' instrumentation compiles a test body in 55 % of -O1's time; -g1 (line tables:
# what the reports' stack traces need) compiles them 30 % faster than -g.
# 'sanitize calls' builds and runs only the programs that reach every entry point through short
# compiles (the C tests, the uninitialized calls and the fuzzer).
sanitize() {
  if [ "${1:-all}" = calls ]; then
    lane_targets=(kflash_test_c_api kflash_test_c_attention kflash_test_c_kokkos_first kflash_test_uninitialized
                  kflash_fuzz)
    lane_tests='^(c_api|c_attention|c_api_kokkos_first|uninitialized|fuzz)$'
  fi
  setup_deps
  setup_kokkos46
  local root=${kokkos46_root:-$kokkos_root}
  # -Wno-array-bounds: with the sanitizers' instrumentation GCC 12 reports a subscript of -1 in
  # loops bounded by a View's rank (OptionView's constructor), which the uninstrumented builds do not.
  # The library at -O1 (the test programs at -Og, KFLASH_TEST_OPTIMIZATION): under the sanitizers
  # GCC 12 spent 600 s on the host kernels' file at -O2, 230-300 s at -O1.
  local flags="-O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -Wno-array-bounds"
  # The host kernels' file (src/host/isa_variants.cpp: every kernel inlined whole per instruction
  # set) without four of UBSan's checks, which there made GCC 12 spend 1100 s on that one file (the
  # lane's longest step; 400 s without them, ASan alone 320 s, UBSan alone 240 s): alignment (the
  # kernels' vector loads and stores are copies, their scalar accesses the Views' own pointers),
  # null (a null access faults, and ASan reports it), object-size (ASan's bounds subsume it) and
  # vptr (no polymorphic class there). ASan and UBSan's other checks stay on.
  # -fexpensive-optimizations: GCC contracts a * b + c into an FMA only with it, which -O1 lacks and
  # the host kernels' fp32 exp is written for (-ffp-contract=fast, CMakeLists.txt).
  # (CMakeLists.txt adds -fno-tree-pta to that file's options itself, seeing -fsanitize in the flags.)
  local kernel_options="-fno-sanitize=alignment,null,object-size,vptr -fexpensive-optimizations"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  say "sanitizer lane against Kokkos $(probe_kokkos "$root")"
  lane sanitizer "${KFLASH_SANITIZE_BUILD_DIR:-$src_dir/build-sanitize}" "$root" -DCMAKE_BUILD_TYPE=None \
       -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
       -DKFLASH_TEST_OPTIMIZATION=-Og -DKFLASH_FUZZ_SECONDS=${KFLASH_FUZZ_SECONDS:-90} \
       -DKFLASH_HOST_KERNEL_OPTIONS="$kernel_options"
}

# ThreadSanitizer (GCC) on the threads test: several host threads calling kflash at once, each
# result compared with the same call made alone. Against Kokkos 4.6.01 where its tarball is beside
# the project, else the set-up's Kokkos (before 4.4 OpenMP refuses other threads: the test then
# checks that kflash says so). OpenMP runs one thread per parallel region here: libgomp is not
# instrumented, so ThreadSanitizer would not see its barriers and would report its team's accesses
# (-Wno-tsan: GCC warns that it does not model the fences of Kokkos' host barriers, which a team of
# one thread never waits on).
threads() {
  setup_deps
  setup_kokkos46
  local root=${kokkos46_root:-$kokkos_root}
  local flags="-O1 -g -fno-omit-frame-pointer -fsanitize=thread -Wno-tsan"
  lane_targets=(kflash_test_threads)
  lane_tests='^threads$'
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
  say "ThreadSanitizer lane against Kokkos $(probe_kokkos "$root")"
  lane threads "${KFLASH_THREADS_BUILD_DIR:-$src_dir/build-threads}" "$root" -DCMAKE_BUILD_TYPE=None \
       -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
       -DKFLASH_THREADS_TEST_OMP_THREADS=1
}

# Sets clang_kokkos_root to a Serial-only Kokkos built with clang, for the libFuzzer lane (one
# compiler and one runtime in the process: Kokkos' OpenMP flags would bring libomp beside GCC's
# libgomp), from Kokkos 4.6.01's tarball where it is beside the project, else from the set-up's
# Kokkos 3.4.01 source.
setup_clang_kokkos() {
  local version=3.4.01 src work
  [ -f "$kokkos46_tarball" ] && version=4.6.01
  local prefix=$cache_dir/kokkos-$version-serial-clang-r1
  if [ -z "$(probe_kokkos "$prefix" Serial)" ]; then
    work=$cache_dir/build-kokkos-$version-clang
    rm -rf "$work" && mkdir -p "$work"
    if [ "$version" = 4.6.01 ]; then
      unpack_kokkos46 "$work/src"
      src=$work/src
    else
      fetch_kokkos_source
      src=$kokkos_src/kokkos
    fi
    say "building Kokkos $version (Serial) with clang into $prefix (log: $work/build.log)"
    install_kokkos "$src" "$work" "$prefix" -DCMAKE_CXX_COMPILER=clang++ -DKokkos_ENABLE_SERIAL=ON
    rm -rf "$work"
  fi
  clang_kokkos_root=$prefix
}

# libFuzzer (clang) over the C interface: kflash_fuzz_c with AddressSanitizer and
# UndefinedBehaviorSanitizer, for KFLASH_FUZZ_SECONDS (default 90).
fuzz_c() {
  need_packages "${base_packages[@]}" clang libclang-rt-14-dev
  setup_clang_kokkos
  local flags="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
  lane_targets=(kflash_fuzz_c)
  lane_tests='^fuzz_c$'
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  say "libFuzzer lane (clang) against Kokkos $(probe_kokkos "$clang_kokkos_root" Serial)"
  lane libFuzzer "${KFLASH_FUZZ_C_BUILD_DIR:-$src_dir/build-fuzz-c}" "$clang_kokkos_root" \
       -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DKFLASH_LIBFUZZER=ON \
       -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
       -DKFLASH_FUZZ_SECONDS=${KFLASH_FUZZ_SECONDS:-90}
}

# The same tests, optimised and unsanitized, against Kokkos 4.6.01 (skipped without its tarball).
kokkos46() {
  need_packages "${base_packages[@]}"
  setup_kokkos46
  [ -n "$kokkos46_root" ] || return 0
  lane "Kokkos 4.6.01" "${KFLASH_KOKKOS46_BUILD_DIR:-$src_dir/build-kokkos46}" "$kokkos46_root" -DCMAKE_BUILD_TYPE=Release
}

# Copies the CUDA executables and their non-system shared libraries into <CUDA build dir>/bundle/.
bundle_cuda() {
  local dir=$cuda_build_dir/bundle lib
  rm -rf "$dir" && mkdir -p "$dir/lib"
  cp "$cuda_build_dir/tests/kflash_test_cuda" "$cuda_build_dir/perf/kflash-bench" "$src_dir/tests/run-gpu-checks.sh" \
     "$src_dir/tests/cuda/torch_peers.py" "$dir/"
  # Without their symbols the two programs pack about 1.5 MB smaller: a device call carries 64 MiB
  # with the working tree, and the packed bundle is about 60 of them.
  strip "$dir/kflash_test_cuda" "$dir/kflash-bench"
  # The warp-MMA probe (perf/cuda/warp_mma_probe.cu), plain CUDA for the lane's GPU.
  nvcc -arch="sm_${cuda_arch: -2}" -O3 -std=c++17 -ccbin g++-11 "$src_dir/perf/cuda/warp_mma_probe.cu" \
       -o "$dir/warp_mma_probe"
  for lib in $(ldd "$dir/kflash_test_cuda" "$dir/kflash-bench" | awk '/=> \//{print $3}' | sort -u); do
    case $(basename "$lib") in
      # The C runtime, and the CUDA driver (the GPU machine's own must be used).
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++.so*|libgcc_s.so*|libcuda.so*) ;;
      *) cp -L "$lib" "$dir/lib/" ;;
    esac
  done
  # The test program's device code for every instantiation is large: xz takes the bundle from about
  # 240 MB to about 37 MB, under what a device call carries (64 MiB).
  say "bundle in $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: bash bundle/run-gpu-checks.sh"
  if command -v xz >/dev/null; then
    tar -C "$cuda_build_dir" -cf - bundle | xz -T"$jobs" -9 -c >"$cuda_build_dir/bundle.tar.xz"
    say "packed: $cuda_build_dir/bundle.tar.xz ($(du -sh "$cuda_build_dir/bundle.tar.xz" | cut -f1))"
  fi
}

# The static gates of the device schedules, over the CUDA build's library and footprints.
static_gates() {
  say "static gates of the device schedules (tests/cuda/static_gates.py)"
  python3 "$src_dir/tests/cuda/static_gates.py" --build "$cuda_build_dir" --cuobjdump "$(command -v cuobjdump)"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  deps)  setup_deps ;;
  sanitize) sanitize "$@" ;;
  threads) threads ;;
  fuzz-c) fuzz_c ;;
  kokkos46) kokkos46 ;;
  bundle) cuda_bench_blas=OFF build_cuda kflash_test_cuda kflash-bench
          bundle_cuda ;;
  build) build ;;
  main)  build
         "$build_dir/perf/kflash-bench" --out "$build_dir/bench" "$@" ;;
  test)  build; ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@" ;;
  cuda)  build_cuda
         ctest --test-dir "$cuda_build_dir" --output-on-failure "$@"
         static_gates
         if ! bash "$src_dir/tests/run-if-gpu.sh" true >/dev/null; then
           say "CUDA lane: every target was built for Kokkos::Cuda (kflash_test_cuda, the C, Fortran, threads"
           say "and fuzz tests, the examples, kflash-bench, kflash-demo, kflash-accuracy, the consumer projects);"
           say "the test executables were skipped: no CUDA device on this machine"
         fi ;;
  cuda-gates) build_cuda kflash kflash_device_footprints
         static_gates ;;
  *)     die "usage: bash cmake/kflash-dev.sh {main|test|cuda|cuda-gates|sanitize|threads|fuzz-c|kokkos46|bundle|deps|build} [args]" ;;
esac
