"""Timing for the benchmarks: CUDA-event medians of eager calls, and of calls
replayed from a CUDA graph.

A call timed alone between two CUDA events includes the host's launch path
(Python, ctypes or torch's dispatcher, the launch itself). For a call of
milliseconds that is noise; at decode sizes (30-300 us per call) it leaves
12-20 us gaps in which the GPU idles, so the eager time understates what the
kernels do. Serving runtimes run decode under CUDA graphs, where the calls
follow each other on the GPU with no host work between them: graph_ms
measures that. Every backend (fsdpa and each of torch's) goes through the
same function with the same arguments, so their graph times compare;
eager_ms stays beside it as the time a plain Python loop sees.
"""
import statistics

import torch


def _event_ms(launch):
    """Milliseconds between CUDA events recorded on the current stream just
    before and just after launch()."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def eager_ms(fn, iters=40, warmup=5):
    """Median milliseconds of `iters` calls of fn, each timed alone with CUDA
    events (host launch gaps included), after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return statistics.median(_event_ms(fn) for _ in range(iters))


def graph_ms(fns, calls=20, replays=10, warmup=3):
    """Milliseconds per call under a CUDA graph.

    fns: zero-argument callables (one per rotated input set); `calls` calls
    are captured into one graph, call i running fns[i % len(fns)]. The graph
    is replayed `warmup` times, then `replays` replays are timed one by one
    with CUDA events. Returns (median replay time / calls, None), or
    (None, reason) when the calls cannot be captured, reason being the first
    line of the error, at most 120 characters.
    """
    caller = torch.cuda.current_stream()
    failure = None
    try:
        # One eager call of each on a side stream first (torch's recipe for
        # capture): lazy set-up such as plans, handles and cached workspaces
        # happens there, outside the capture.
        side = torch.cuda.Stream()
        side.wait_stream(caller)
        with torch.cuda.stream(side):
            for fn in fns:
                fn()
        caller.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            try:
                for i in range(calls):
                    fns[i % len(fns)]()
            except Exception as e:  # noqa: BLE001
                # Kept: ending the invalidated capture then fails too, with an
                # error that no longer says which call broke it.
                failure = e
    except Exception as e:  # noqa: BLE001
        failure = failure or e
    if failure is not None:
        # A failed capture_end leaves torch.cuda.graph's capture stream current.
        torch.cuda.set_stream(caller)
        return None, f"{type(failure).__name__}: {failure}".splitlines()[0][:120]
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    times = [_event_ms(graph.replay) for _ in range(replays)]
    return statistics.median(times) / calls, None
