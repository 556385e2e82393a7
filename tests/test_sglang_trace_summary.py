"""trace_summary: a real torch-profiler Chrome trace summed by name; bad input is a one-line error."""

import gzip
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from sglang_hs.trace_summary import summarize


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
    proc = subprocess.run([sys.executable, "-m", "sglang_hs.trace_summary", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and "trace_summary" in proc.stderr
