"""gpu_vs_cpu: the packed checkpoint reassembles from its pieces (bf16, same tokenizer and config),
and the comparison passes identical runs and bf16 near ties, and fails real differences."""

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from benchmarks.serving.gpu_vs_cpu import compare, pack, table
from sglang_hs.testing import tiny_model

ROOT = Path(__file__).resolve().parent.parent  # python -m benchmarks... runs from the repository root


def test_pack_pieces_reassemble_to_a_bf16_copy(tmp_path):
    src = tiny_model(str(tmp_path / "src"), layers=1)
    pieces = pack(tmp_path / "src", tmp_path / "packed", piece_mib=1)
    assert len(pieces) > 1 and all((p / "part").stat().st_size <= 1 << 20 for p in pieces)
    data = b"".join((p / "part").read_bytes() for p in pieces)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    out = tmp_path / "unpacked" / "model"
    assert sorted(f.name for f in out.iterdir()) == sorted(f.name for f in (tmp_path / "packed" / "model").iterdir())
    original = load_file(f"{src}/model.safetensors")
    copy = load_file(out / "model.safetensors")
    assert copy.keys() == original.keys()
    assert all(copy[k].dtype == torch.bfloat16 and torch.equal(copy[k], original[k].to(torch.bfloat16)) for k in copy)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert (out / "tokenizer.json").read_bytes() == (tmp_path / "src" / "tokenizer.json").read_bytes()


def test_pack_refuses_an_existing_output_and_a_non_checkpoint(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "config.json").write_text("{}")
    for model, out in ((tmp_path / "nothing", tmp_path / "x"), (tmp_path, tmp_path / "out")):
        r = subprocess.run([sys.executable, "-m", "benchmarks.serving.gpu_vs_cpu", "pack", "--model", str(model), "--out",
                            str(out)], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "gpu_vs_cpu:" in r.stderr


def run(ids, chosen, second):
    """A recorded run: token ids, chosen-token logprobs, top-2 per step."""
    return {"output_ids": ids, "meta_info": {"prompt_tokens": 100, "output_token_logprobs": [[c, t] for c, t in zip(chosen, ids)],
                                            "output_top_logprobs": [[[c, t], [s, 0]] for c, s, t in zip(chosen, second, ids)]}}


def test_compare_identical_near_tie_and_real_difference():
    ref = run([5, 6, 7], [-0.1, -0.2, -0.5], [-3.0, -3.0, -0.52])
    same = compare([ref], [run([5, 6, 7], [-0.1, -0.2, -0.5], [-3.0, -3.0, -0.52])], 0.1)
    assert same["ok"] and same["rows"][0]["first_difference"] is None
    tie = compare([ref], [run([5, 6, 9], [-0.1, -0.2, -0.49], [-3.0, -3.0, -0.51])], 0.1)  # last token: margin 0.02
    assert tie["ok"] and tie["rows"][0]["first_difference"] == 2 and tie["rows"][0]["near_tie"]
    real = compare([ref], [run([5, 8, 7], [-0.1, -0.2, -0.5], [-3.0, -3.0, -0.52])], 0.1)  # margin 2.8 there
    assert not real["ok"] and real["rows"][0]["first_difference"] == 1
    assert "| 0 | 100 | 1 |" in table(real) and "none (identical)" in table(same)
    assert not compare([ref, ref], [ref], 0.1)["ok"]  # a missing run is a failure


@pytest.mark.slow
def test_record_then_check_the_stock_control_in_float32(tmp_path):
    """The control path end to end on CPU: stock SGLang (no hs), float32; a run checked against
    itself is identical on every prompt."""
    from sglang_hs.testing import cpu_env

    model = tiny_model(str(tmp_path / "m"), layers=1)
    ref, report = tmp_path / "ref.json", tmp_path / "report.json"
    cli = [sys.executable, "-m", "benchmarks.serving.gpu_vs_cpu"]
    args = ["--model", model, "--device", "cpu", "--engine", "stock", "--dtype", "float32"]
    r = subprocess.run([*cli, "record", *args, "--out", str(ref)], env=cpu_env(), capture_output=True, text=True, timeout=900,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    recorded = json.loads(ref.read_text())
    assert recorded["engine"] == "stock" and recorded["hs_args"] is None and recorded["engine_args"]["dtype"] == "float32"
    assert len(recorded["runs"]) == 4 and all(len(run["output_ids"]) == 32 for run in recorded["runs"])
    r = subprocess.run([*cli, "check", *args, "--reference", str(ref), "--out", str(report)], env=cpu_env(),
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert all(row["first_difference"] is None for row in json.loads(report.read_text())["rows"])
