#!/usr/bin/env python3
"""Static gates of the device schedules, from what the compiler made of them (no GPU needed).

Reads the CUDA build's library, libkflash.a (every device kernel of every entry point, as its C
interface instantiates them for Kokkos::Cuda): registers and stack frame per kernel (cuobjdump
--dump-resource-usage), spill instructions (STL/LDL) and the widest global load (the SASS of its
cubins, by nvdisasm); and the threads and scratch bytes per team of each device shape from
kflash_device_footprints. Then judges, for attention, its backward (the dq and the dk/dv kernel) and
decode at fp32 D = 64 and 128 and at fp64 D = 64, for attention's warp-product schedule (fp32 and
16-bit storage) at D = 64 and 128, and for the row kernels:

  spill      no local-memory store or load and no stack frame
  occupancy  at least 8 warps per SM on sm_80 and on sm_90, from registers, team threads and scratch
  ldg128     the widest global load is 128 bits (attention and decode: K/V staged by 16-byte loads;
             the backward: q, dout, K and V staged so;
             the team row kernel's chunk path: rows read by 16-byte loads)
  hmma       the warp-product schedule's products are warp matrix instructions (HMMA in its SASS)

A gate that fails must be listed in the expected-failures file (one "gate kernel key" per line,
with the reason after a '#'), and a listed gate that passes must leave it, so the list always says
where the schedules stand. A line that starts with "kokkos<N" ("kokkos>=N") holds only where the
build's Kokkos is older than version N (is N or newer): KOKKOS_VERSION, as kflash_device_footprints
prints it, 40000 being 4.0.0.
Prints one table; exits 1 when a gate and the list disagree.
"""
import argparse
import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

GATED = ("TeamAttentionKernel", "WarpAttentionKernel", "TeamBackwardDq", "TeamBackwardDkv", "MergeKernel",
         "RowKernel", "LaneRowKernel", "TeamRowKernel")
# The kernels on attention's team shapes (TeamAttentionShape<...> is their key).
TEAM_SHAPED = ("TeamAttentionKernel", "TeamBackwardDq", "TeamBackwardDkv")
# The kernel on the warp shapes (WarpAttentionShape<storage, warps, BK, DV, blocks, prefetch> is its key, the storage
# named float, or bf16 or fp16 whatever type the build's Kokkos gives them).
WARP_SHAPED = ("WarpAttentionKernel",)
# (registers per SM, warps per SM, teams per SM, shared memory per SM, reserved per team) for the
# architectures the gates hold on; a team's scratch beyond 48 KiB is never asked for by Kokkos.
ARCHS = {"sm_80": (65536, 64, 32, 167936, 1024), "sm_90": (65536, 64, 32, 233472, 1024)}
MIN_WARPS = 8
# The key suffix of the team row kernel's 16-byte path (its Chunked template argument).
BY_CHUNKS = " by chunks"


def run(cmd, cwd=None):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=cwd).stdout


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    return out.split("\n")[: len(names)]


def resource_usage(cuobjdump, binary):
    """{mangled name: (registers, stack bytes)} of the sm_* code in binary."""
    text = run([cuobjdump, "--dump-resource-usage", binary])
    found = re.findall(r" Function (\S+):\n\s+REG:(\d+) STACK:(\d+)", text)
    return {name: (int(reg), int(stack)) for name, reg, stack in found}


