#!/usr/bin/env python3
"""Merges an A/B of fsdpa libraries run in one device call: compare_torch.py
--fsdpa-only documents named <variant>-<repeat>.json, alternating variants.
Prints, per row, each variant's best TFLOP/s over its repeats and the ratio
of the second variant to the first.

    python3 bench/ab_report.py base-1.json tree-1.json base-2.json tree-2.json
"""

import collections
import json
import os
import sys


def main():
    best = collections.defaultdict(dict)  # row key -> variant -> TFLOP/s
    variants = []
    for path in sys.argv[1:]:
        variant = os.path.basename(path).rsplit("-", 1)[0]
        if variant not in variants:
            variants.append(variant)
        with open(path) as f:
            report = json.load(f)
        for row in report["rows"]:
            key = (f"B{row['B']} H{row['Hq']}/{row['Hkv']} L{row['Lq']}x{row['Lk']} "
                   f"{row['Dqk']}/{row['Dv']}{' causal' if row['causal'] else ''}")
            tflops = row["results"].get("fsdpa_fused", {}).get("TFLOPs")
            if tflops is not None:
                best[key][variant] = max(best[key].get(variant, 0.0), tflops)
    if len(variants) < 2:
        sys.exit("ab_report.py: need two variants")
    a, b = variants[:2]
    print(f"| row | {a} | {b} | {b}/{a} |\n|---|---|---|---|")
    worst = None
    for key, by in best.items():
        if a in by and b in by:
            ratio = by[b] / by[a]
            worst = ratio if worst is None else min(worst, ratio)
            print(f"| {key} | {by[a]:.0f} | {by[b]:.0f} | {ratio:.3f} |")
    print(f"worst {b}/{a}: {worst:.3f}" if worst is not None else "no common rows")


if __name__ == "__main__":
    main()
