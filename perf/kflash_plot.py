#!/usr/bin/python3
"""Plots of a kflash-bench run, from the results.json it writes:
  summary.png           kflash's fraction of the machine limit per kernel and backend (bars);
  roofline-<backend>.png  one point per kflash case at its arithmetic intensity (operations per
                        byte of minimum traffic) and attained rate, under the roofs measured in the
                        same run (multiply-add peak, copy and read bandwidth). Row kernels count
                        nominal operations per element (3 for logsumexp and cross-entropy, 4 for
                        softmax and log_softmax), attention 4 D per visible (query, key) pair.
usage: kflash_plot.py results.json summary.png"""
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def kflash_runs(data):
    """(backend, case, benchmark) of every kflash one-shot result."""
    for b in data["benchmarks"]:
        # names as registered, without Google Benchmark's /min_time:... and /manual_time suffixes
        name = re.sub(r"/min_time:[^/]*|/manual_time", "", b["name"])
        if b.get("run_type", "iteration") != "iteration" or not name.endswith("/kflash"):
            continue
        backend, case = name.split("/", 1)
        yield backend, case[: -len("/kflash")], b


def title(data):
    ctx = data.get("context", {})
    return "kflash %s on %s (Kokkos %s)" % (ctx.get("kflash_version", "?"), ctx.get("cpu_model", "?"),
                                           ctx.get("kokkos_version", "?"))


def summary(data, dst):
    fractions = {}  # case -> {backend: fraction}
    for backend, case, b in kflash_runs(data):
        if "frac_of_limit" in b:
            fractions.setdefault(case, {})[backend] = b["frac_of_limit"]
    if not fractions:
        print("kflash_plot: no kflash results with a fraction of limit")
        return False
    cases = list(fractions)
    backends = sorted({be for v in fractions.values() for be in v})
    width = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(cases) + 3), 5))
    for i, be in enumerate(backends):
        xs = [c + (i - (len(backends) - 1) / 2) * width for c in range(len(cases))]
        ax.bar(xs, [fractions[c].get(be, 0) for c in cases], width, label=be)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("fraction of the machine limit")
    ax.set_title(title(data), fontsize=9)
    ax.axhline(1.0, color="grey", linewidth=0.5)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    plt.close(fig)
    return True


def roofline(data, backend, dst):
    limits = data.get("context", {}).get("limits", {})
    peak = limits.get(backend + "/fma_fp32")
    bandwidths = [(limits.get(backend + "/" + k), k.replace("_bw", "")) for k in ("copy_bw", "read_bw")]
    bandwidths = [(bw, label) for bw, label in bandwidths if bw]
    points = []
    for be, case, b in kflash_runs(data):
        if be == backend and b.get("flop") and b.get("bytes") and b.get("real_time"):
            seconds = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
            points.append((b["flop"] / b["bytes"], b["flop"] / seconds, case))
    if not peak or not bandwidths or not points:
        return False
    lo = min(p[0] for p in points + [(0.05, 0, "")]) / 2
    hi = max(p[0] for p in points + [(peak / bandwidths[0][0] * 4, 0, "")]) * 2
    fig, ax = plt.subplots(figsize=(9, 6))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for bw, label in bandwidths:
        ax.plot(xs, [min(peak, x * bw) * 1e-9 for x in xs], linewidth=1,
                label="%s %.1f GB/s, fp32 peak %.0f GFLOP/s" % (label, bw * 1e-9, peak * 1e-9))
    if limits.get(backend + "/fma_fp64"):
        ax.axhline(limits[backend + "/fma_fp64"] * 1e-9, color="grey", linestyle=":", linewidth=1, label="fp64 peak")
    for x, y, case in points:
        ax.plot([x], [y * 1e-9], "o", markersize=4, color="fp64" in case and "tab:red" or "tab:blue")
        ax.annotate(case, (x, y * 1e-9), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity [operations / byte of minimum traffic]")
    ax.set_ylabel("attained [G operations / s]")
    ax.set_title("%s: roofline, %s" % (backend, title(data)), fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    plt.close(fig)
    return True


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    ok = summary(data, dst)
    for backend in sorted({be for be, _, _ in kflash_runs(data)}):
        path = os.path.join(os.path.dirname(dst) or ".", "roofline-%s.png" % backend)
        if roofline(data, backend, path):
            print("wrote", path)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
