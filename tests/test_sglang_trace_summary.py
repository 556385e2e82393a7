"""trace_summary: a real torch-profiler Chrome trace summed by name; bad input is a one-line error."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.serving.trace_summary import busy_ms, graph_replays, host_waits, load_events, summarize


@record_function("hs.outer")
def work(x):
    with record_function("hs.inner"):
        for _ in range(3):
            x = x @ x
    return x


def test_summary_sums_ranges_and_ops(tmp_path):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work(torch.randn(64, 64))
        work(torch.randn(64, 64))
    trace = tmp_path / "t.trace.json"
    prof.export_chrome_trace(str(trace))
    packed = tmp_path / "t.trace.json.gz"
    packed.write_bytes(gzip.compress(trace.read_bytes()))
    for path in (trace, packed):
        text = summarize(path)
        rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in text.splitlines() if line.startswith("| ")}
        assert rows["hs.outer"][1] == "2" and rows["hs.inner"][1] == "2"  # calls
        assert rows["aten::matmul"][1] == "6"
        assert float(rows["hs.outer"][0]) >= float(rows["hs.inner"][0]) > 0


@pytest.mark.parametrize("content", [b"not json", b'{"traceEvents": []}'])
def test_bad_trace_is_a_one_line_error(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.serving.trace_summary", str(bad)], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and "trace_summary" in proc.stderr


def test_graph_replays_count_kernels_by_correlation(tmp_path):
    def launch(ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": ts, "dur": 5, "args": {"correlation": corr}}

    def kernel(ts, dur, corr):
        return {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur, "args": {"correlation": corr}}

    events = [launch(0, 7), kernel(10, 100, 7), kernel(200, 300, 7), kernel(600, 50, 8),  # 8: an eager launch
              launch(1000, 9), kernel(1010, 100, 9), kernel(1110, 100, 9), kernel(1300, 200, 9), launch(2000, 10)]
    trace = tmp_path / "g.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    assert graph_replays(load_events(trace)) == [(2, 0.4, 0.49), (3, 0.4, 0.49)]
    rows = [line for line in summarize(trace).splitlines() if line.startswith("| 2 |")]
    assert rows == ["| 2 | 2 | 0.40 | 0.49 |"]  # two replays (the third ran nothing), median 2.5 kernels rounds to 2


def test_gpu_idle_share_and_host_waits_by_their_innermost_range(tmp_path):
    def event(cat, name, ts, dur, tid=1):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}

    events = [event("user_annotation", "hs.forward_extend", 0, 1000), event("user_annotation", "hs.prefix_reads", 100, 300),
              event("cuda_runtime", "cudaStreamSynchronize", 150, 200),  # inside both: the inner range counts
              event("cuda_runtime", "cudaMemcpyAsync", 500, 50),  # not a sync
              event("cuda_runtime", "cudaStreamSynchronize", 600, 100),
              event("cuda_runtime", "cudaStreamSynchronize", 1500, 400),
              event("cuda_runtime", "cudaStreamSynchronize", 700, 100, tid=2),  # another thread's: outside hs
              event("kernel", "a", 0, 400, tid=7), event("kernel", "b", 300, 300, tid=7), event("kernel", "c", 1000, 1000, tid=7)]
    trace = tmp_path / "s.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    loaded = load_events(trace)
    assert busy_ms([e for e in loaded if e["cat"] == "kernel"]) == pytest.approx(1.6)  # [0, 600) and [1000, 2000)
    assert host_waits(loaded) == {"hs.prefix_reads": (0.2, 1), "hs.forward_extend": (0.1, 1), "outside hs": (0.5, 2)}
    text = summarize(trace)
    assert "GPU idle: 20 % of the span" in text  # 0.4 of 2.0 ms
    assert "| hs.prefix_reads | 0.2 | 1 |" in text and "| outside hs | 0.5 | 2 |" in text
