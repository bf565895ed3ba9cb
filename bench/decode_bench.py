#!/usr/bin/env python3
"""Decode benchmark: fsdpa's fused decode against torch SDPA (flash, cudnn,
math) on the very same tensors, bf16, one query token.

Reports per row: time (median of CUDA-event timings after warm-up, input
sets rotated when K/V would fit in L2), unique K/V bytes read per second, the
fraction of the device-copy ceiling measured in the same run, workspace
bytes, and the error against a float64 reference.

  FSDPA_LIBRARY=build/libfsdpa.so python3 bench/decode_bench.py --out results.json

For quick A/B runs of the decode kernels: --rows 0,3,8 times only those rows
(indices into ROWS), --fsdpa-only skips torch's backends, --unfused also times
fsdpa's unfused (cuBLAS) path, --profile splits the fused time per kernel
(split, combine) with torch.profiler.
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import fsdpa  # noqa: E402


# ------------------------------------------------------------ measuring
def median_ms(fn, iters=40, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def copy_ceiling_tbs():
    x = torch.empty(2 * 1024**3 // 2, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), iters=20)
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
    counter = [0]

    def fused():
        runs[counter[0] % sets]()
        counter[0] += 1
    ms = median_ms(fused)
    runs[0]()
    torch.cuda.synchronize()
    flops = 2 * B * Hq * Lk * (dq + dv)
    result["fsdpa"] = {"ms": ms, "tb_s": unique / ms / 1e9, "ceiling_fraction": unique / ms / 1e9 / ceiling,
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
        t = median_ms(lambda i=[0]: (slow[i[0] % sets](), i.__setitem__(0, i[0] + 1)))
        result["unfused"] = {"ms": t, "tb_s": unique / t / 1e9}
    if args.fsdpa_only:
        return result

    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                           ("math", SDPBackend.MATH)):
        try:
            if label == "math" and unique * Hq // Hkv > 8 * 1024**3:
                raise RuntimeError("skipped: the materialized scores would exceed 8 GB")
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()

            def call(i=[0]):
                q, k, v, _ = inputs[i[0] % sets]
                i[0] += 1
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=Hq != Hkv)
            o = call()
            err = rel_err(o, ref) if label != "math" or True else None
            t = median_ms(call, iters=10 if label == "math" else 40)
            result[label] = {"ms": t, "tb_s": unique / t / 1e9, "ceiling_fraction": unique / t / 1e9 / ceiling,
                             "err": err, "transient_bytes": torch.cuda.max_memory_allocated() - base}
        except Exception as e:  # no kernel for this shape
            result[label] = {"error": str(e).splitlines()[0][:160]}
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h200-decode.json")
    ap.add_argument("--md", default="h200-decode.md")
    ap.add_argument("--rows", default="", help="comma-separated indices into ROWS (default: all)")
    ap.add_argument("--fsdpa-only", action="store_true", help="skip torch's backends")
    ap.add_argument("--unfused", action="store_true", help="also time fsdpa's unfused path")
    ap.add_argument("--profile", action="store_true", help="per-kernel device time (torch.profiler)")
    args = ap.parse_args()
    rows = [ROWS[int(i)] for i in args.rows.split(",")] if args.rows else ROWS
    props = torch.cuda.get_device_properties(0)
    ceiling = copy_ceiling_tbs()
    l2 = getattr(props, "L2_cache_size", 50 * 1024**2)
    results = []
    for row in rows:
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
                  f"{f_['ms']*1e3:.1f} us splits {f_['splits']} {f_.get('kernels_us', '')}"
                  f" {results[-1].get('unfused', '')}", flush=True)
    doc = {"gpu": props.name, "torch": torch.__version__, "copy_ceiling_tb_s": ceiling,
           "command": " ".join(sys.argv), "rows": results}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)

    def cell(r, key):
        x = r.get(key, {})
        if "tb_s" not in x:
            return "no kernel"
        return f"{x['tb_s']:.2f} ({x['ms']*1e3:.0f} us)"
    lines = [f"GPU {props.name}, torch {torch.__version__}, copy ceiling {ceiling:.2f} TB/s (read+write), bf16, Lq=1",
             "", "| shape | Dqk/Dv | fsdpa TB/s (time) | of ceiling | splits | workspace | err | flash | cudnn | math | vs cudnn |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "fsdpa" not in r:
            lines.append(f"| {r.get('row')} | failed: {r.get('error', '')[:80]} |")
            continue
        f_ = r["fsdpa"]
        vs = f"{r['cudnn']['ms'] / f_['ms']:.2f}x" if "ms" in r.get("cudnn", {}) else "-"
        extra = f", {f_['tflop_s']:.0f} TFLOP/s" if r["v_aliases_k"] else ""
        lines.append(f"| B={r['B']} Hq={r['Hq']} Hkv={r['Hkv']} Lk={r['Lk']} | {r['Dqk']}/{r['Dv']} | "
                     f"{cell(r, 'fsdpa')}{extra} | {f_['ceiling_fraction']*100:.0f}% | {f_['splits']} | "
                     f"{f_['workspace_bytes']} | {f_['err']:.1e} | {cell(r, 'flash')} | {cell(r, 'cudnn')} | "
                     f"{cell(r, 'math')} | {vs} |")
    text = "\n".join(lines) + "\n"
    with open(args.md, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
