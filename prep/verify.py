"""hs-prep verify: the prepared checkpoint computes the same function and its permutation undoes exactly."""
import os

import torch

from hs_prep.checkpoint import Checkpoint, load_config, open_checkpoint
from hs_prep.errors import PrepError
from hs_prep.permute import attention_edit
from hs_prep.safetensors_file import open_safetensors


def inverse(permutation: list[int]) -> list[int]:
    inv = [0] * len(permutation)
    for position, group in enumerate(permutation):
        inv[group] = position
    return inv


def check_permutations(original: Checkpoint, prepared_path: str, section: dict) -> list[str]:
    """Every prepared attention tensor, permuted back, equals the original byte for byte; returns problems."""
    problems = []
    shards = {}
    num_groups = original.geometry.num_kv_heads
    for layer, keys in sorted(original.attention.items()):
        permutation = section["layers"][layer]["permutation"]
        if sorted(permutation) != list(range(num_groups)):
            problems.append(f"layer {layer}: {permutation} is not a permutation of {num_groups} groups")
            continue
        for key, file_name in keys.items():
            name = original.attention_names[layer][key]
            if file_name not in shards:
                shards[file_name] = open_safetensors(os.path.join(prepared_path, file_name))
            if name not in shards[file_name].tensors:
                problems.append(f"{name} is missing from the prepared {file_name}")
                continue
            prepared = shards[file_name].raw(name)
            undo = attention_edit(key, inverse(permutation), original.geometry.hidden_size)
            if bytes(undo(prepared) if undo else prepared) != original.shards[file_name].raw(name):
                problems.append(f"{name}: permuting back does not restore the original")
    return problems


def compare_logits(original_path: str, prepared_path: str, dtype: torch.dtype, tokens: int, seed: int) -> dict:
    try:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise PrepError("verify needs transformers (pip install 'hierasparse-serving[hf]')") from None
    hf_logging.disable_progress_bar()
    models = [AutoModelForCausalLM.from_pretrained(p, dtype=dtype).eval() for p in (original_path, prepared_path)]
    vocab = models[0].config.vocab_size
    ids = torch.randint(0, vocab, (2, tokens), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        a, b = (m(input_ids=ids).logits.to(torch.float64) for m in models)
    return {
        "tokens": int(ids.numel()),
        "max_abs_logit_diff": float((a - b).abs().max()),
        "max_abs_logit": float(a.abs().max()),
        "argmax_agreement": float((a.argmax(-1) == b.argmax(-1)).to(torch.float64).mean()),
    }


def verify(original_path: str, prepared_path: str, dtype: torch.dtype, atol: float, tokens: int = 64,
           seed: int = 0) -> dict:
    section = load_config(prepared_path).get("hierasparse")
    if section is None:
        raise PrepError(f"{prepared_path} is not prepared (config.json has no 'hierasparse' section)")
    original = open_checkpoint(original_path)
    if len(section.get("layers", [])) != original.geometry.num_layers:
        raise PrepError("the prepared checkpoint records a different number of layers than the original has")
    problems = check_permutations(original, prepared_path, section)
    result = {"permutation_ok": not problems, "permutation_problems": problems}
    result.update(compare_logits(original_path, prepared_path, dtype, tokens, seed))
    result["atol"] = atol
    result["ok"] = not problems and result["max_abs_logit_diff"] <= atol and result["argmax_agreement"] == 1.0
    return result
