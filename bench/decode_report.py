#!/usr/bin/env python3
"""The decode benchmark's report: the markdown table and the PNG plot of a
results document that bench/decode_bench.py wrote (no torch, no GPU).

decode_bench.py calls write() after measuring; run alone, this rewrites the
report of a saved JSON (for example one fetched from the GPU machine without
its .md and .png):

  /usr/bin/python3 bench/decode_report.py results/h200-decode.json \\
      --md results/h200-decode.md --png results/h200-decode.png

With several JSONs and --out it merges them into one document first (rows
in the order given, each backend's share against the median of their copy
ceilings): the report of a table whose rows ran in separate processes
(bench/device.sh, DECODE_ROW_PROCESSES=1).
"""
import argparse
import json

import report_plot


def cell(r, key):
    """TB/s (graph time/eager time in us); "-" and a dagger where no graph."""
    x = r.get(key, {})
    if "tb_s" not in x:
        return "no kernel"
    if x["timing"] == "graph":
        return f"{x['tb_s']:.2f} ({x['ms']*1e3:.0f}/{x['eager_ms']*1e3:.0f})"
    return f"{x['tb_s']:.2f} (-/{x['eager_ms']*1e3:.0f})†"


def table(doc):
    """The markdown table of a results document."""
    t = doc["timing"]
    graph, math_graph = t["graph"], t["math_graph"]
    lines = [f"GPU {doc['gpu']}, torch {doc['torch']}, copy ceiling {doc['copy_ceiling_tb_s']:.2f} TB/s "
             "(read+write), bf16, Lq=1",
             "", "| shape | Dqk/Dv | fsdpa TB/s (graph/eager us) | of ceiling | splits | workspace | err | flash | cudnn | math | vs cudnn |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if "fsdpa" not in r:
            lines.append(f"| {r.get('row')} | failed: {r.get('error', '')[:80]} |")
            continue
        f_ = r["fsdpa"]
        c_ = r.get("cudnn", {})
        vs = "-"
        if "ms" in c_:
            vs = f"{c_['ms'] / f_['ms']:.2f}x" + ("" if c_["timing"] == f_["timing"] else "†")
        extra = f", {f_['tflop_s']:.0f} TFLOP/s" if r["v_aliases_k"] else ""
        lines.append(f"| B={r['B']} Hq={r['Hq']} Hkv={r['Hkv']} Lk={r['Lk']} | {r['Dqk']}/{r['Dv']} | "
                     f"{cell(r, 'fsdpa')}{extra} | {f_['ceiling_fraction']*100:.0f}% | {f_['splits']} | "
                     f"{f_['workspace_bytes']} | {f_['err']:.1e} | {cell(r, 'flash')} | {cell(r, 'cudnn')} | "
                     f"{cell(r, 'math')} | {vs} |")
    lines += ["", f"Each cell: TB/s from the graph time (graph time/eager time, us). Graph: per call, the median "
              f"of {graph['replays']} replays of a CUDA graph of {graph['calls']} calls over the rotated input "
              f"sets (math: {math_graph['replays']} replays of {math_graph['calls']} calls); eager: the median of "
              f"{t['eager_iters']} calls (math: {t['math_eager_iters']}) each timed alone between CUDA events, "
              "host launch gaps included (bench/timing.py). †: the calls could not be captured, so the time is "
              "eager (graph_error in the JSON says why); a ratio marked † compares an eager time with a graph "
              "time.",
              ""]
    if isinstance(doc["command"], list):  # merged: one process per row
        ceilings = ", ".join(f"{c:.2f}" for c in doc["copy_ceilings_tb_s"])
        made_by = f" Made by `{doc['made_by']}`." if doc.get("made_by") else ""
        lines.append(f"One process per row (copy ceilings {ceilings} TB/s; the median above).{made_by} "
                     "Commands: " + "; ".join(f"`{c}`" for c in doc["command"]))
    else:
        lines.append(f"Command: `{doc['command']}`")
    return "\n".join(lines) + "\n"


def plot(doc, path):
    """Unique K/V TB/s per row for every backend, the copy ceiling as a line."""
    ceiling = doc["copy_ceiling_tb_s"]
    rows = [r for r in doc["rows"] if "fsdpa" in r]
    report_plot.grouped_bars(
        path, [f"B{r['B']} {r['Hq']}/{r['Hkv']}\nLk{r['Lk'] // 1024}k {r['Dqk']}/{r['Dv']}" for r in rows],
        [(name, [r.get(name, {}).get("tb_s", 0) for r in rows])
         for name in ["fsdpa", "flash", "cudnn", "math"]],
        (ceiling, f"copy ceiling {ceiling:.2f}"), "unique K/V TB/s (graph time)",
        f"Decode, bf16, Lq=1, {doc['gpu']} (0 = no kernel)")


def write(doc, md_path, png_path):
    text = table(doc)
    with open(md_path, "w") as f:
        f.write(text)
    print(text)
    plot(doc, png_path)


def merge(docs, made_by=None):
    """One document of the rows of `docs`, shares against their median ceiling;
    `made_by`: the command that ran the processes."""
    ceilings = sorted(d["copy_ceiling_tb_s"] for d in docs)
    ceiling = ceilings[len(ceilings) // 2]
    rows = [r for d in docs for r in d["rows"]]
    for r in rows:
        for x in r.values():
            if isinstance(x, dict) and "tb_s" in x and "ceiling_fraction" in x:
                x["ceiling_fraction"] = x["tb_s"] / ceiling
    return {**docs[0], "copy_ceiling_tb_s": ceiling, "copy_ceilings_tb_s": ceilings,
            "command": [d["command"] for d in docs], "made_by": made_by, "rows": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+", help="results documents of decode_bench.py")
    ap.add_argument("--out", help="write the merged document here (several JSONs)")
    ap.add_argument("--md", required=True)
    ap.add_argument("--png", required=True)
    ap.add_argument("--made-by", help="the command that ran the processes (merged documents)")
    args = ap.parse_args()
    docs = []
    for path in args.json:
        with open(path) as f:
            docs.append(json.load(f))
    if len(docs) > 1 and not args.out:
        ap.error("several JSONs need --out for the merged document")
    doc = merge(docs, args.made_by) if len(docs) > 1 else docs[0]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    write(doc, args.md, args.png)


if __name__ == "__main__":
    main()
