#!/usr/bin/env bash
# kflash developer driver: installs what a fresh Debian 12 machine lacks, finds or builds Kokkos,
# configures and builds kflash, then runs the main job or the tests.
#
#   bash cmake/kflash-dev.sh main [args]   build, then run the main job (kflash-demo) with [args]
#   bash cmake/kflash-dev.sh test [args]   build, then run every test (ctest [args])
#   bash cmake/kflash-dev.sh deps          only set up the dependencies
#   bash cmake/kflash-dev.sh build         only set up and build
#
# Environment:
#   Kokkos_ROOT        an installed Kokkos (user's, Spack's) to use; it must have the OpenMP backend
#   KFLASH_CACHE_DIR   where Kokkos 3.4.01 is built when no suitable Kokkos is found
#                      (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kflash)
#   KFLASH_BUILD_DIR   the build directory (default: build/ in the source tree)
#   KFLASH_JOBS        parallel build jobs (default: nproc)
set -euo pipefail

src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_dir=${KFLASH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kflash}
build_dir=${KFLASH_BUILD_DIR:-$src_dir/build}
jobs=${KFLASH_JOBS:-$(nproc)}
# Bump the suffix whenever the recipe below changes, so stale caches are rebuilt.
kokkos_tag=kokkos-3.4.01-serial-openmp-r1
kokkos_prefix=$cache_dir/$kokkos_tag

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

base_packages=(build-essential cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev
               ca-certificates xz-utils)

# --- 2. Kokkos ----------------------------------------------------------------------------------
# Asks CMake's find_package whether a Kokkos with the OpenMP backend is visible from the given root
# (empty: the default search path). Prints the Kokkos version on success.
probe_kokkos() {
  local root=$1 probe
  probe=$(mktemp -d)
  if cmake -S "$src_dir/cmake/probe-kokkos" -B "$probe" ${root:+-DKokkos_ROOT="$root"} \
       >"$probe/log" 2>&1; then
    sed -n 's/.*KFLASH_PROBE_KOKKOS_VERSION=//p' "$probe/log"
  fi
  rm -rf "$probe"
}

build_cached_kokkos() {
  local work=$cache_dir/work list_dir src
  say "no Kokkos with OpenMP found: building Kokkos 3.4.01 and Kokkos Kernels 3.4.01"
  say "  source: Debian 12 'trilinos' source package (about 166 MB), installed into $kokkos_prefix"
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/download"
  # A private source list: the system's apt configuration is left untouched.
  echo "deb-src http://deb.debian.org/debian bookworm main" >"$work/sources.list"
  local apt_opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
                  -o Dir::State::Lists="$work/lists" -o APT::Sandbox::User=root)
  say "  downloading the trilinos source package"
  quietly "$work/download.log" apt-get "${apt_opts[@]}" update
  (cd "$work/download" && quietly "$work/download.log" apt-get "${apt_opts[@]}" source --download-only trilinos)
  say "  extracting packages/kokkos and packages/kokkos-kernels"
  tar -xzf "$work"/download/trilinos_*.orig.tar.gz -C "$work" \
      --wildcards '*/packages/kokkos/*' '*/packages/kokkos-kernels/*'
  src=$(echo "$work"/Trilinos-*/packages)
  say "  building Kokkos (Serial + OpenMP)"
  local log=$work/build.log
  quietly "$log" cmake -S "$src/kokkos" -B "$work/build-kokkos" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_STANDARD=17 -DCMAKE_INSTALL_PREFIX="$kokkos_prefix" \
        -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON -DCMAKE_POSITION_INDEPENDENT_CODE=ON
  quietly "$log" cmake --build "$work/build-kokkos" -j "$jobs"
  quietly "$log" cmake --install "$work/build-kokkos"
  say "  building Kokkos Kernels (default ETI off)"
  quietly "$log" cmake -S "$src/kokkos-kernels" -B "$work/build-kernels" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$kokkos_prefix" -DKokkos_ROOT="$kokkos_prefix" \
        -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DKokkosKernels_ENABLE_TESTS=OFF
  quietly "$log" cmake --build "$work/build-kernels" -j "$jobs"
  quietly "$log" cmake --install "$work/build-kernels"
  rm -rf "$work"
  say "  Kokkos installed in $kokkos_prefix"
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
    build_cached_kokkos
  fi
  say "using Kokkos 3.4.01 from the cache $kokkos_prefix"
  kokkos_root=$kokkos_prefix
}

setup_deps() {
  need_packages "${base_packages[@]}"
  setup_kokkos
}

# --- 3. Build -----------------------------------------------------------------------------------
build() {
  setup_deps
  say "configuring and building in $build_dir"
  cmake -S "$src_dir" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        ${kokkos_root:+-DKokkos_ROOT="$kokkos_root"} ${kokkos_root:+-DKokkosKernels_ROOT="$kokkos_root"} \
        -DKFLASH_ENABLE_TESTS=ON -DKFLASH_ENABLE_PERF=ON >/dev/null
  cmake --build "$build_dir" -j "$jobs"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  deps)  setup_deps ;;
  build) build ;;
  main)  build; "$build_dir/perf/kflash-demo" "$@" ;;
  test)  build; ctest --test-dir "$build_dir" --output-on-failure "$@" ;;
  *)     die "usage: bash cmake/kflash-dev.sh {main|test|deps|build} [args]" ;;
esac
