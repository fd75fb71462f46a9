#!/usr/bin/python3
"""Bar chart of kflash's fraction of the machine limit per kernel and backend, from the
results.json that kflash-bench writes.  usage: kflash_plot.py results.json summary.png"""
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    fractions = {}  # case -> {backend: fraction}
    for b in data["benchmarks"]:
        # names as registered, without Google Benchmark's /min_time:... and /manual_time suffixes
        name = re.sub(r"/min_time:[^/]*|/manual_time", "", b["name"])
        if b.get("run_type", "iteration") != "iteration" or not name.endswith("/kflash"):
            continue
        if "frac_of_limit" not in b:
            continue
        backend, case = name.split("/", 1)
        fractions.setdefault(case[: -len("/kflash")], {})[backend] = b["frac_of_limit"]
    if not fractions:
        print("kflash_plot: no kflash results with a fraction of limit in", src)
        return 1
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
    ctx = data.get("context", {})
    ax.set_title("kflash %s on %s (Kokkos %s)" % (ctx.get("kflash_version", "?"), ctx.get("cpu_model", "?"),
                                                  ctx.get("kokkos_version", "?")), fontsize=9)
    ax.axhline(1.0, color="grey", linewidth=0.5)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