def sass_facts(cuobjdump, nvdisasm, binary, wanted):
    """{mangled name: (spill instructions, widest global load in bits, HMMA instructions)} for the names in wanted.

    The cubins are extracted (cuobjdump -xelf) and disassembled by nvdisasm, one process per cubin
    side by side, each piped through grep for the lines read here (section starts, STL/LDL, LDG):
    cuobjdump -sass of the whole library is ten times slower.
    """
    facts = {}
    with tempfile.TemporaryDirectory() as tmp:
        run([cuobjdump, "-xelf", "all", os.path.abspath(binary)], cwd=tmp)
        cubins = sorted(f for f in os.listdir(tmp) if f.endswith(".cubin"))
        if not cubins:
            sys.exit(f"static gates: no cubin in {binary}")
        pattern = r"^\s*\.section\s|\b(STL|LDL)\b|LDG|HMMA"
        # pipefail: a failing nvdisasm fails the pipeline, and grep's "no line" (status 1) is allowed.
        script = f'set -o pipefail; "{nvdisasm}" "$1" | {{ grep -E "{pattern}" || [ $? -eq 1 ]; }}'
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            texts = pool.map(lambda c: run(["bash", "-c", script, "nvdisasm", c], cwd=tmp), cubins)
            for text in texts:
                name = None
                for line in text.splitlines():
                    section = re.match(r"\s*\.section\s+\.text\.([^,\s]+)", line)
                    if section or re.match(r"\s*\.section\s", line):  # not .sectionflags, .sectioninfo
                        name = section.group(1) if section and section.group(1) in wanted else None
                        if name:
                            facts[name] = [0, 0, 0]
                        continue
                    if name is None or "/*" not in line:
                        continue
                    if re.search(r"\b(STL|LDL)\b", line):
                        facts[name][0] += 1
                    if re.search(r"\bHMMA\b", line):
                        facts[name][2] += 1
                    m = re.search(r"\bLDG\.E((?:\.[A-Z0-9]+)*)", line)
                    if m:
                        width = 32
                        for mod in m.group(1).split("."):
                            if mod in ("64", "128"):
                                width = int(mod)
                            elif mod in ("U8", "S8"):
                                width = 8
                            elif mod in ("U16", "S16"):
                                width = 16
                        facts[name][1] = max(facts[name][1], width)
    return {k: tuple(v) for k, v in facts.items()}


