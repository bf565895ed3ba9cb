#!/usr/bin/env python3
"""Decode benchmark: fsdpa's fused decode against torch SDPA (flash, cudnn,
math) on the very same tensors, bf16, one query token.

Reports per row: time, unique K/V bytes read per second, the fraction of the
device-copy ceiling measured in the same run, workspace bytes, and the error
against a float64 reference. The time (`ms`, and every rate derived from it)
is the median per call of a CUDA graph that replays a run of calls, input
sets rotated when K/V would fit in L2: timed alone, a call of 30-300 us also
counts the 12-20 us of host launch path before it (bench/timing.py). Every
backend is timed that way; one that cannot be captured falls back to the
eager time (`"timing": "eager"`, the reason in `graph_error`). The eager
time (median of calls timed alone with CUDA events) is kept beside it as
`eager_ms`.

  FSDPA_LIBRARY=build/libfsdpa.so python3 bench/decode_bench.py --out results.json

For quick A/B runs of the decode kernels: --rows 0,3,8 times only those rows
(indices into ROWS), --fsdpa-only skips torch's backends, --unfused also times
fsdpa's unfused (cuBLAS) path, --profile splits the fused time per kernel
(split, combine) with torch.profiler (eager calls), --kv-gap BYTES places V
that far after K in one allocation, --cooldown S idles the GPU S seconds
before each row after the first (the row-order effect: bench/NOTES.md,
session 7).
The report (.md, .png) comes from decode_report.py, which also rewrites it
from a saved JSON.
"""
import argparse
import itertools
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)  # timing.py, also where the script's folder is not on the path (-P)
import fsdpa  # noqa: E402
import decode_report  # noqa: E402
import timing  # noqa: E402


# ------------------------------------------------------------ measuring
# Calls per graph and timed replays (timing.graph_ms), calls timed alone
# (timing.eager_ms). math takes milliseconds per call, where launch gaps do
# not matter: fewer of each keep the run short.
GRAPH = {"calls": 20, "replays": 10}
MATH_GRAPH = {"calls": 4, "replays": 5, "warmup": 1}
EAGER_ITERS, MATH_EAGER_ITERS = 40, 10


def rotate(fns):
    """One callable that runs fns in turn, one per call (rotated input sets)."""
    turn = itertools.cycle(fns)
    return lambda: next(turn)()


def graph_or_eager(fns, eager, **graph_args):
    """The time fields of one backend: `ms` under a CUDA graph of fns (or the
    eager time when they cannot be captured), which timing, and the eager time
    beside it."""
    ms, reason = timing.graph_ms(fns, **graph_args)
    if ms is None:
        return {"ms": eager, "eager_ms": eager, "timing": "eager", "graph_error": reason}
    return {"ms": ms, "eager_ms": eager, "timing": "graph"}


