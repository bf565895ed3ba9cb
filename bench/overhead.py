"""The cost of one call, host side: fsdpa.attention() (the fast path),
torch.ops.fsdpa.attention, a prepared call and torch's SDPA on the same CUDA
decode tensors, and fsdpa.attention() against a prepared call on the CPU.

A call's cost is the wall time of `calls` back-to-back calls (then one
synchronize) over `calls`, on shapes whose kernel takes less than the call
itself (so the number is the host's launch path, not the GPU's work); the
median of `repeats` such loops. The "gpu:" rows are the GPU's own time per
call (the calls replayed from a CUDA graph): a row above them that is not
larger timed the GPU, not the host. Writes JSON (--out) and prints a table.

    python3 bench/overhead.py --out bench/results/h200-overhead.json
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import numpy as np  # noqa: E402

import fsdpa  # noqa: E402


def per_call_us(fn, calls=2000, repeats=7, sync=lambda: None):
    return interleaved_us({"": fn}, calls, repeats, sync)[""]


def interleaved_us(fns, calls=2000, repeats=7, sync=lambda: None):
    """Microseconds per call of each of `fns` (a name -> function dict): the
    median over `repeats` rounds, each round timing one loop of `calls` calls
    of every function in turn, so that every row sees the same host
    conditions (the host's speed drifted by up to 1.5x between rows measured
    one after another: bench/NOTES.md, session 20)."""
    for fn in fns.values():
        for _ in range(50):
            fn()
    sync()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def cuda_rows(torch):
    import fsdpa.torch as ft  # noqa: PLC0415

    shape = dict(batch=1, heads_q=32, heads_kv=8, len_k=512, dim=128)
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, 512, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 8, 512, 128, device="cuda", dtype=torch.bfloat16)
    prepared = fsdpa.prepare(q, k, v)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sync = torch.cuda.synchronize
    from fsdpa import _api, _arrays, _capi  # noqa: PLC0415

    native = _capi.torch_native()  # the compiled torch binding, or None
    with_native = _capi._native_state

    def python_path():
        """fsdpa.attention with the binding set aside (two attribute writes more)."""
        _capi._native_state = (None,)
        try:
            return fsdpa.attention(q, k, v)
        finally:
            _capi._native_state = with_native

    with torch.inference_mode():
        calls = {"fsdpa.attention": lambda: fsdpa.attention(q, k, v)}
        if native is not None:
            calls["fsdpa.attention (Python path)"] = python_path
        rows = interleaved_us({
            **calls,
            "fsdpa.torch.attention (eager)": lambda: ft.attention(q, k, v),
            "torch.ops.fsdpa.attention": lambda: torch.ops.fsdpa.attention(
                q, k, v, None, None, None, False, "bottom_right", None, 0.0, None, False,
                "bhsd"),
            "prepared": prepared,
            "torch sdpa (enable_gqa)": lambda: sdpa(q, k, v, enable_gqa=True),
        }, sync=sync)
        # Where a fast-path call's time goes: each piece alone, same tensors.
        _api._plans.clear()
        python_path()
        entry = next(iter(_api._plans.values()))
        out_spare = torch.empty((1, 32, 1, 128), dtype=q.dtype, device="cuda")
        # The entry's layout with this call's data, as fsdpa_attention and
        # fsdpa_run take it.
        block = _api._Block.from_buffer_copy(entry.block)
        words = _api._Words.from_buffer(block)
        for name, value in zip(("q", "k", "v", "out"), (q.data_ptr(), k.data_ptr(),
                                                        v.data_ptr(), out_spare.data_ptr())):
            words[_api._DATA[name] // 8] = value
        _, plan, workspace_bytes = entry.planned
        workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device="cuda")
        stream = _arrays.stream_of(q)
        lib = _capi.library()
        options = _api.ctypes.byref(entry.options)
        pieces = {
            "piece: key of q, k, v": lambda: [(a.shape, a.stride(), a.dtype, a.is_cpu, a.is_cuda,
                                               a.get_device(), a.data_ptr() & 15)
                                              for a in (q, k, v)],
            "piece: environment": _capi.environment,
            "piece: torch.empty_like out": lambda: torch.empty_like(q),
            "piece: torch.empty out": lambda: torch.empty((1, 32, 1, 128), dtype=q.dtype,
                                                          device=q.device),
            "piece: torch.empty workspace": lambda: torch.empty(workspace_bytes,
                                                                dtype=torch.uint8,
                                                                device=q.device),
            "piece: stream": entry.stream,
            "piece: capturing": entry.capturing,
            "piece: fsdpa_attention (ctypes + library)": lambda: lib.fsdpa_attention(
                _api.ctypes.addressof(block), options, stream),
            "piece: fsdpa_attention_data (ctypes + library; the fast path's)": lambda: (
                lib.fsdpa_attention_data(entry.layout, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                         out_spare.data_ptr(), None, entry.options_address,
                                         stream)),
            "piece: fsdpa_run (ctypes + library)": lambda: lib.fsdpa_run(
                plan.handle, _api.ctypes.addressof(block), workspace.data_ptr(),
                workspace_bytes, stream),
            "piece: entry.run": lambda: entry.run(q, [q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                                      0, 0, 0, 0, 0, 0], None),
        }
        if native is not None:
            pieces["piece: the binding's attention alone"] = lambda: native.attention(
                q, k, v, entry.options_address, False, None, None, None, None, None)
        for name, piece in pieces.items():
            rows[name] = per_call_us(piece, sync=sync)
        # The GPU's own time per call: the calls replayed from a CUDA graph
        # (no host work between launches). Where it exceeds a row above, that
        # row timed the GPU, not the host.
        for name, fn in (("gpu: fsdpa (graph replay)", prepared),
                         ("gpu: torch sdpa (graph replay)",
                          lambda: sdpa(q, k, v, enable_gqa=True))):
            rows[name] = graph_us(torch, fn)
    return shape, rows


def graph_us(torch, fn, calls=100, repeats=7):
    """Microseconds per call of `fn` replayed from a CUDA graph of `calls`."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def cpu_rows():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, 1, 64)).astype(np.float16)
    k = rng.standard_normal((1, 2, 64, 64)).astype(np.float16)
    v = rng.standard_normal((1, 2, 64, 64)).astype(np.float16)
    prepared = fsdpa.prepare(q, k, v)
    shape = dict(batch=1, heads_q=8, heads_kv=2, len_k=64, dim=64)
    return shape, interleaved_us({"fsdpa.attention": lambda: fsdpa.attention(q, k, v),
                                  "prepared": prepared})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON file to write")
    parser.add_argument("--cpu-only", action="store_true")
    args = parser.parse_args()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.open("a").close()  # fail before the run, not after
    results = {"command": " ".join(sys.argv), "library": fsdpa.library_path()}
    shape, rows = cpu_rows()
    results["cpu"] = {"shape": shape, "us_per_call": rows,
                      "ratio_to_prepared": rows["fsdpa.attention"] / rows["prepared"]}
    if not args.cpu_only:
        import torch  # noqa: PLC0415

        shape, rows = cuda_rows(torch)
        results["cuda"] = {"shape": shape, "us_per_call": rows,
                           "torch_binding": fsdpa._capi.torch_native() is not None,
                           "ratio_to_torch_sdpa": rows["fsdpa.attention"]
                           / rows["torch sdpa (enable_gqa)"],
                           "note": "piece: rows time one part of the fast path alone"}
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"Command: `{results['command']}` (bench/device.sh ecosystem or verify)  ")
    print(f"CPU shape {results['cpu']['shape']}, f16 numpy"
          + (f"; CUDA shape {results['cuda']['shape']}, bf16 torch, Lq=1, under inference_mode"
             if "cuda" in results else "") + ". Wall time of back-to-back calls over their count"
          " (then one synchronize), median of 7 rounds of one loop of 2000 per call kind"
          " (the kinds interleaved).\n")
    print("| device | call | us per call |\n|---|---|---|")
    for device in ("cpu", "cuda"):
        for name, us in results.get(device, {}).get("us_per_call", {}).items():
            print(f"| {device} | {name} | {us:.1f} |")
    print(f"cpu: attention / prepared = {results['cpu']['ratio_to_prepared']:.2f}")
    if "cuda" in results:
        print(f"cuda: attention / torch sdpa = {results['cuda']['ratio_to_torch_sdpa']:.2f}"
              f" (torch binding {'loaded' if results['cuda']['torch_binding'] else 'absent'})")


if __name__ == "__main__":
    main()
