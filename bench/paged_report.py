#!/usr/bin/env python3
"""The paged benchmark's report: the markdown table and the PNG plot of a
results document that bench/paged_bench.py wrote (no torch, no GPU).

paged_bench.py calls write() after measuring; run alone, this rewrites the
report of a saved JSON:

  /usr/bin/python3 bench/paged_report.py results/h200-paged.json \\
      --md results/h200-paged.md --png results/h200-paged.png
"""
import argparse
import json

import report_plot

# The plot's columns: (results key, legend).
COLUMNS = [("dense", "dense"), ("dense_lens", "dense + seq_lens_k"),
           ("paged16", "paged 16"), ("paged64", "paged 64"), ("cudnn", "torch cudnn"),
           ("flash_paged256", "flash paged 256")]


def markdown(doc):
    """The markdown table of a results document."""
    results, ceiling = doc["rows"], doc["read_ceiling_tbs"]
    command, gpu = doc["command"], doc["gpu"]
    lines = [f"# Paged and ragged decode on the {gpu} (bf16)", "",
             f"Command: `{command}`  ", f"Read ceiling measured in the run: {ceiling:.2f} TB/s. "
             "Times: CUDA-graph median per call. bound = 6 us + unique K/V bytes / (0.9 x ceiling).",
             "Paged columns: time (over dense; over the dense cache with seq_lens_k, whose "
             "split plan is the paged one's; over the dense BSHD cache with seq_lens_k, whose "
             "rows lie as a page's do). Paged16 in order: the pages in the pool's order.",
             "", "| row | unique K/V | bound us | dense us (TB/s) | dense + seq_lens_k us | "
             "dense BSHD + seq_lens_k us | "
             "paged16 us (x dense) | paged64 us (x dense) | paged16 in order us | cudnn us | "
             "flash paged256 us | err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        def cell(label, ratio=False):
            e = r.get(label)
            if not e or "ms" not in e:
                return "-" if not e else "n/a"
            s = f"{e['ms'] * 1e3:.1f}"
            if ratio and "over_dense" in e:
                s += (f" ({e['over_dense']:.3f}; {e['over_dense_lens']:.3f}; "
                      f"{e['over_dense_bshd']:.3f})")
            elif label == "dense":
                s += f" ({e['tb_s']:.2f})"
            return s + ("" if e["within_bound"] else " *")
        errs = max(r[l]["err"] for l in ("dense", "dense_lens", "dense_bshd", "paged16", "paged64",
                                         "paged16_in_order")
                   if "err" in r.get(l, {}))
        lines.append(f"| {r['name']} (B{r['B']} Hq{r['Hq']} Hkv{r['Hkv']} Lq{r['Lq']} "
                     f"Lk{r['Lk']}{' mixed' if r['mixed'] else ''} D{r['Dqk']}/{r['Dv']}) | "
                     f"{r['unique_kv_bytes'] / 1e9:.3f} GB | {r['bound_ms'] * 1e3:.1f} | "
                     f"{cell('dense')} | {cell('dense_lens')} | {cell('dense_bshd')} | "
                     f"{cell('paged16', True)} | "
                     f"{cell('paged64', True)} | {cell('paged16_in_order')} | "
                     f"{cell('cudnn')} | {cell('flash_paged256')} | {errs:.1e} |")
    lines += ["", "`*`: above the bound. fsdpa kernels: " + ", ".join(
        sorted({f"{r[l]['kernel']} ({l}, {r[l]['splits']} splits)" for r in results
                for l in ("dense", "dense_lens", "paged16") if "kernel" in r.get(l, {})}))]
    return "\n".join(lines) + "\n"


def plot(doc, path):
    """Each row's times over its bound (6 us + unique bytes / 0.9 x ceiling),
    per column; 1 is the bound."""
    rows = doc["rows"]
    report_plot.grouped_bars(
        path, [f"{r['name']}\nB{r['B']} Hq{r['Hq']}/{r['Hkv']} Lq{r['Lq']}" for r in rows],
        [(name, [r[key]["ms"] / r["bound_ms"] if "ms" in r.get(key, {}) else 0 for r in rows])
         for key, name in COLUMNS if any("ms" in r.get(key, {}) for r in rows)],
        (1.0, "bound"), "time / bound (graph time)",
        f"Paged and ragged decode, bf16, {doc['gpu']} (0 = not run), "
        f"read ceiling {doc['read_ceiling_tbs']:.2f} TB/s", inches_per_row=1.2)


def write(doc, md_path, png_path):
    text = markdown(doc)
    with open(md_path, "w") as f:
        f.write(text)
    print(text)
    if png_path:
        plot(doc, png_path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", help="a results document of paged_bench.py")
    ap.add_argument("--md", required=True)
    ap.add_argument("--png")
    args = ap.parse_args()
    with open(args.json) as f:
        write(json.load(f), args.md, args.png)


if __name__ == "__main__":
    main()
