#!/usr/bin/env python3
"""Paged and ragged decode: fsdpa on a paged KV cache (page 16 and 64, a
shuffled block table) against fsdpa on the dense cache of the very same keys,
with the read ceiling measured in the same run; torch's flash kernel on its
own paged cache (flash_attn_with_kvcache) where the machine has the
flash_attn package, and torch cudnn SDPA on the dense, equal-length rows.

Times are CUDA-graph medians per call (bench/timing.py), input sets rotated
when the keys would fit in L2. Per row: time, unique K/V bytes per second,
the fraction of the read ceiling, the bound 6 us + bytes / (0.9 x ceiling)
(issue: decode at the read ceiling), paged over dense, and the error against
a float64 reference of the first sequences. Rows of equal lengths also time
the dense cache with seq_lens_k (as every paged call passes it): the plan is
then the paged one's, so paged over that isolates the gather's own cost from
the split count per-sequence lengths get. Every row also times the same keys
stored [B, Lk, Hkv, D] with seq_lens_k, which is how a page holds its rows:
paged over that is the block table's own cost, and that over the dense cache
the layout's.

  FSDPA_LIBRARY=build/libfsdpa.so python3 bench/paged_bench.py --out paged.json --md paged.md \\
      --png paged.png

The report (.md, .png) comes from paged_report.py, which also rewrites it
from a saved JSON.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import fsdpa  # noqa: E402
import paged_report  # noqa: E402
import timing  # noqa: E402

GRAPH = {"calls": 20, "replays": 10}

# (name, B, Hq, Hkv, Lq, lengths, Dqk, Dv, v aliases k); lengths: one int
# (every sequence) or "mixed" (64 sequences, 100..32768, log-uniform).
ROWS = [
    ("b1 d128", 1, 32, 8, 1, 32768, 128, 128, False),
    ("b1 d128 long", 1, 32, 8, 1, 131072, 128, 128, False),
    ("b16 d64", 16, 32, 8, 1, 4096, 64, 64, False),
    ("b4 d128 lq8", 4, 32, 8, 8, 8192, 128, 128, False),
    ("paligemma2 d288", 2, 8, 1, 1, 32768, 288, 288, False),
    ("serving mixed d128", 64, 32, 8, 1, "mixed", 128, 128, False),
    ("mla b1", 1, 128, 1, 1, 32768, 576, 512, True),
    ("mla b64", 64, 16, 1, 1, 4096, 576, 512, True),
]
PAGES = [16, 64]


def read_ceiling_tbs():
    """A read-only stream: the sum of 4 GiB of bf16 (the device's read rate)."""
    x = torch.empty(2 * 1024**3, dtype=torch.bfloat16, device="cuda").normal_()
    ms = timing.eager_ms(lambda: torch.sum(x, dtype=torch.float32), iters=20)
    return x.numel() * 2 / ms / 1e9


def lengths_of(spec, batch, generator):
    if spec == "mixed":
        u = torch.rand(batch, generator=generator, dtype=torch.float64)
        lens = torch.exp(math.log(100) + u * (math.log(32768) - math.log(100))).round().long()
        lens[0] = 32768
        return lens.tolist()
    return [spec] * batch


def reference(q, k, v, lens, scale, rows=2):
    """float64 attention of the first `rows` sequences on their own keys."""
    outs = []
    Hq, Hkv = q.shape[1], k.shape[1]
    for b in range(min(rows, q.shape[0])):
        n = lens[b]
        kb = k[b, :, :n].double().repeat_interleave(Hq // Hkv, dim=0)
        vb = v[b, :, :n].double().repeat_interleave(Hq // Hkv, dim=0)
        s = torch.matmul(q[b].double(), kb.transpose(-1, -2)) * scale
        # bottom-right causal for Lq > 1 (speculative rows)
        Lq = q.shape[2]
        i = torch.arange(Lq, device=q.device)[:, None]
        j = torch.arange(n, device=q.device)[None, :]
        s = s.masked_fill(j > i + n - Lq, float("-inf"))
        outs.append(torch.matmul(torch.softmax(s, dim=-1), vb))
    return torch.stack(outs)


def paged_copy(k, v, lens, page, generator, shuffled=True):
    """The keys of each sequence in pages [pages, page, Hkv, D]: in shuffled
    slots, or (shuffled=False) in the pool's order, sequence after sequence."""
    B, Hkv, Lk = k.shape[:3]
    max_pages = -(-Lk // page)
    used = [-(-n // page) for n in lens]
    order = (torch.randperm(sum(used), generator=generator).tolist() if shuffled
             else list(range(sum(used))))
    k_pages = torch.zeros(sum(used), page, Hkv, k.shape[3], dtype=k.dtype, device=k.device)
    v_pages = None if v is None else torch.zeros(sum(used), page, Hkv, v.shape[3], dtype=v.dtype,
                                                 device=v.device)
    table = torch.zeros(B, max_pages, dtype=torch.int32)
    at = 0
    for b in range(B):
        for p in range(used[b]):
            slot = order[at]
            at += 1
            table[b, p] = slot
            rows = slice(p * page, min((p + 1) * page, lens[b]))
            n = rows.stop - rows.start
            k_pages[slot, :n] = k[b, :, rows].transpose(0, 1)
            if v_pages is not None:
                v_pages[slot, :n] = v[b, :, rows].transpose(0, 1)
    return k_pages, v_pages, table.to(k.device)


def timed(fns):
    eager = timing.eager_ms(lambda: [f() for f in fns[:1]], iters=20)
    ms, why = timing.graph_ms(fns, **GRAPH)
    return (ms, "graph") if ms is not None else (eager, f"eager ({why})")


def bench_row(row, ceiling, args, generator):
    name, B, Hq, Hkv, Lq, spec, dq, dv, alias = row
    lens = lengths_of(spec, B, generator)
    Lk = max(lens)
    ragged = len(set(lens)) > 1
    unique = sum(lens) * Hkv * (dq if alias else dq + dv) * 2
    bound_ms = 6e-3 + unique / (0.9 * ceiling) / 1e9
    q = torch.randn(B, Hq, Lq, dq, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(B, Hkv, Lk, dq, dtype=torch.bfloat16, device="cuda")
    v = k[..., :dv] if alias else torch.randn(B, Hkv, Lk, dv, dtype=torch.bfloat16, device="cuda")
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    scale = 1 / math.sqrt(dq)
    causal = Lq > 1
    ref = reference(q, k, v, lens, scale)
    result = {"name": name, "B": B, "Hq": Hq, "Hkv": Hkv, "Lq": Lq, "Lk": Lk, "Dqk": dq, "Dv": dv,
              "mixed": ragged, "unique_kv_bytes": unique, "bound_ms": bound_ms}

    def record(label, ms, how, out, info=None):
        entry = {"ms": ms, "timing": how, "tb_s": unique / ms / 1e9,
                 "ceiling_fraction": unique / ms / 1e9 / ceiling,
                 "within_bound": ms <= bound_ms,
                 "err": float((out[:ref.shape[0]].double() - ref).norm() / ref.norm())}
        if info is not None:
            entry.update(kernel=info.kernel, splits=int(info.num_kv_splits))
        result[label] = entry

    def run_fsdpa(label, k_in, v_in, **call):
        """Times fsdpa on these keys (causal for Lq > 1, fused) and records it."""
        out = torch.empty(B, Hq, Lq, dv, dtype=torch.bfloat16, device="cuda")
        prepared = fsdpa.prepare(q, k_in, v_in, out=out, causal=causal, policy="fused", **call)
        ms, how = timed([prepared])
        prepared()
        record(label, ms, how, out, prepared.info)
        return ms

    run_fsdpa("dense", k, v, seq_lens_k=seq_lens if ragged else None)
    if not ragged:
        run_fsdpa("dense_lens", k, v, seq_lens_k=seq_lens)
    # The same keys stored [B, Lk, Hkv, D]: a page's own layout (a kv head's
    # rows Hkv x D apart) without the pages, so paged over this is the block
    # table's cost alone and this over dense + lens the layout's.
    k_bshd = k.transpose(1, 2).contiguous().transpose(1, 2)
    v_bshd = k_bshd[..., :dv] if alias else v.transpose(1, 2).contiguous().transpose(1, 2)
    run_fsdpa("dense_bshd", k_bshd, v_bshd, seq_lens_k=seq_lens)
    del k_bshd, v_bshd
    # Page 16 also with the pages in the pool's order: paged over that is the
    # cost of the table's scatter (pages anywhere in the pool) alone.
    for page, shuffled in [(p, True) for p in PAGES] + [(PAGES[0], False)]:
        k_pages, v_pages, table = paged_copy(k, None if alias else v, lens, page, generator,
                                             shuffled)
        label = f"paged{page}" if shuffled else f"paged{page}_in_order"
        ms = run_fsdpa(label, k_pages, k_pages[..., :dv] if alias else v_pages,
                       block_table=table, seq_lens_k=seq_lens)
        if shuffled:
            result[label]["over_dense"] = ms / result["dense"]["ms"]
            result[label]["over_dense_lens"] = ms / result.get("dense_lens", result["dense"])["ms"]
            result[label]["over_dense_bshd"] = ms / result["dense_bshd"]["ms"]
        del k_pages, v_pages
    if args.fsdpa_only:
        return result
    if not ragged and not alias and Lq == 1:  # torch SDPA has no per-sequence lengths
        try:
            def call():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, scale=scale,
                                                          enable_gqa=Hq != Hkv)
            o = call()
            ms, how = timed([call])
            record("cudnn", ms, how, o)
        except Exception as e:  # noqa: BLE001
            result["cudnn"] = {"error": str(e).splitlines()[0][:160]}
    try:
        from flash_attn import flash_attn_with_kvcache  # noqa: PLC0415
        k_pages, v_pages, table = paged_copy(k, v.contiguous(), lens, 256, generator)
        qf = q.transpose(1, 2).contiguous()

        def flash():
            return flash_attn_with_kvcache(qf, k_pages, v_pages, cache_seqlens=seq_lens,
                                           block_table=table, causal=causal)
        o = flash().transpose(1, 2)
        ms, how = timed([flash])
        record("flash_paged256", ms, how, o)
    except Exception as e:  # noqa: BLE001
        result["flash_paged256"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:160]}
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="h200-paged.json")
    ap.add_argument("--md", default="h200-paged.md")
    ap.add_argument("--png", help="plot of each row's times over its bound (none without)")
    ap.add_argument("--rows", default="", help="comma-separated indices into ROWS (default: all)")
    ap.add_argument("--fsdpa-only", action="store_true", help="skip torch's backends")
    args = ap.parse_args()
    generator = torch.Generator().manual_seed(0)
    ceiling = read_ceiling_tbs()
    rows = [ROWS[int(i)] for i in args.rows.split(",")] if args.rows else ROWS
    results = []
    with torch.inference_mode():
        for row in rows:
            results.append(bench_row(row, ceiling, args, generator))
            r = results[-1]
            lens_us = (f", dense+lens {r['dense_lens']['ms'] * 1e3:.1f}" if "dense_lens" in r
                       else "")
            print(f"{r['name']}: dense {r['dense']['ms'] * 1e3:.1f} us{lens_us}, bshd+lens "
                  f"{r['dense_bshd']['ms'] * 1e3:.1f}, paged16 "
                  f"{r['paged16']['ms'] * 1e3:.1f}, paged64 {r['paged64']['ms'] * 1e3:.1f}, "
                  f"paged16 in order {r['paged16_in_order']['ms'] * 1e3:.1f} "
                  f"(bound {r['bound_ms'] * 1e3:.1f})", flush=True)
            torch.cuda.empty_cache()
    command = "bench/paged_bench.py " + " ".join(sys.argv[1:])
    doc = {"gpu": torch.cuda.get_device_name(), "read_ceiling_tbs": ceiling, "command": command,
           "rows": results}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    paged_report.write(doc, args.md, args.png)


if __name__ == "__main__":
    main()
