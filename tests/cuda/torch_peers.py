#!/usr/bin/env python3
"""PyTorch's equivalents of kflash-bench's Cuda cases, timed the way kflash-bench times a device case,
then one table of both from the same run.

    python3 torch_peers.py --out DIR [--kflash DIR/results.json]

Each peer is timed as kflash-bench times a device case: enough calls between two CUDA events to last
about a millisecond, their mean, over 20 such iterations; the median is kept. Peers are named after
the kflash case they stand beside ("Cuda/softmax/fp32/4096x1024") plus "/torch_<variant>"; a variant
PyTorch refuses (fp32 on the flash backend, say) is recorded with its error. With --kflash, only the
peers of the cases in that run are timed (and bf16 attention beside each fp32 or fp64 attention case,
for reference). DIR/torch_peers.json holds every time in ms; the table gives kflash's time, its
fraction of the limit measured in its run, the fastest peer of the same storage type and kflash's
speed-up over it (peer time over kflash time), and PyTorch's bf16 attention of the same shape.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

import torch
import torch.nn.functional as F

ROW_SHAPES = [(4096, 1024), (1024, 32768), (64, 1048576), (1, 67108864), (65536, 64)]
CE_SHAPES = [(512, 262144), (4096, 32768), (8, 262144), (65536, 64)]
# (B, H, Hk, Nq, Nk, D, causal): kflash-bench's --full dense cases.
ATTN_CASES = [(1, 8, 8, 1024, 1024, 64), (1, 8, 8, 4096, 4096, 64), (1, 4, 4, 4096, 4096, 128),
              (1, 1, 1, 16384, 16384, 64)]
DECODE_CASES = [(1, 8, 1, 1, 65536, 128), (1, 8, 1, 1, 1048576, 128)]
DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16, "fp16": torch.float16}
# SDPA backends tried per storage type (flash and cuDNN take 16-bit tensors only).
SDPA_BACKENDS = {"fp32": ("math", "efficient"), "fp64": ("math",), "bf16": ("flash", "cudnn", "efficient"),
                 "fp16": ("flash", "cudnn", "efficient")}


def time_ms(fn):
    """Median over 20 iterations of the mean time of enough back-to-back calls to last ~1 ms."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    calls = max(1, min(1000, int(math.ceil(1.0 / max(start.elapsed_time(stop), 1e-3)))))
    times = []
    for _ in range(20):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / calls)
    return statistics.median(times)


def shape_name(b, h, hk, nq, nk, d, causal):
    name = f"{b}x{h}" + (f"(kv{hk})" if hk != h else "") + f"x{nq}" + (f"x{nk}" if nk != nq else "") + f"x{d}"
    return name + ("/causal" if causal else "")


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def run_peers(results, errors, wanted):
    """Times the peers of every case base (\"Cuda/softmax/fp32/4096x1024\") for which wanted(base) holds."""
    from torch.nn.attention import sdpa_kernel
    gen = torch.Generator(device="cuda").manual_seed(7)

    def record(name, fn):
        try:
            results[name] = time_ms(fn)
        except Exception as e:  # a backend that refuses the case: recorded, not fatal
            errors[name] = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        torch.cuda.empty_cache()

    for tname, dt in DTYPES.items():
        for rows, cols in ROW_SHAPES:
            ops = [op for op in ("softmax", "log_softmax", "logsumexp") if wanted(f"Cuda/{op}/{tname}/{rows}x{cols}")]
            if not ops:
                continue
            x = torch.randn(rows, cols, device="cuda", dtype=dt, generator=gen)
            calls = {"softmax": lambda: F.softmax(x, -1), "log_softmax": lambda: F.log_softmax(x, -1),
                     "logsumexp": lambda: torch.logsumexp(x, -1)}
            for op in ops:
                record(f"Cuda/{op}/{tname}/{rows}x{cols}/torch", calls[op])
            del x
    for rows, cols in CE_SHAPES:
        if not wanted(f"Cuda/cross_entropy/fp32/{rows}x{cols}"):
            continue
        x = torch.randn(rows, cols, device="cuda", dtype=torch.float32, generator=gen)
        labels = torch.randint(0, cols, (rows,), device="cuda", generator=gen)
        record(f"Cuda/cross_entropy/fp32/{rows}x{cols}/torch",
               lambda: F.cross_entropy(x, labels, reduction="none"))
        del x, labels

    backends = sdpa_backends()
    cases = [(c + (causal,), False) for causal in (False, True) for c in ATTN_CASES]
    cases += [(c + (False,), True) for c in DECODE_CASES]
    for (b, h, hk, nq, nk, d, causal), decode in cases:
        kind = "decode" if decode else "attention"
        for tname, dt in DTYPES.items():
            base = f"Cuda/{kind}/{tname}/{shape_name(b, h, hk, nq, nk, d, causal)}"
            if not wanted(base):
                continue
            q = torch.randn(b, h, nq, d, device="cuda", dtype=dt, generator=gen)
            k = torch.randn(b, hk, nk, d, device="cuda", dtype=dt, generator=gen)
            v = torch.randn(b, hk, nk, d, device="cuda", dtype=dt, generator=gen)
            for bname in SDPA_BACKENDS[tname]:
                def call(bk=backends[bname]):
                    with sdpa_kernel(bk):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hk != h)
                # The math backend materialises B*H*Nq*Nk scores: skip it where that passes 4 GiB.
                if bname == "math" and b * h * nq * nk * q.element_size() * 3 > 4 << 30:
                    errors[f"{base}/torch_{bname}"] = "skipped: scores over 4 GiB"
                    continue
                record(f"{base}/torch_{bname}", call)
            del q, k, v