def copy_ceiling_tbs():
    x = torch.empty(2 * 1024**3 // 2, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    ms = timing.eager_ms(lambda: y.copy_(x), iters=20)
    return 2 * x.numel() * 2 / ms / 1e9


def rel_err(out, ref):
    return float((out.double() - ref).norm() / ref.norm())


def reference(q, k, v, scale):
    """float64 attention with the query heads of a kv group stacked as rows."""
    B, Hq, Lq, D = q.shape
    Hkv = k.shape[1]
    qg = q.double().reshape(B, Hkv, Hq // Hkv * Lq, D)
    s = torch.matmul(qg, k.double().transpose(-1, -2)) * scale
    o = torch.matmul(torch.softmax(s, dim=-1), v.double())
    return o.reshape(B, Hq, Lq, -1)


ROWS = [  # (name, B, Hq, Hkv, Lk, Dqk, Dv, v aliases k)
    *[(f"anchor", 1, 32, 8, 32768, dq, dv, False) for dq, dv in
      [(64, 64), (72, 72), (96, 64), (128, 128), (256, 256), (288, 288), (512, 512)]],
    ("anchor-b8", 8, 32, 8, 8192, 128, 128, False),
    ("anchor-b8", 8, 32, 8, 8192, 256, 256, False),
    *[("long", 1, 32, 8, 131072, dq, dv, False) for dq, dv in
      [(64, 64), (128, 128), (256, 256), (288, 288), (512, 512), (96, 64)]],
    ("mla", 1, 128, 1, 32768, 576, 512, True),
    ("mha", 1, 32, 32, 32768, 128, 128, False),  # one row per kv head
    # Contiguous D=90: 180-byte rows, 4-byte aligned (narrow copies), and the
    # aligned D=96 of the same bucket beside it.
    ("unaligned", 1, 32, 8, 32768, 90, 90, False),
    ("anchor", 1, 32, 8, 32768, 96, 96, False),
]


def kernel_times_us(fn, calls=20):
    """Device time per call of each kernel fn launches (torch.profiler, CUPTI)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0)
        if t > 0:
            times[e.key[:60]] = t / calls
    return times


def bench_row(row, ceiling, l2_bytes, args):
    name, B, Hq, Hkv, Lk, dq, dv, alias = row
    unique = B * Hkv * Lk * (dq if alias else dq + dv) * 2
    sets = min(4, max(1, math.ceil(3 * l2_bytes / unique)))
    inputs = []
    for _ in range(sets):
        q = torch.randn(B, Hq, 1, dq, dtype=torch.bfloat16, device="cuda")
        if args.kv_gap is not None and not alias:
            # K and V carved from one allocation, V starting kv_gap bytes after K ends.
            k_bytes, v_bytes = B * Hkv * Lk * dq * 2, B * Hkv * Lk * dv * 2
            buf = torch.empty(k_bytes + args.kv_gap + v_bytes, dtype=torch.uint8, device="cuda")
            k = buf[:k_bytes].view(torch.bfloat16).view(B, Hkv, Lk, dq).normal_()
            v = buf[k_bytes + args.kv_gap:].view(torch.bfloat16).view(B, Hkv, Lk, dv).normal_()
        else:
            k = torch.randn(B, Hkv, Lk, dq, dtype=torch.bfloat16, device="cuda")
            v = k[..., :dv] if alias else torch.randn(B, Hkv, Lk, dv, dtype=torch.bfloat16, device="cuda")
        out = torch.full((B, Hq, 1, dv), float("nan"), dtype=torch.bfloat16, device="cuda")
        inputs.append((q, k, v, out))
    scale = 1 / math.sqrt(dq)
    result = {"name": name, "B": B, "Hq": Hq, "Hkv": Hkv, "Lk": Lk, "Dqk": dq, "Dv": dv,
              "v_aliases_k": alias, "unique_kv_bytes": unique}
    ref = reference(*inputs[0][:3], scale)

    runs, info = [], None
    for q, k, v, out in inputs:
        run = fsdpa.prepare(q, k, v, out=out, policy="fused")
        runs.append(run)
        info = run.info
    fused = rotate(runs)
    times = graph_or_eager(runs, timing.eager_ms(fused, iters=EAGER_ITERS), **GRAPH)
    ms = times["ms"]
    runs[0]()
    torch.cuda.synchronize()
    flops = 2 * B * Hq * Lk * (dq + dv)
    result["fsdpa"] = {**times, "tb_s": unique / ms / 1e9, "ceiling_fraction": unique / ms / 1e9 / ceiling,
                       "tflop_s": flops / ms / 1e9, "workspace_bytes": int(info.workspace_bytes),
                       "splits": int(info.num_kv_splits), "bucket": f"{info.head_dim_qk_bucket}/{info.head_dim_v_bucket}",
                       "err": rel_err(inputs[0][3], ref)}
    if args.profile:
        try:
            result["fsdpa"]["kernels_us"] = kernel_times_us(fused)
        except Exception as e:  # no CUPTI: the timing above still stands
            result["fsdpa"]["kernels_us"] = {"error": str(e).splitlines()[0][:120]}
    if args.unfused:
        slow = [fsdpa.prepare(q, k, v, out=out, policy="unfused") for q, k, v, out in inputs]
        times = graph_or_eager(slow, timing.eager_ms(rotate(slow), iters=EAGER_ITERS), **GRAPH)
        result["unfused"] = {**times, "tb_s": unique / times["ms"] / 1e9}
    if args.fsdpa_only:
        return result

    def sdpa(backend, q, k, v):
        # The backend is chosen inside the call, so it holds in the eager calls,
        # the graph's warm-up and its capture alike.
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=Hq != Hkv)
        return call

    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                           ("math", SDPBackend.MATH)):
        try:
            if label == "math" and unique * Hq // Hkv > 8 * 1024**3:
                raise RuntimeError("skipped: the materialized scores would exceed 8 GB")
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            calls = [sdpa(backend, q, k, v) for q, k, v, _ in inputs]
            o = calls[0]()
            err = rel_err(o, ref)
            eager = timing.eager_ms(rotate(calls), iters=MATH_EAGER_ITERS if label == "math" else EAGER_ITERS)
            # Read before the capture, whose private memory pool would count too.
            transient = torch.cuda.max_memory_allocated() - base
            times = graph_or_eager(calls, eager, **(MATH_GRAPH if label == "math" else GRAPH))
            t = times["ms"]
            result[label] = {**times, "tb_s": unique / t / 1e9, "ceiling_fraction": unique / t / 1e9 / ceiling,
                             "err": err, "transient_bytes": transient}
        except Exception as e:  # no kernel for this shape
            result[label] = {"error": str(e).splitlines()[0][:160]}
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h200-decode.json")
    ap.add_argument("--md", default="h200-decode.md")
    ap.add_argument("--png", default="h200-decode.png", help="plot of TB/s per row and backend")
    ap.add_argument("--rows", default="", help="comma-separated indices into ROWS (default: all)")
    ap.add_argument("--fsdpa-only", action="store_true", help="skip torch's backends")
    ap.add_argument("--unfused", action="store_true", help="also time fsdpa's unfused path")
    ap.add_argument("--profile", action="store_true", help="per-kernel device time (torch.profiler)")
    ap.add_argument("--cooldown", type=float, default=0.0,
                    help="seconds of idle GPU before each row after the first")
    ap.add_argument("--kv-gap", type=int, default=None,
                    help="carve K and V from one allocation, V this many bytes (a multiple of 16) after K")
    ap.add_argument("--row-indices", action="store_true",
                    help="print every row's index, comma-separated, and exit (bench/device.sh)")
    args = ap.parse_args()
    if args.row_indices:
        print(",".join(str(i) for i in range(len(ROWS))))
        return
    rows = [ROWS[int(i)] for i in args.rows.split(",")] if args.rows else ROWS
    props = torch.cuda.get_device_properties(0)
    ceiling = copy_ceiling_tbs()
    l2 = getattr(props, "L2_cache_size", 50 * 1024**2)
    results = []
    for n, row in enumerate(rows):
        if n > 0 and args.cooldown > 0:
            torch.cuda.synchronize()
            time.sleep(args.cooldown)
        print("row", row, file=sys.stderr, flush=True)
        try:
            results.append(bench_row(row, ceiling, l2, args))
        except Exception as e:
            results.append({"name": row[0], "row": row, "error": str(e)})
            print("row failed", row, e, file=sys.stderr)
        torch.cuda.empty_cache()
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # survives a crash
        f_ = results[-1].get("fsdpa")
        if f_:
            print(f"{row}: {f_['tb_s']:.2f} TB/s {f_['ceiling_fraction']*100:.0f}% "
                  f"{f_['ms']*1e3:.1f} us ({f_['timing']}; eager {f_['eager_ms']*1e3:.1f} us) "
                  f"err {f_['err']:.1e} splits {f_['splits']} {f_.get('kernels_us', '')}"
                  f" {results[-1].get('unfused', '')}", flush=True)
    doc = {"gpu": props.name, "torch": torch.__version__, "copy_ceiling_tb_s": ceiling,
           "command": " ".join(sys.argv),
           "timing": {"graph": GRAPH, "math_graph": MATH_GRAPH, "eager_iters": EAGER_ITERS,
                      "math_eager_iters": MATH_EAGER_ITERS},
           "rows": results}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)

    decode_report.write(doc, args.md, args.png)


if __name__ == "__main__":
    main()
