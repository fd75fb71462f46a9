#!/usr/bin/env bash
# Runs the CUDA lane's executables from a bundle (bash cmake/kflash-dev.sh bundle) on a machine with
# a GPU: the device, the whole test suite, then kflash-bench on the Cuda backend with the given
# arguments (default --full). Logs and results.json go to $KFLASH_GPU_OUT (default: out/ beside this
# script); KFLASH_GPU_SKIP_TESTS=1, KFLASH_GPU_SKIP_BENCH=1 and KFLASH_GPU_TEST_FILTER select parts.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${KFLASH_GPU_OUT:-$here/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
status=0
if [ "${KFLASH_GPU_SKIP_TESTS:-0}" != 1 ]; then
  timeout "${KFLASH_GPU_TEST_TIMEOUT:-300}" "$here/kflash_test_cuda" --gtest_brief=1 ${KFLASH_GPU_TEST_FILTER:+--gtest_filter=$KFLASH_GPU_TEST_FILTER} \
      >"$out/tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED)|FAILED|tests? ran" "$out/tests.log" | head -40
fi
if [ "${KFLASH_GPU_SKIP_BENCH:-0}" != 1 ]; then
  [ $# -gt 0 ] || set -- --full
  timeout "${KFLASH_GPU_BENCH_TIMEOUT:-400}" "$here/kflash-bench" --backend Cuda --out "$out/bench" "$@" >"$out/bench.log" 2>"$out/bench.err" || status=1
  sed -n '/^backend/,$p' "$out/bench.log"
  tail -3 "$out/bench.err"
fi
exit $status
