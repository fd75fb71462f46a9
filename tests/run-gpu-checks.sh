#!/usr/bin/env bash
# Every GPU check in one call, from a bundle (bash cmake/kflash-dev.sh bundle) on a machine with a
# GPU, in this order (the later parts are the cheaper to lose when a lease runs short; the sanitizers,
# which time nothing, run beside the tests, and the timed parts after both):
#   tests     kflash_test_cuda, the whole suite
#   bench     kflash-bench --backend Cuda [args] (default --full), device limits in the same run
#   peers     PyTorch's equivalents of the bench's cases (torch_peers.py), then one table of both
#   probe     warp_mma_probe: attention through warp MMA (3xTF32 and bf16) outside kflash, at
#             1x8x4096x64 and 1x1x16384x64, each variant's rate and its error against fp64
#   ncu       Nsight Compute on attention (D = 64, 128) and decode: occupancy, DRAM throughput,
#             FMA pipe use, warp stall reasons (KFLASH_GPU_NCU_CASES: other bench cases, one regex
#             each, separated by spaces)
#   sanitize  compute-sanitizer memcheck and racecheck over a reduced set of tests, beside the tests
# Output goes to $KFLASH_GPU_OUT (default: out/ beside this script), at most 9 files: tests.log,
# bench.log, bench/results.json, bench/summary.png, peers.log, torch_peers.json, probe.log, ncu.log,
# sanitize.log.
# KFLASH_GPU_PARTS chooses parts ("tests bench peers probe ncu sanitize" by default); each has a
# time limit in seconds, KFLASH_GPU_<PART>_TIMEOUT. Exit status 1 when a test, the bench or a
# sanitizer fails.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${KFLASH_GPU_OUT:-$here/out}
parts=" ${KFLASH_GPU_PARTS:-tests bench peers probe ncu sanitize} "
mkdir -p "$out"
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
has() { [[ $parts == *" $1 "* ]]; }
limit() { local v="KFLASH_GPU_${1}_TIMEOUT"; echo "${!v:-$2}"; }
stamp() { printf '\n== %s (%s s since the start)\n' "$1" "$SECONDS"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,temperature.gpu --format=csv |
  tee "$out/tests.log"

# The sanitizers start first, in the background, and are waited for before the timed parts.
sanitize() {
  local f=${KFLASH_GPU_SANITIZE_FILTER:-'*AttentionTest/0.HeadDims:*AttentionTest/1.HeadDims:*AttentionTest/0.DecodeHeadDims:*AttentionTest/0.ChunkedStaging:*AttentionTest/0.MergeAttentionMatchesSinglePass:*AttentionTest/0.DecodeLongKeys:*AttentionOptionsTest/0.BlockMask:*AttentionSequencesTest/0.PagedDecodeAndPrefill:*SoftmaxTest/0.DeviceRowSchedulesByChunks:*SoftmaxTest/0.LayoutStride:*CrossEntropyTest/0.LayoutRight'}
  local tool rc
  for tool in memcheck racecheck; do
    ( timeout "$(limit SANITIZE 120)" compute-sanitizer --tool $tool --error-exitcode 3 "$here/kflash_test_cuda" \
          --gtest_brief=1 --gtest_filter="$f" >"$out/sanitize.$tool" 2>&1
      echo $? >"$out/sanitize.$tool.rc" ) &
  done
  wait
  : >"$out/sanitize.log"
  for tool in memcheck racecheck; do
    rc=$(cat "$out/sanitize.$tool.rc")
    { echo "### $tool"; cat "$out/sanitize.$tool"; } >>"$out/sanitize.log"
    echo "$tool: exit $rc$([ "$rc" -eq 124 ] && echo ' (time limit)'); $(grep -cE '^========= (Invalid|Race|Error)' \
         "$out/sanitize.$tool") findings; $(grep -E 'tests? from .* ran' "$out/sanitize.$tool" | tail -1)" >>"$out/sanitize.sum"
    [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || echo failed >>"$out/sanitize.sum"
    rm -f "$out/sanitize.$tool" "$out/sanitize.$tool.rc"
  done
}
sanitizing=false
if has sanitize && command -v compute-sanitizer >/dev/null; then
  stamp "compute-sanitizer, in the background"
  : >"$out/sanitize.sum"
  sanitize &
  sanitizing=true
fi

if has tests; then
  # The tests' host references take most of their time: shards run side by side on the machine's cores
  # (KFLASH_GPU_TEST_SHARDS, default 4), each test's time in the log.
  shards=${KFLASH_GPU_TEST_SHARDS:-4}
  stamp "tests, $shards shards"
  pids=()
  for ((i = 0; i < shards; ++i)); do
    ( GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$(limit TESTS 240)" "$here/kflash_test_cuda" \
          ${KFLASH_GPU_TEST_FILTER:+--gtest_filter=$KFLASH_GPU_TEST_FILTER} >"$out/tests.$i" 2>&1
      echo $? >"$out/tests.$i.rc" ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for ((i = 0; i < shards; ++i)); do
    { echo "### shard $i of $shards: exit $(cat "$out/tests.$i.rc")"; cat "$out/tests.$i"; } >>"$out/tests.log"
    [ "$(cat "$out/tests.$i.rc")" -eq 0 ] || status=1
    rm -f "$out/tests.$i" "$out/tests.$i.rc"
  done
  grep -E "^### shard|^\[  (PASSED|FAILED|SKIPPED)|FAILED|Failure|tests? from .* ran|Timeout" "$out/tests.log" | head -60
fi

if $sanitizing; then
  wait
  stamp "compute-sanitizer done"
  grep -v '^failed$' "$out/sanitize.sum"
  grep -q '^failed$' "$out/sanitize.sum" && status=1
  rm -f "$out/sanitize.sum"
  grep -E "^========= (Invalid|Race|Error|ERROR)" "$out/sanitize.log" | sort | uniq -c | head -10
fi

if has bench; then
  stamp bench
  [ $# -gt 0 ] || set -- --full
  timeout "$(limit BENCH 300)" "$here/kflash-bench" --backend Cuda --out "$out/bench" "$@" >"$out/bench.log" 2>&1 || status=1
  # The whole table is in bench.log; here the limits and the count (the peers' table gives the cases).
  grep -E "^Cuda +limits" "$out/bench.log" | cut -c1-110
  echo "$(grep -cE "^Cuda +[a-z_]+ .* kflash" "$out/bench.log") kflash cases in the table"
  grep -E "ERROR|error" "$out/bench.log" | head -5
fi

if has peers; then
  stamp "PyTorch peers"
  PYTHONUNBUFFERED=1 timeout "$(limit PEERS 150)" python3 "$here/torch_peers.py" --out "$out" \
      --kflash "$out/bench/results.json" >"$out/peers.log" 2>&1
  sed -n '/peers timed/,$p' "$out/peers.log" | grep -v "^  refused" ; tail -3 "$out/peers.log" | grep -i error
fi

if has probe && [ -x "$here/warp_mma_probe" ]; then
  stamp "warp-MMA probe"
  { timeout "$(limit PROBE 60)" "$here/warp_mma_probe" 8 4096
    timeout "$(limit PROBE 60)" "$here/warp_mma_probe" 1 16384; } >"$out/probe.log" 2>&1
  cat "$out/probe.log"
fi

if has ncu && command -v ncu >/dev/null; then
  stamp "ncu"
  stalls=""
  for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected \
           lg_throttle no_instruction dispatch_stall membar branch_resolving selected; do
    stalls+="${stalls:+,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  metrics="sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed"
  metrics+=",sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
  metrics+=",gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_registers"
  metrics+=",launch__occupancy_limit_shared_mem,launch__block_size,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed"
  metrics+=",smsp__warps_issue_stalled_long_scoreboard_per_warp_active.pct,$stalls"
  : >"$out/ncu.log"
  for c in ${KFLASH_GPU_NCU_CASES:-'attention/fp32/1x8x4096x64/kflash' 'attention/fp32/1x4x4096x128/kflash'
           'decode/fp32/1x8\(kv1\)x1x1048576x128/kflash'}; do
    for m in "$metrics" "${metrics%%,smsp__warps_issue_stalled*}"; do  # without the stall metrics if refused
      echo "### $c" >>"$out/ncu.log"
      timeout "$(limit NCU 90)" ncu --clock-control none --kernel-name-base demangled \
          --kernel-name 'regex:TeamAttentionKernel|MergeKernel' --launch-skip 2 --launch-count 2 --csv \
          --metrics "$m" "$here/kflash-bench" --backend Cuda --full --filter "$c" >"$out/ncu.part" 2>&1
      cat "$out/ncu.part" >>"$out/ncu.log"
      grep -qi "metric" "$out/ncu.part" && grep -q "==ERROR==" "$out/ncu.part" || break
    done
  done
  rm -f "$out/ncu.part"
  python3 - "$out/ncu.log" <<'EOF'
import csv, sys, re
case, rows = None, {}
for line in open(sys.argv[1]):
    if line.startswith("### "):
        case = line[4:].strip(); continue
    if not line.startswith('"'):
        continue
    r = next(csv.reader([line]))
    if len(r) < 3 or r[0] == "ID":
        continue
    kernel = "merge" if "MergeKernel" in line else "attention"
    rows.setdefault((case, r[0], kernel), {})[r[-3]] = r[-1]
for (case, i, kernel), m in rows.items():
    st = {k: float(v.replace(",", "")) for k, v in m.items() if "issue_stalled" in k and "per_issue_active" in k and v}
    top = sorted(st.items(), key=lambda kv: -kv[1])[:3]
    g = lambda k: m.get(k, "-")
    print(f"{case} [{kernel} #{i}] time {g('gpu__time_duration.sum')} ns, block {g('launch__block_size')}, grid {g('launch__grid_size')}, "
          f"regs {g('launch__registers_per_thread')}, occupancy {g('sm__warps_active.avg.pct_of_peak_sustained_active')} %, "
          f"DRAM {g('dram__throughput.avg.pct_of_peak_sustained_elapsed')} %, FMA pipe {g('sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active')} %, "
          f"stalls per issue: " + ", ".join(f"{re.sub('smsp__average_warps_issue_stalled_|_per_issue_active.ratio', '', k)} {v:.2f}" for k, v in top))
EOF
  grep -E "^==ERROR|==WARNING" "$out/ncu.log" | sort | uniq -c | head -5
fi

stamp "done, status $status"
exit $status
