import json
import os

import pytest
from click.testing import CliRunner

from hs_prep.cli import main
from tiny_checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_checkpoint(str(tmp_path_factory.mktemp("ckpt") / "tiny"), "llama")


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def assert_one_line_error(result, pattern):
    assert result.exit_code != 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert pattern in lines[0], lines[0]


def leftovers(folder):
    return [n for n in os.listdir(folder) if n.startswith(".")]


def test_convert_inspect_verify_roundtrip(checkpoint, tmp_path):
    out = tmp_path / "prepared"
    result = run("convert", checkpoint, "--output", out, "--sparsity", "0.5")
    assert result.exit_code == 0, result.output
    assert "retrieval groups" in result.output and "prepared checkpoint written" in result.output
    table = run("inspect", out)
    assert table.exit_code == 0 and table.output.count("\n") == 2 + 2
    report = json.loads(run("inspect", out, "--json").stdout)
    assert report["kv_groups"] == 4 and len(report["per_layer"]) == 2
    assert all(len(row["retrieval_groups"]) == 2 for row in report["per_layer"])
    verified = run("verify", checkpoint, out, "--json", "--dtype", "float64", "--atol", "1e-9")
    assert verified.exit_code == 0, verified.output
    data = json.loads(verified.stdout)
    assert data["ok"] and data["permutation_ok"] and data["argmax_agreement"] == 1.0


def test_verify_detects_a_wrong_permutation(checkpoint, tmp_path):
    out = tmp_path / "prepared"
    assert run("convert", checkpoint, "-o", out).exit_code == 0
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    perm = config["hierasparse"]["layers"][0]["permutation"]
    config["hierasparse"]["layers"][0]["permutation"] = perm[1:] + perm[:1]
    config_path.write_text(json.dumps(config))
    result = run("verify", checkpoint, out, "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert not data["ok"] and not data["permutation_ok"]
    assert any("layers.0." in p for p in data["permutation_problems"])


def corrupt(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[:-10]))
    elif how == "header":
        data[8:12] = b"\x00\xff\x00\xff"
        path.write_bytes(bytes(data))
    elif how == "length":
        path.write_bytes((10**12).to_bytes(8, "little") + bytes(data[8:]))


@pytest.mark.parametrize("how,pattern", [("truncate", "truncated"), ("header", "not JSON"),
                                         ("length", "corrupt safetensors header")])
def test_corrupt_safetensors(tmp_path, how, pattern):
    src = make_checkpoint(str(tmp_path / "src"), "llama", shard_size=None)
    corrupt(tmp_path / "src" / "model.safetensors", how)
    result = run("convert", src, "-o", tmp_path / "out")
    assert_one_line_error(result, pattern)
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path)


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_bad_inputs(tmp_path, checkpoint):
    out = tmp_path / "out"
    assert_one_line_error(run("convert", tmp_path / "nowhere", "-o", out), "no such directory")
    assert_one_line_error(run("convert", checkpoint, "-o", out, "--retrieval-ratio", "0"), "(0, 1]")
    assert_one_line_error(run("convert", checkpoint, "-o", out, "--retrieval-ratio", "1.5"), "(0, 1]")
    assert_one_line_error(run("convert", checkpoint, "-o", out, "--sparsity", "1"), "[0, 1)")
    assert_one_line_error(run("convert", checkpoint, "-o", out, "--sparsity", "0.5", "--retrieval-ratio", "0.5"),
                          "not both")
    assert_one_line_error(run("convert", checkpoint, "-o", out, "--tp-size", "3"), "does not divide the 4 KV groups")
    assert_one_line_error(run("convert", checkpoint, "-o", checkpoint, "--overwrite"), "must differ")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_line_error(run("convert", checkpoint, "-o", blocker / "sub"), "cannot write to")
    assert not out.exists() and not leftovers(tmp_path)


def test_existing_output_needs_overwrite(tmp_path, checkpoint):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    assert_one_line_error(run("convert", checkpoint, "-o", out), "already exists")
    assert (out / "keep.txt").read_text() == "precious"


def test_missing_config_and_weights(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run("convert", empty, "-o", tmp_path / "o"), "no config.json")
    (empty / "config.json").write_text("{not json")
    assert_one_line_error(run("convert", empty, "-o", tmp_path / "o"), "not valid JSON")
    (empty / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 4,
                                                   "hidden_size": 32, "num_hidden_layers": 1}))
    assert_one_line_error(run("convert", empty, "-o", tmp_path / "o"), "no model.safetensors")
    (empty / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    assert_one_line_error(run("convert", empty, "-o", tmp_path / "o"), "never unpickles")


def test_inconsistent_shapes_unsupported_and_prepared(tmp_path):
    src = tmp_path / "src"
    make_checkpoint(str(src), "llama")
    edit_config(src, num_key_value_heads=2)
    assert_one_line_error(run("convert", src, "-o", tmp_path / "o"), "config.json implies")
    edit_config(src, num_key_value_heads=4, num_hidden_layers=3)
    assert_one_line_error(run("convert", src, "-o", tmp_path / "o"), "layer 2 has no self_attn.q_proj.weight")
    edit_config(src, num_hidden_layers=2, model_type="gpt2")
    assert_one_line_error(run("convert", src, "-o", tmp_path / "o"), "supports model_type llama, mistral")
    edit_config(src, model_type="llama", hierasparse={"format_version": 1})
    assert_one_line_error(run("convert", src, "-o", tmp_path / "o"), "already prepared")
    assert not (tmp_path / "o").exists() and not leftovers(tmp_path)


def test_inspect_unprepared(checkpoint):
    assert_one_line_error(run("inspect", checkpoint), "is not prepared")


def test_unknown_hub_id_offline(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = run("convert", "no-such-org/no-such-model", "-o", tmp_path / "o", env=env)
    assert_one_line_error(result, "not in the local Hugging Face cache")
    result = run("convert", "bad id with spaces", "-o", tmp_path / "o", env=env)
    assert_one_line_error(result, "neither a local directory nor a valid hub id")
