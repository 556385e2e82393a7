import json
import os

import pytest
import torch
from safetensors import safe_open

from hs_prep.convert import ConvertOptions, convert
from hs_prep.source import resolve
from hs_prep.verify import compare_logits, verify
from tiny_checkpoints import ARCHITECTURES, make_checkpoint


def load_all(path):
    tensors = {}
    for name in os.listdir(path):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(path, name), "pt") as f:
                tensors.update({k: f.get_tensor(k) for k in f.keys()})
    return tensors


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_convert_preserves_function_for_every_architecture(tmp_path, arch):
    src = make_checkpoint(str(tmp_path / "src"), arch)
    out = str(tmp_path / "out")
    section = convert(resolve(src), out, ConvertOptions(retrieval_ratio=0.5))
    # MoE experts run through grouped_mm, which has no float64 kernel: compare those in float32
    exact = not arch.endswith(("moe", "mixtral"))
    result = verify(src, out, torch.float64 if exact else torch.float32, atol=1e-9 if exact else 1e-4)
    assert result["ok"], result
    assert result["argmax_agreement"] == 1.0
    # the permutation really moved heads somewhere (the test would be vacuous otherwise)
    assert any(layer["permutation"] != sorted(layer["permutation"]) for layer in section["layers"])
    before, after = load_all(src), load_all(out)
    assert before.keys() == after.keys()
    for name, tensor in before.items():
        assert after[name].dtype == tensor.dtype and after[name].shape == tensor.shape
        if "self_attn" not in name or "norm" in name or name.endswith("o_proj.bias"):
            assert torch.equal(after[name], tensor), name
    if arch.startswith("qwen2"):
        assert any(n.endswith("q_proj.bias") for n in before)


def test_config_section_and_files(tmp_path):
    src = make_checkpoint(str(tmp_path / "src"), "llama", num_attention_heads=8, num_key_value_heads=4)
    out = str(tmp_path / "out")
    convert(resolve(src), out, ConvertOptions(retrieval_ratio=0.5))
    config = json.load(open(os.path.join(out, "config.json")))
    section = config["hierasparse"]
    assert section["format_version"] == 1 and section["metric"] == "effective_rank"
    assert section["aggregate"] == "mean" and section["tp_size"] == 1 and section["retrieval_ratio"] == 0.5
    assert len(section["layers"]) == 2
    for layer in section["layers"]:
        assert layer["num_retrieval"] == 2 and layer["is_retrieval"] == [True, True, False, False]
        assert sorted(layer["permutation"]) == [0, 1, 2, 3]
        assert len(layer["head_effective_rank"]) == 8
        scores = [layer["group_scores"][g] for g in layer["permutation"]]
        assert max(scores[:2]) <= min(scores[2:])  # retrieval groups are the lowest-rank ones
    for name in ("tokenizer_config.json", "generation_config.json", "model.safetensors.index.json",
                 "hs_report.json", "hs_report.png"):
        assert os.path.isfile(os.path.join(out, name)), name
    assert open(os.path.join(src, "model.safetensors.index.json")).read() == open(
        os.path.join(out, "model.safetensors.index.json")).read()
    assert open(os.path.join(out, "hs_report.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no partial directories left


def test_dtype_and_header_kept_for_bf16(tmp_path):
    src = make_checkpoint(str(tmp_path / "src"), "qwen2", dtype=torch.bfloat16, shard_size=None)
    out = str(tmp_path / "out")
    convert(resolve(src), out, ConvertOptions())
    a, b = (open(os.path.join(p, "model.safetensors"), "rb").read() for p in (src, out))
    header = 8 + int.from_bytes(a[:8], "little")
    assert len(a) == len(b) and a[:header] == b[:header] and a != b
    result = compare_logits(src, out, torch.float64, tokens=16, seed=1)
    assert result["max_abs_logit_diff"] < 1e-9


def test_tp_layout_recorded_and_balanced(tmp_path):
    src = make_checkpoint(str(tmp_path / "src"), "llama", num_attention_heads=8, num_key_value_heads=8)
    section = convert(resolve(src), str(tmp_path / "tp2"), ConvertOptions(retrieval_ratio=0.5, tp_size=2))
    assert section["tp_size"] == 2
    for layer in section["layers"]:
        assert sum(layer["is_retrieval"][:4]) == sum(layer["is_retrieval"][4:]) == 2
    assert verify(src, str(tmp_path / "tp2"), torch.float64, atol=1e-9)["ok"]


def test_rope_aware_reports_spearman(tmp_path):
    src = make_checkpoint(str(tmp_path / "src"), "llama")
    section = convert(resolve(src), str(tmp_path / "out"), ConvertOptions(rope_aware=True, rope_max_distance=1024))
    info = section["rope_aware"]
    assert section["metric"] == "effective_rank_rope"
    assert len(info["spearman_vs_vanilla_per_layer"]) == 2
    assert -1.0 <= info["spearman_vs_vanilla_mean"] <= 1.0
    assert info["distances"][0] == 1 and info["distances"][-1] == 1024


def test_failure_midway_leaves_nothing_and_keeps_existing_output(tmp_path, monkeypatch):
    src = make_checkpoint(str(tmp_path / "src"), "llama")
    out = str(tmp_path / "out")
    convert(resolve(src), out, ConvertOptions())
    before = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}

    import hs_prep.convert as convert_module

    calls = []

    def failing_rewrite(shard, dst, edits):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C during the second shard
        return real_rewrite(shard, dst, edits)

    real_rewrite = convert_module.rewrite
    monkeypatch.setattr(convert_module, "rewrite", failing_rewrite)
    with pytest.raises(KeyboardInterrupt):
        convert(resolve(src), out, ConvertOptions(retrieval_ratio=1.0, overwrite=True))
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]
    assert {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)} == before


def test_overwrite_replaces_atomically(tmp_path):
    src = make_checkpoint(str(tmp_path / "src"), "llama")
    out = str(tmp_path / "out")
    convert(resolve(src), out, ConvertOptions(retrieval_ratio=0.5))
    convert(resolve(src), out, ConvertOptions(retrieval_ratio=1.0, overwrite=True))
    section = json.load(open(os.path.join(out, "config.json")))["hierasparse"]
    assert section["retrieval_ratio"] == 1.0
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]


def test_control_selections(tmp_path):
    src = make_checkpoint(str(tmp_path / "src"), "llama", num_attention_heads=8, num_key_value_heads=8)
    picks = {}
    for selection in ("aoh", "reverse", "random"):
        section = convert(resolve(src), str(tmp_path / selection), ConvertOptions(selection=selection, seed=3))
        assert section["selection"] == selection
        picks[selection] = [sorted(g for g, r in zip(layer["permutation"], layer["is_retrieval"]) if r)
                            for layer in section["layers"]]
        assert verify(src, str(tmp_path / selection), torch.float64, atol=1e-9)["ok"]
    for layer, scores in enumerate(section["layers"][i]["group_scores"] for i in range(2)):
        by_rank = sorted(range(8), key=lambda g: scores[g])
        assert picks["aoh"][layer] == sorted(by_rank[:4])
        assert picks["reverse"][layer] == sorted(by_rank[4:])
    assert picks["random"] != picks["aoh"]
    again = convert(resolve(src), str(tmp_path / "again"), ConvertOptions(selection="random", seed=3))
    assert [layer["permutation"] for layer in again["layers"]] == [layer["permutation"] for layer in section["layers"]]