def wanted_by(kflash):
    """The case bases to time peers for: kflash's cases, and bf16 attention beside its wider ones."""
    if kflash is None:
        return lambda base: True
    bases = {name[: -len("/kflash")] for name in kflash if name.endswith("/kflash")}
    widened = {re.sub(r"^(Cuda/(attention|decode))/(fp32|fp64)/", r"\1/bf16/", b) for b in bases}
    return lambda base: base in bases or base in widened


def load_kflash(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for r in data.get("benchmarks", []):
        if r.get("run_type") != "iteration":
            continue
        name = re.sub(r"/min_time:[^/]*|/iterations:[^/]*|/manual_time", "", r["name"])
        out[name] = r
    return out


def table(kflash, peers):
    def peers_of(base):
        return {k.split("/")[-1]: v for k, v in peers.items()
                if k.startswith(base + "/torch") and k.count("/") == base.count("/") + 1}

    rows = []
    for name, r in kflash.items():
        if not name.endswith("/kflash") or "/limits/" in name:
            continue
        base = name[: -len("/kflash")]
        same = peers_of(base)
        attention = re.match(r"Cuda/(attention|decode)/", base)
        bf16 = peers_of(re.sub(r"^(Cuda/(attention|decode))/[a-z0-9]+/", r"\1/bf16/", base)) if attention else {}
        if not same and not bf16:
            continue
        ms = float(r["real_time"])
        best = min(same.items(), key=lambda kv: kv[1]) if same else None
        rows.append((base.replace("Cuda/", ""), ms, r.get("frac_of_limit"), best, min(bf16.values()) if bf16 else None))
    print(f"\n{'case':44s} {'kflash ms':>10s} {'of limit':>8s} {'best torch (same type)':>30s} {'speed-up':>8s} "
          f"{'bf16 ms':>8s}")
    for base, ms, frac, best, bf in rows:
        frac_s = f"{frac:.2f}" if isinstance(frac, (int, float)) else "-"
        best_s = f"{best[0].replace('torch_', '')} {best[1]:.3f}" if best else "-"
        speed = f"{best[1] / ms:.2f}x" if best else "-"
        print(f"{base:44s} {ms:10.3f} {frac_s:>8s} {best_s:>30s} {speed:>8s} {'-' if bf is None else f'{bf:.3f}':>8s}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--kflash", help="kflash-bench's results.json of the same run")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if not torch.cuda.is_available():
        sys.exit("torch_peers: no CUDA device")
    props = torch.cuda.get_device_properties(0)
    kflash = load_kflash(args.kflash) if args.kflash and os.path.exists(args.kflash) else None
    results, errors = {}, {}
    run_peers(results, errors, wanted_by(kflash))
    with open(os.path.join(args.out, "torch_peers.json"), "w") as f:
        json.dump({"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                   "times_ms": results, "refused": errors}, f, indent=1)
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {props.name}: {len(results)} peers timed, "
          f"{len(errors)} refused")
    for k, v in sorted(errors.items()):
        print(f"  refused {k}: {v}")
    if kflash is not None:
        table(kflash, results)


if __name__ == "__main__":
    main()
