#!/usr/bin/env python3
"""Compares the PTX of CUDA sources in the working tree with a git revision's.

For refactors checked without a GPU: a kernel whose PTX is unchanged needs no
new GPU run. Each file is compiled to PTX (nvcc -ptx, one virtual
architecture) in both trees; register names are renumbered in order of first
use within each kernel, `.reg` declarations dropped and the hash nvcc puts in
anonymous-namespace names removed, so that what remains differs only where
the code does. A file that differs gets a count of changed blocks and of
those within --near lines of a product or an asynchronous copy (mma.sync,
ldmatrix, wgmma, cp.async), the hot code of every kernel here. A file that differs is compared kernel by
kernel (.entry), each differing kernel named.

    python3 scripts/ptx_diff.py [--base REV] [--arch 90a] [-D NAME=VALUE ...] FILE...

FILE: sources relative to the repository root (an instance file, or a .cu
that includes the kernels). -D adds a macro in both trees, e.g.
FSDPA_BUILT_DECODE_576x512=1 for a file whose kernels CMake's bucket
macros select. Exit status 1 when any file differs or fails to compile.
"""

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGISTER = re.compile(r"%(?:rd|rs|r|p|fd|f|hh|h)\d+\b")
# An anonymous namespace's name carries hashes of the file's path and text.
ANONYMOUS_HASH = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_|_cu_[0-9a-f]{8}_\d+")
HOT = ("mma.sync", "ldmatrix", "wgmma", "cp.async")


def ptx(tree, source, arch, defines):
    with tempfile.NamedTemporaryFile(suffix=".ptx", delete=False) as out:
        path = out.name
    command = ["nvcc", "-O3", "-DNDEBUG", "-std=c++20", "--expt-relaxed-constexpr",
               f"--generate-code=arch=compute_{arch},code=compute_{arch}",
               f"-I{tree}/include", f"-I{tree}/src", "-DFSDPA_WITH_CUDA=1",
               "-DFSDPA_WGMMA_KERNELS=1", *[f"-D{d}" for d in defines],
               "-ptx", os.path.join(tree, source), "-o", path]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(path)
        lines = result.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else "nvcc failed")
    with open(path) as f:
        text = f.read()
    os.unlink(path)
    return text


def normalized(text):
    lines, names, counts = [], {}, {}

    def rename(match):
        name = match.group(0)
        if name not in names:
            prefix = re.match(r"%[a-z]+", name).group(0)
            counts[prefix] = counts.get(prefix, 0) + 1
            names[name] = f"{prefix}_{counts[prefix]}"
        return names[name]

    for line in text.splitlines():
        if ".entry" in line:
            names, counts = {}, {}
        if line.strip().startswith(".reg"):
            continue
        lines.append(REGISTER.sub(rename, ANONYMOUS_HASH.sub("_anonymous_", line)))
    return lines


def kernels(lines):
    """The lines of each .entry (by its name; the text before the first and
    the functions outside any kernel as "(rest)")."""
    bodies, name = {"(rest)": []}, "(rest)"
    for line in lines:
        entry = re.search(r"\.entry\s+([\w$]+)", line)
        if entry:
            name = entry.group(1)
            bodies[name] = []
        elif re.match(r"\s*\.(visible|weak|extern)?\s*\.func\b", line):
            name = "(rest)"
        bodies[name].append(line)
    return bodies


def compare(before, after, near):
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    blocks = hot = 0
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag == "equal":
            continue
        blocks += 1
        context = "\n".join(before[max(0, i1 - near):i2 + near])
        hot += any(word in context for word in HOT)
    return blocks, hot


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--base", default="HEAD", help="git revision to compare with [HEAD]")
    parser.add_argument("--arch", default="90a", help="virtual architecture [90a]")
    parser.add_argument("-D", dest="defines", action="append", default=[])
    parser.add_argument("--near", type=int, default=40,
                        help="lines around a changed block that count as its neighbourhood [40]")
    args = parser.parse_args()
    status = 0
    with tempfile.TemporaryDirectory() as base_tree:
        archive = subprocess.run(["git", "-C", ROOT, "archive", args.base], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", base_tree], input=archive, check=True)
        for source in args.files:
            try:
                before = normalized(ptx(base_tree, source, args.arch, args.defines))
                after = normalized(ptx(ROOT, source, args.arch, args.defines))
            except RuntimeError as error:
                print(f"{source}: does not compile: {error}")
                status = 1
                continue
            if before == after:
                print(f"{source}: identical (sm_{args.arch})")
                continue
            # Kernel by kernel: a file of many instances differs in a few, and
            # one difflib pass over the whole file takes minutes.
            kernels_before, kernels_after = kernels(before), kernels(after)
            same = sum(kernels_before.get(name) == body for name, body in kernels_after.items())
            print(f"{source}: differs (sm_{args.arch}): {same} of {len(kernels_after)} kernels "
                  f"identical")
            for name in sorted(set(kernels_before) | set(kernels_after)):
                if name not in kernels_after or name not in kernels_before:
                    print(f"  {name}: only {'before' if name in kernels_before else 'after'}")
                elif kernels_before[name] != kernels_after[name]:
                    blocks, hot = compare(kernels_before[name], kernels_after[name], args.near)
                    print(f"  {name}: {blocks} changed blocks, {hot} within {args.near} lines "
                          f"of a product or an asynchronous copy")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
