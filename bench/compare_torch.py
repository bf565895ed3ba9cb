#!/usr/bin/env python3
"""Side-by-side prefill benchmark on the very same tensors: fsdpa fused,
fsdpa unfused, PyTorch SDPA backends (flash, efficient, cudnn, math) and
FlexAttention, for the prefill rows of the anchors (the libraries to beat, measured on the H200) (non-causal and causal)
and the long-context chunk rows. --large runs the head dims above 256
instead (288..576/512 at L=8192 and as Lq=2048 chunks of 32k and 128k keys,
576/512 with v a view of k and apart from it, torch's backends given K/V
repeated to Hq) and
the soft cap at the gemma2-9b shape.

Reports TFLOP/s (causal counts half), the ratio of fsdpa fused to each
competitor, peak transient device memory, the error against float64, and
the ceilings (copy bandwidth, bf16 GEMM) measured in the same run. Writes
JSON, a markdown table and a PNG plot.

    FSDPA_LIBRARY=.devbuild/libfsdpa.so python3 bench/compare_torch.py --out DIR
"""

import argparse
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
import timing  # noqa: E402

DEV = "cuda"
PREFILL_DIMS = [(64, 64), (72, 72), (80, 80), (96, 96), (112, 112), (128, 128), (160, 160),
                (192, 192), (256, 256), (288, 288), (512, 512), (96, 64), (192, 128), (576, 512)]
# FlexAttention compiles per shape (~10 s each): only the pairs it is the
# target for (96/64, 192/128).
FLEX_DIMS = {(96, 64, False), (192, 128, False)}


def ceilings():
    x = torch.empty(2 << 30, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    ms = timing.eager_ms(lambda: y.copy_(x), iters=10, warmup=2)
    copy_tbs = 2 * x.numel() / (ms * 1e-3) / 1e12
    del x, y
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=DEV)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=DEV)
    ms = timing.eager_ms(lambda: a @ b, iters=10, warmup=3)
    gemm = 2 * 8192**3 / (ms * 1e-3) / 1e12
    return {"copy_TBps": copy_tbs, "bf16_gemm_TFLOPs": gemm}


