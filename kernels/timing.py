"""Timing on the GPU for the benchmarks and probes: CUDA events around each call, medians."""

import time

import torch


def timeit(fn, iters: int = 20, warmup: int = 3) -> float:
    """Median ms of ``iters`` calls of ``fn``, each timed alone after ``warmup`` calls."""
    return alternating(fn, iters=iters, warmup=warmup)[0]


def alternating(*fns, iters: int = 20, warmup: int = 3, queued: bool = False) -> list[float]:
    """Median ms of each of ``fns``, which take turns call by call after ``warmup`` turns: so that they run in one
    power state (run apart under the H100's 700 W cap, the 2:4 prefill held ~15 % higher clocks than cuDNN:
    docs/kernels.md, Measuring). Each call timed alone with a sync after it (``per_call``), or,
    ``queued``, all queued back to back between their events with one sync at the end (``queued_turns``: kernels too
    short to hide their launch behind a sync, and calls that make no host sync)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = queued_turns(*fns, calls=iters) if queued else [[ms for ms, *_ in c] for c in per_call(*fns, calls=iters)]
    return [sorted(t)[len(t) // 2] for t in times]


def queued_turns(*fns, calls: int) -> list[list[float]]:
    """Ms of each call of each of ``fns``, which take turns call by call, queued on the stream back to back, each
    between its own pair of CUDA events, one sync at the end: the GPU's time per call where the host stays ahead."""
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
              for _ in fns]
    torch.cuda.synchronize()
    for i in range(calls):
        for fn, pairs in zip(fns, events):
            pairs[i][0].record()
            fn()
            pairs[i][1].record()
    torch.cuda.synchronize()
    return [[start.elapsed_time(end) for start, end in pairs] for pairs in events]


def per_call(*fns, calls: int, pause: float = 0.0, extra=tuple) -> list[list[tuple]]:
    """``(ms, *extra())`` of each call of each of ``fns``, which take turns call by call, each timed alone (CUDA events,
    a sync after it), ``pause`` seconds idle before each; ``extra``: read after each call (e.g. the clock)."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = [[] for _ in fns]
    for _ in range(calls):
        for fn, samples in zip(fns, out):
            time.sleep(pause)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append((start.elapsed_time(end), *extra()))
    return out


def back_to_back(fn, n: int = 20, host_only: bool = False) -> float:
    """Ms per call of ``n`` calls queued back to back (as a model's layers queue them), then one sync; ``host_only``:
    the host's time to issue them (the clock stops before the sync)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    issued = time.perf_counter()
    torch.cuda.synchronize()
    return ((issued if host_only else time.perf_counter()) - start) / n * 1e3
