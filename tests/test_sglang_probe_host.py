"""The host-time probe's harness on CPU (the reference path, a small model): it builds the pool with its prefix
compressed, times the steps and prints one row each; on the GPU it is run through the device tool."""

import re

import pytest

pytest.importorskip("sglang")

from benchmarks.serving import probe_host  # noqa: E402


def test_probe_times_every_step_on_a_compressed_prefix(capsys):
    probe_host.main(["--device", "cpu", "--dtype", "float32", "--layers", "2", "--prefix", "700", "--question", "16",
                     "--head-dim", "64", "--repeats", "2", "--profile", "1"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| ([a-z ,]+) \| ([\d.]+) \| ([\d.]+) \| \d+ \| (\d+) \|$", out, re.M)
    assert [step for step, *_ in rows] == ["compression, next block", "page opened and freed", "stats snapshot", "question, hs",
                                           "question, floor", "decode step, hs", "decode step, floor"]
    assert all(0 < float(host) <= float(total) and int(ops) > 0 for _, host, total, ops in rows)
    assert "forward_extend" in out  # the profile's table
    ratios = re.search(r"question ([\d.]+)x, decode step ([\d.]+)x$", out, re.M)
    hosts = {step: float(host) for step, host, *_ in rows}
    assert ratios and float(ratios[1]) == pytest.approx(hosts["question, hs"] / hosts["question, floor"], rel=0.05)


def test_probe_builds_the_prefix_compressed():
    args = probe_host.parse(["--device", "cpu", "--dtype", "float32", "--layers", "1", "--prefix", "1100",
                                           "--question", "8", "--head-dim", "64", "--repeats", "2"])
    backend, locs = probe_host.build(args)
    before = backend.pool.block_counts()["sparse_blocks"]
    assert before > 0 and len(locs) == 1100 + 8 + 1
    probe_host.steps(args, backend, locs)["compression, next block"]()
    assert backend.pool.block_counts()["sparse_blocks"] > before  # each timed compression moves a block


def test_probe_refuses_bad_arguments():
    with pytest.raises(SystemExit):
        probe_host.main(["--kv-heads", "1"])