def reference_error(out, q, k, v, causal, heads=2, softcap=0.0, rows=1024):
    """||out - ref|| / ||ref|| over batch 0, the first heads and the last
    `rows` query rows, ref in float64 (causal: bottom-right, which is torch's
    top-left where Lq == Lk, the only causal rows here)."""
    group = q.shape[1] // k.shape[1]
    lq, lk = q.shape[2], k.shape[2]
    rows = min(rows, lq)
    qs = q[0, :heads, lq - rows:].double()
    ks = k[0, [h // group for h in range(heads)]].double()
    vs = v[0, [h // group for h in range(heads)]].double()
    s = qs @ ks.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        i = torch.arange(lq - rows, lq, device=DEV)[:, None]
        j = torch.arange(lk, device=DEV)[None, :]
        s = s.masked_fill(j > i + (lk - lq), float("-inf"))
    ref = torch.softmax(s, -1) @ vs
    got = out[0, :heads, lq - rows:].double()
    return ((got - ref).norm() / ref.norm()).item()


def run_row(shape, causal, args, flex_ok, v_from_k=False, softcap=0.0, repeat_kv=False,
            pad_rows=False):
    """One shape on every candidate. v_from_k: v is k[..., :Dv] (MLA);
    softcap: fsdpa's soft cap (torch's SDPA backends have none, so they are
    left out and fsdpa without the cap is timed beside it); repeat_kv: the
    torch backends get K/V repeated to Hq (efficient has no GQA); pad_rows:
    every row starts 16-byte aligned (D rounded up to 8 in storage, a view
    of the first D), else the tensors are contiguous."""
    b, hq, hkv, lq, lk, dqk, dv = shape
    flops = 4.0 * b * hq * lq * lk * (dqk + dv) / 2 * (0.5 if causal else 1.0)

    def tensor(*sizes, random=True):
        pitch = (sizes[-1] + 7) // 8 * 8 if pad_rows else sizes[-1]
        make = torch.randn if random else torch.empty
        return make(*sizes[:-1], pitch, dtype=torch.bfloat16, device=DEV)[..., :sizes[-1]]

    q = tensor(b, hq, lq, dqk)
    k = tensor(b, hkv, lk, dqk)
    v = k[..., :dv] if v_from_k else tensor(b, hkv, lk, dv)
    out = tensor(b, hq, lq, dv, random=False)
    row = {"B": b, "Hq": hq, "Hkv": hkv, "Lq": lq, "Lk": lk, "Dqk": dqk, "Dv": dv,
           "causal": causal, "v_from_k": v_from_k, "softcap": softcap, "pad_rows": pad_rows,
           "results": {}}
    # torch's is_causal is top-left; it equals bottom-right only when Lq == Lk.
    align = "top_left"

    def fsdpa_call(policy, cap=softcap):
        # softcap only when set: an A/B against a library from before it runs this script too.
        capped = {"softcap": cap} if cap else {}
        return lambda: fsdpa.attention(q, k, v, causal=causal, causal_align=align,
                                       policy=policy, out=out, **capped)

    tq, tk, tv = q, k, v
    if repeat_kv and hq != hkv:
        tk = k.repeat_interleave(hq // hkv, dim=1)
        tv = tk[..., :dv] if v_from_k else v.repeat_interleave(hq // hkv, dim=1)

    def sdpa_call(backend):
        def call():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal,
                                                      enable_gqa=tk.shape[1] != hq)
        return call

    candidates = [("fsdpa_fused", fsdpa_call("fused"), "fsdpa")]
    if not args.fsdpa_only:
        candidates.append(("fsdpa_unfused", fsdpa_call("unfused"), "fsdpa"))
    if softcap:
        candidates.append(("fsdpa_fused_nocap", fsdpa_call("fused", 0.0), "fsdpa"))
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]:
        if softcap or args.fsdpa_only or name in args.skip_backends:
            continue
        if name == "math" and b * hq * lq * lk * 2 > args.math_limit:
            continue
        candidates.append((name, sdpa_call(backend), "torch"))
    if flex_ok and (dqk, dv, causal) in FLEX_DIMS and not args.no_flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            compiled = torch.compile(flex_attention, dynamic=False)
            block_mask = None
            if causal:
                block_mask = create_block_mask(lambda b_, h_, i, j: j <= i, None, None, lq, lk,
                                               device=DEV)
            candidates.append(("flex", lambda: compiled(q, k, v, block_mask=block_mask,
                                                        enable_gqa=hq != hkv), "torch"))
        except Exception as e:  # noqa: BLE001
            row["results"]["flex"] = {"error": f"{type(e).__name__}: {e}"[:200]}
    for name, fn, kind in candidates:
        entry = {}
        try:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            result = fn()
            torch.cuda.synchronize()
            result = out if result is None or kind == "fsdpa" else result
            peak = torch.cuda.max_memory_allocated() - base
            if kind == "fsdpa":
                capped = {} if name == "fsdpa_fused_nocap" or not softcap else {"softcap": softcap}
                info = fsdpa.plan(q, k, v, causal=causal, causal_align=align,
                                  policy="unfused" if name == "fsdpa_unfused" else "fused", **capped)
                entry["kernel"] = info.kernel
                entry["path"] = info.path
                entry["bucket"] = f"{info.head_dim_qk_bucket}/{info.head_dim_v_bucket}"
                entry["pad_ratio"] = info.pad_ratio
                # fsdpa's workspace comes from cudaMallocAsync, outside torch's allocator.
                peak = info.workspace_bytes
            else:
                peak -= result.numel() * result.element_size()  # the output is not transient
            entry["transient_bytes"] = max(int(peak), 0)
            entry["error"] = reference_error(result, q, k, v, causal,
                                             softcap=0.0 if name == "fsdpa_fused_nocap"
                                             else softcap)
            slow = flops > 2e15  # > ~5 ms on anything here: fewer repeats
            ms = timing.eager_ms(fn, iters=3 if slow else args.reps,
                                 warmup=1 if slow else args.warmup)
            entry["ms"] = ms
            entry["TFLOPs"] = flops / (ms * 1e-3) / 1e12
        except Exception as e:  # noqa: BLE001
            entry = {"error_message": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
        row["results"][name] = entry
        torch.cuda.empty_cache()
    fused = row["results"].get("fsdpa_fused", {}).get("TFLOPs")
    row["ratios"] = {n: fused / r["TFLOPs"] for n, r in row["results"].items()
                     if fused and "TFLOPs" in r and n != "fsdpa_fused"}
    return row


def fmt(x, digits=0):
    return "–" if x is None else f"{x:.{digits}f}"


def markdown(report):
    c = report["ceilings"]
    lines = [f"# fsdpa prefill vs PyTorch on {report['gpu']}", "",
             f"Command: `{report['command']}`  ",
             f"torch {report['torch']}; ceilings in this run: copy {c['copy_TBps']:.2f} TB/s, "
             f"bf16 GEMM {c['bf16_gemm_TFLOPs']:.0f} TFLOP/s. bf16, TFLOP/s = "
             "4·B·H·Lq·Lk·(Dqk+Dv)/2 (causal: half) over the median time. "
             "Error: ‖out−ref‖/‖ref‖ against float64 (batch 0, 2 heads).", "",
             "| shape | causal | Dqk/Dv | fsdpa fused | bucket | fsdpa unfused | flash | efficient |"
             " cudnn | math | flex | ×flash | ×cudnn | ×efficient | ×flex | fused err |"
             " fused/unfused/flash transient MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        r = row["results"]
        tf = {n: r.get(n, {}).get("TFLOPs") for n in
              ["fsdpa_fused", "fsdpa_unfused", "flash", "efficient", "cudnn", "math", "flex"]}
        ratio = row["ratios"]
        mem = "/".join(fmt(r.get(n, {}).get("transient_bytes", None) and
                           r[n]["transient_bytes"] / 2**20, 0)
                       if "transient_bytes" in r.get(n, {}) else "–"
                       for n in ["fsdpa_fused", "fsdpa_unfused", "flash"])
        err = r.get("fsdpa_fused", {}).get("error")
        extra = (" v=k[:Dv]" if row.get("v_from_k") else "") + (
            " rows padded to 16 B" if row.get("pad_rows") else "") + (
            f" softcap {row['softcap']:g} (no cap: {fmt(r.get('fsdpa_fused_nocap', {}).get('TFLOPs'))})"
            if row.get("softcap") else "")
        lines.append(
            f"| B{row['B']} H{row['Hq']}/{row['Hkv']} L{row['Lq']}x{row['Lk']}{extra} | "
            f"{'yes' if row['causal'] else 'no'} | {row['Dqk']}/{row['Dv']} | "
            f"{fmt(tf['fsdpa_fused'])} | {r.get('fsdpa_fused', {}).get('bucket', '–')} | "
            + " | ".join(fmt(tf[n]) for n in ["fsdpa_unfused", "flash", "efficient", "cudnn",
                                               "math", "flex"])
            + f" | {fmt(ratio.get('flash'), 2)} | {fmt(ratio.get('cudnn'), 2)} | "
              f"{fmt(ratio.get('efficient'), 2)} | {fmt(ratio.get('flex'), 2)} | "
              f"{'–' if err is None else f'{err:.1e}'} | {mem} |")
    return "\n".join(lines) + "\n"


def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
    square = [r["Lq"] for r in report["rows"] if r["Lq"] == r["Lk"]]
    length = max(set(square), key=square.count) if square else 0
    for ax, causal in zip(axes, [False, True]):
        rows = [r for r in report["rows"] if r["causal"] == causal and r["Lq"] == r["Lk"] == length
                and not r.get("softcap")]
        labels = [f"{r['Dqk']}/{r['Dv']}" for r in rows]
        for name in ["fsdpa_fused", "fsdpa_unfused", "flash", "efficient", "cudnn", "math", "flex"]:
            ys = [r["results"].get(name, {}).get("TFLOPs", float("nan")) for r in rows]
            ax.plot(range(len(rows)), ys, marker="o", label=name)
        ax.set_xticks(range(len(rows)), labels, rotation=45)
        ax.set_title(f"L={length} bf16, {'causal' if causal else 'non-causal'}")
        ax.set_xlabel("Dqk/Dv")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("TFLOP/s")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--name", default="h200-prefill")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="D=64,128,256 and the soft cap row only")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--math-limit", type=float, default=4.5e9,
                    help="skip math when B*H*Lq*Lk*2 bytes of scores exceed this")
    ap.add_argument("--softcap-only", action="store_true",
                    help="the soft cap row alone (with and without the cap)")
    ap.add_argument("--large", action="store_true",
                    help="the head dims above 256 and the soft cap instead of the main table")
    ap.add_argument("--unaligned-only", action="store_true",
                    help="the rows that are not 16-byte aligned (D=59, 76, 90, 100, causal and "
                         "not) beside the same buckets' padded rows")
    ap.add_argument("--fsdpa-only", action="store_true",
                    help="fsdpa fused alone (A/B of two libraries, one run each)")
    ap.add_argument("--skip-backends", default="",
                    help="comma-separated torch backends to leave out (flash,efficient,cudnn,math)")
    ap.add_argument("--only-dqk", default="",
                    help="comma-separated Dqk values: keep only the rows of these head dims")
    args = ap.parse_args()
    args.skip_backends = set(filter(None, args.skip_backends.split(",")))
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "command": " ".join(["python3"] + sys.argv), "date": time.strftime("%Y-%m-%d"),
              "ceilings": ceilings(), "rows": []}
    print(f"ceilings: {report['ceilings']}", flush=True)
    dims = PREFILL_DIMS if not args.quick else [(64, 64), (128, 128), (256, 256)]
    # Non-causal first, then the long-context chunks, then causal: a run cut
    # short by its time limit keeps the rows that matter most.
    shapes = [((4, 16, 16, 4096, 4096, dqk, dv), False, {}) for dqk, dv in dims]
    shapes += [((1, 16, 8, 1024, 65536, d, d), False, {}) for d in (128, 256)]
    shapes += [((1, 16, 8, 1024, 131072, 256, 256), False, {})]
    shapes += [((4, 16, 16, 4096, 4096, dqk, dv), True, {}) for dqk, dv in dims]
    softcap_row = ((1, 16, 8, 4096, 4096, 256, 256), True, {"softcap": 50.0})  # gemma2-9b
    if args.quick:
        shapes += [softcap_row]
    if args.softcap_only:
        shapes = [softcap_row]
    if args.large:
        mla = {"v_from_k": True, "repeat_kv": True}
        gqa = {"repeat_kv": True}
        shapes = []
        for causal in (False, True):
            shapes += [((1, 16, 8, 8192, 8192, d, d), causal, gqa) for d in (288, 320, 384, 512)]
            shapes += [((1, 16, 1, 8192, 8192, 576, 512), causal, mla)]
            # 576/512 with v apart from k (the wide row; no model has it).
            shapes += [((1, 16, 8, 8192, 8192, 576, 512), causal, gqa)]
        # The chunk rows: non-causal (bottom-right causal at Lk >> Lq is ~all
        # of the work; torch's is_causal would be top-left there).
        for lk in (32768, 131072):
            shapes += [((1, 8, 1, 2048, lk, 288, 288), False, gqa),
                       ((1, 16, 8, 2048, lk, 512, 512), False, gqa),
                       ((1, 128, 1, 2048, lk, 576, 512), False, mla)]
        shapes += [softcap_row]
        # Rows that are not 16-byte aligned (contiguous bf16 at these D), and
        # the same bucket with padded rows beside them.
        for d in (59, 76, 90, 100):
            shapes += [((4, 16, 16, 4096, 4096, d, d), True, {}),
                       ((4, 16, 16, 4096, 4096, d, d), True, {"pad_rows": True})]
    if args.unaligned_only:
        shapes = [((4, 16, 16, 4096, 4096, d, d), causal, extra)
                  for causal in (True, False) for d in (59, 76, 90, 100)
                  for extra in ({}, {"pad_rows": True})]
    if args.only_dqk:
        keep = {int(d) for d in args.only_dqk.split(",")}
        shapes = [row for row in shapes if row[0][5] in keep]
    for shape, causal, extra in shapes:
        t0 = time.time()
        flex_ok = shape[3] == 4096 and not args.large and not args.fsdpa_only
        row = run_row(shape, causal, args, flex_ok=flex_ok, **extra)
        report["rows"].append(row)
        r = row["results"]
        print(f"{shape} causal={causal}: " + ", ".join(
            f"{n}={v.get('TFLOPs', float('nan')):.0f}" for n, v in r.items()) +
              f" ({time.time() - t0:.0f}s)", flush=True)
        with open(os.path.join(args.out, args.name + ".json"), "w") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(args.out, args.name + ".md"), "w") as f:
            f.write(markdown(report))
    try:
        plot(report, os.path.join(args.out, args.name + ".png"))
    except Exception as e:  # noqa: BLE001
        print(f"plot failed: {e}")
    print(markdown(report))


if __name__ == "__main__":
    main()
