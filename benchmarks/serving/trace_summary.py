"""Where the time went: a torch-profiler Chrome trace (SGLang's /start_profile) summed by name.

    python -m benchmarks.serving.trace_summary TRACE.json[.gz] [--top 15]

Three tables: the ``hs.*`` ranges the backend and pool mark (``torch.profiler.record_function``,
host wall time, so they include waits for the GPU), GPU kernels and the host-side aten ops, each
with total ms, calls and share of the profiled span. Then, where the trace has GPU kernels, how much of
the span the GPU was idle, and the host's waits for the GPU (synchronizing CUDA runtime calls: a
``.item()``, ``.tolist()`` or ``.cpu()`` of a GPU tensor, a synchronize) by the innermost ``hs.*`` range
around each (``outside hs`` where none): a host-bound step shows idle GPU time, a wait inside a
per-layer range stalls every layer. Then, where the trace has CUDA graph replays (decode steps), the
kernels each replay ran, their summed GPU time and first-start-to-last-end span (medians over the
replays), matched to their ``cudaGraphLaunch`` by correlation id.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def is_hs_range(e: dict) -> bool:
    return e.get("cat") == "user_annotation" and e["name"].startswith("hs.")


def is_kernel(e: dict) -> bool:
    return e.get("cat") == "kernel"


TABLES = (("hs ranges (host)", is_hs_range), ("GPU kernels", is_kernel), ("host ops", lambda e: e.get("cat") == "cpu_op"))


def load_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def summarize(path: Path, top: int = 15) -> str:
    events = load_events(path)
    if not events:
        raise ValueError(f"{path}: no complete events in the trace")
    span_ms = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e3
    lines = [f"Trace {path.name}: {len(events)} events over {span_ms:.1f} ms", ""]
    for title, keep in TABLES:
        total, calls = defaultdict(float), defaultdict(int)
        for e in events:
            if keep(e):
                total[e["name"]] += e["dur"] / 1e3
                calls[e["name"]] += 1
        lines += [f"| {title} | ms | calls | % of span |", "|---|---|---|---|"]
        for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
            short = name if len(name) <= 70 else name[:67] + "..."
            lines.append(f"| {short.replace('|', '/')} | {ms:.1f} | {calls[name]} | {100 * ms / span_ms:.1f} |")
        lines.append("")
    kernels = [e for e in events if is_kernel(e)]
    if kernels:
        lines += [f"GPU idle: {100 * (1 - busy_ms(kernels) / span_ms):.0f} % of the span", ""]
        waits = host_waits(events)
        if waits:
            lines += ["| host waits for the GPU (in) | ms | calls |", "|---|---|---|"]
            lines += [f"| {where} | {ms:.1f} | {n} |" for where, (ms, n) in sorted(waits.items(), key=lambda kv: -kv[1][0])]
            lines.append("")
    replays = graph_replays(events)
    if replays:
        kernels, busy, span = (statistics.median(r[i] for r in replays) for i in range(3))
        lines += ["| CUDA graph replays | kernels each | GPU busy ms each | span ms each |", "|---|---|---|---|",
                  f"| {len(replays)} | {kernels:.0f} | {busy:.2f} | {span:.2f} |", ""]
    return "\n".join(lines)


def busy_ms(kernels: list[dict]) -> float:
    """Milliseconds in which at least one of ``kernels`` ran (their intervals' union)."""
    total, end = 0.0, float("-inf")
    for k in sorted(kernels, key=lambda e: e["ts"]):
        start, stop = max(k["ts"], end), k["ts"] + k["dur"]
        total += max(0.0, stop - start)
        end = max(end, stop)
    return total / 1e3


def host_waits(events: list[dict]) -> dict[str, tuple[float, int]]:
    """Synchronizing CUDA runtime calls (``SYNCS``), summed (ms, calls) by the innermost ``hs.*`` range of the same
    thread that holds each, ``outside hs`` where none does."""
    ranges = [e for e in events if is_hs_range(e)]
    out = defaultdict(lambda: (0.0, 0))
    for e in events:
        if e.get("cat") != "cuda_runtime" or e["name"] not in SYNCS:
            continue
        around = [r for r in ranges if r.get("tid") == e.get("tid") and r["ts"] <= e["ts"]
                  and e["ts"] + e["dur"] <= r["ts"] + r["dur"]]
        where = min(around, key=lambda r: r["dur"])["name"] if around else "outside hs"
        ms, n = out[where]
        out[where] = (ms + e["dur"] / 1e3, n + 1)
    return dict(out)


def graph_replays(events: list[dict]) -> list[tuple[int, float, float]]:
    """(kernels, summed kernel ms, span ms) of each cudaGraphLaunch that ran kernels."""
    by_launch = defaultdict(list)
    for e in events:
        if is_kernel(e):
            by_launch[e.get("args", {}).get("correlation")].append(e)
    out = []
    for launch in events:
        if launch["name"] == "cudaGraphLaunch" and (ks := by_launch.get(launch.get("args", {}).get("correlation"))):
            span = max(k["ts"] + k["dur"] for k in ks) - min(k["ts"] for k in ks)
            out.append((len(ks), sum(k["dur"] for k in ks) / 1e3, span / 1e3))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    try:
        print(summarize(args.trace, args.top))
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        raise SystemExit(f"trace_summary: {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
