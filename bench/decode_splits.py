"""Small decodes by key-split count: the data behind the decode planner's
split rule (src/cuda/decode/decode_config.h: kDecodeMinKeysPerSplit,
kDecodeMinKeysToSplit).

For B in {1, 4}, Hq=32 Hkv=8 D=128 bf16 Lq=1 and short key lengths, the GPU
time per call of a prepared call replayed from a CUDA graph (no host work
between launches) with the planner's split count and with
FSDPA_DECODE_SPLITS forcing 1, 2, 4, 8, 16 and 32, beside torch SDPA's
(enable_gqa) in the same graph-replay measure. Writes JSON (--out) and a
markdown table (--md).

    python3 bench/decode_splits.py --out bench/results/h200-decode-splits.json \\
        --md bench/results/h200-decode-splits.md
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

import fsdpa  # noqa: E402
from overhead import graph_us  # noqa: E402

FORCED = (1, 2, 4, 8, 16, 32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--md", type=Path)
    args = parser.parse_args()
    for path in (args.out, args.md):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.open("a").close()  # fail before the run, not after
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    saved = os.environ.pop("FSDPA_DECODE_SPLITS", None)
    with torch.inference_mode():
        for len_k in (256, 384, 512, 1024, 2048, 4096):
            for batch in (1, 4):
                q = torch.randn(batch, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(batch, 8, len_k, 128, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(batch, 8, len_k, 128, device="cuda", dtype=torch.bfloat16)
                planned = fsdpa.prepare(q, k, v)
                row = {"batch": batch, "len_k": len_k,
                       "planned_splits": planned.info.num_kv_splits,
                       "planned_us": graph_us(torch, planned), "forced_us": {}}
                for splits in FORCED:
                    os.environ["FSDPA_DECODE_SPLITS"] = str(splits)
                    forced = fsdpa.prepare(q, k, v)
                    row["forced_us"][forced.info.num_kv_splits] = graph_us(torch, forced)
                os.environ.pop("FSDPA_DECODE_SPLITS", None)
                row["sdpa_us"] = graph_us(torch, lambda: sdpa(q, k, v, enable_gqa=True))
                rows.append(row)
                print(row, flush=True)
    if saved is not None:
        os.environ["FSDPA_DECODE_SPLITS"] = saved
    command = " ".join(["python3", "bench/decode_splits.py", *sys.argv[1:]])
    if args.out:
        args.out.write_text(json.dumps({"command": command, "rows": rows}, indent=2) + "\n")
    counts = sorted({s for r in rows for s in r["forced_us"]})
    lines = [f"Command: `{command}`  ",
             "B x Hq32 Hkv8 D128 bf16 Lq=1: GPU microseconds per call, graph-replayed "
             "(100 calls per graph, median of 7 replays).\n",
             "| B | Lk | planned (splits) | " + " | ".join(f"{s} splits" for s in counts)
             + " | torch sdpa |",
             "|---|---|---|" + "---|" * len(counts) + "---|"]
    for r in rows:
        forced = " | ".join(f"{r['forced_us'][s]:.1f}" if s in r["forced_us"] else "-"
                            for s in counts)
        lines.append(f"| {r['batch']} | {r['len_k']} | {r['planned_us']:.1f} "
                     f"({r['planned_splits']}) | {forced} | {r['sdpa_us']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        args.md.write_text(text)


if __name__ == "__main__":
    main()