def footprints(program):
    """({(kernel, key): (threads, scratch bytes)}, Kokkos version) printed by kflash_device_footprints."""
    table, version = {}, None
    for line in run([program]).splitlines():
        m = re.match(r"(\w+) (.*) threads=(\d+) scratch=(\d+)$", line)
        if m:
            table[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
        m = re.match(r"KOKKOS_VERSION (\d+)$", line)
        if m:
            version = int(m.group(1))
    if version is None:
        sys.exit(f"static gates: {program} printed no KOKKOS_VERSION")
    return table, version


def read_expected(path, kokkos_version):
    """{(gate, kernel, key): line} of the expected failures that hold for this Kokkos version."""
    expected = {}
    with open(path) as f:
        for line in f:
            entry = line.split("#", 1)[0].split()
            m = re.fullmatch(r"kokkos(<|>=)(\d+)", entry[0]) if entry else None
            if m:
                if (kokkos_version < int(m.group(2))) != (m.group(1) == "<"):
                    continue
                entry = entry[1:]
            if entry:
                expected[(entry[0], entry[1], " ".join(entry[2:]))] = line.strip()
    return expected


def warps_per_sm(arch, regs, threads, scratch):
    sm_regs, sm_warps, sm_teams, sm_shared, reserved = ARCHS[arch]
    warps = (threads + 31) // 32
    regs_per_warp = (regs * 32 + 255) // 256 * 256
    teams = min(sm_teams, sm_warps // warps, sm_regs // (regs_per_warp * warps) if regs else sm_teams)
    if scratch:
        teams = min(teams, sm_shared // ((scratch + 127) // 128 * 128 + reserved))
    return teams * warps


def key_of(kernel, demangled):
    shape = re.search(r"TeamAttentionShape<[^>]*>", demangled)
    if shape:
        return shape.group(0)
    warp = re.search(r"WarpAttentionShape<(.+?), (\d+), (\d+), (\d+), (\d+), (true|false)>", demangled)
    if warp:
        storage = warp.group(1).strip()
        if storage != "float":
            storage = "bf16" if re.search(r"bhalf|bfloat", storage, re.I) else "fp16"
        return f"WarpAttentionShape<{storage}, {', '.join(warp.groups()[1:])}>"
    key = "double" if "double" in demangled else "float"
    # The team row kernel's two access paths (its last template argument): 16-byte chunks, elements.
    if kernel == "TeamRowKernel" and re.search(r"RowOp\)\d, \d+, true>", demangled):
        key += BY_CHUNKS
    return key


def role(kernel, key):
    if kernel.startswith("TeamBackward"):
        return "attention backward"
    if kernel == "TeamAttentionKernel":
        return "decode" if re.match(r"TeamAttentionShape<\w+, 8,", key) else "attention"
    if kernel in WARP_SHAPED:
        return "attention" if "<float," in key else "attention 16-bit"
    return "decode merge" if kernel == "MergeKernel" else "rows"


def judged(kernel, key):
    """Attention, its backward and decode at fp32 D = 64, 128 and fp64 D = 64; merges and rows at both
    types."""
    if kernel not in TEAM_SHAPED:
        return True  # the warp shapes are all fp32 or 16-bit, and at D = 64 and 128
    dv = int(re.search(r"(\d+), \d+>$", key).group(1))
    return "float" in key or dv == 64


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="the CUDA build directory")
    ap.add_argument("--expected", default=os.path.join(os.path.dirname(__file__), "gates_expected.txt"))
    ap.add_argument("--cuobjdump", default="/usr/bin/cuobjdump")
    ap.add_argument("--nvdisasm", help="default: nvdisasm beside cuobjdump")
    ap.add_argument("--binary", help="the object, archive or executable to read (default: <build>/libkflash.a)")
    args = ap.parse_args()

    binary = args.binary or os.path.join(args.build, "libkflash.a")
    usage = resource_usage(args.cuobjdump, binary)
    names = list(usage)
    groups = collections.defaultdict(list)
    for name, dem in zip(names, demangle(names)):
        m = re.search(r"kflash::impl::(\w+)<", dem)
        if m and m.group(1) in GATED:
            groups[(m.group(1), key_of(m.group(1), dem))].append(name)
    nvdisasm = args.nvdisasm or os.path.join(os.path.dirname(args.cuobjdump), "nvdisasm")
    sass = sass_facts(args.cuobjdump, nvdisasm, binary, {n for members in groups.values() for n in members})
    feet, kokkos_version = footprints(os.path.join(args.build, "tests", "kflash_device_footprints"))
    expected = read_expected(args.expected, kokkos_version)

    failures, rows, seen = [], [], set()
    for (kernel, key), members in sorted(groups.items()):
        if not judged(kernel, key):
            continue
        regs = max(usage[n][0] for n in members)
        stack = max(usage[n][1] for n in members)
        spills = max(sass.get(n, (0, 0, 0))[0] for n in members)
        widest = min(sass.get(n, (0, 0, 0))[1] for n in members)
        hmma = min(sass.get(n, (0, 0, 0))[2] for n in members)
        threads, scratch = feet.get((kernel, key.removesuffix(BY_CHUNKS)), (0, 0))
        occupancy = {a: warps_per_sm(a, regs, threads, scratch) for a in ARCHS} if threads else {}
        gates = {"spill": spills == 0 and stack == 0}
        if threads:
            gates["occupancy"] = all(w >= MIN_WARPS for w in occupancy.values())
        else:
            failures.append(f"{kernel} {key}: no footprint from kflash_device_footprints")
        if kernel in TEAM_SHAPED + WARP_SHAPED or key.endswith(BY_CHUNKS):
            gates["ldg128"] = widest >= 128
        if kernel in WARP_SHAPED:
            gates["hmma"] = hmma > 0
        for gate, ok in gates.items():
            listed = (gate, kernel, key) in expected
            seen.add((gate, kernel, key))
            if not ok and not listed:
                failures.append(f"{gate} {kernel} {key}: fails and is not in {os.path.basename(args.expected)}")
            if ok and listed:
                failures.append(f"{gate} {kernel} {key}: passes now: remove it from {os.path.basename(args.expected)}")
        verdict = " ".join(g if ok else g.upper() + "!" for g, ok in gates.items())
        rows.append((role(kernel, key), kernel, key, len(members), regs, stack, spills, scratch, threads,
                     "/".join(str(occupancy[a]) for a in ARCHS) if occupancy else "-", widest, verdict))
    for entry in expected:
        if entry not in seen:
            failures.append(f"{' '.join(entry)}: listed, but no such kernel was judged")

    header = ("role", "kernel", "shape or type", "inst", "regs", "stack", "spill ops", "scratch B", "threads",
              "warps/SM 80/90", "widest LDG", "gates (FAILED!)")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print(f"(from {binary}, Kokkos {kokkos_version}; registers, stack and spills are the worst of each group's "
          f"instantiations, the widest load its narrowest; warps per SM need >= {MIN_WARPS})")
    for f in failures:
        print("static gates: " + f)
    if failures:
        return 1
    print(f"static gates: every gate as {os.path.basename(args.expected)} says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
