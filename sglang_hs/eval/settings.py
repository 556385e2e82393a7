"""What is compared: a setting = a prepared checkpoint (head selection, retrieval ratio) + hs flags.

KV bytes per token follow the hs_kernels size model at the sample's length: retrieval groups keep
every 64-token block (dense, or 2:4-compressed per the decode S_K/S_V, sink/window/partial blocks
dense, plus int32 index entries); streaming groups keep only sink + window tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hs_kernels import BLOCK_SIZE, eligible_blocks
from hs_kernels.pruner import num_sparse_blocks
from hs_kernels.format import sparse_shapes

HS_KEYS = ("prefill_sk", "prefill_sv", "decode_sk", "decode_sv", "sink_tokens", "window_tokens")
DENSE = {"prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0, "decode_sv": 0.0}


@dataclass
class Setting:
    name: str
    select: str = "aoh"            # aoh | random | reverse (hs-prep convert --select)
    retrieval_ratio: float = 1.0   # hs-prep convert --retrieval-ratio (rounded per layer by hs-prep)
    hs: dict = field(default_factory=lambda: dict(DENSE))
    seed: int = 0                  # for select=random
    description: str = ""

    def checkpoint_name(self) -> str:
        return f"{self.select}-r{self.retrieval_ratio:g}" + (f"-seed{self.seed}" if self.select == "random" else "")

    def hs_flags(self) -> list[str]:
        return [f"--hs-{k.replace('_', '-')}={v}" for k, v in sorted(self.hs.items())]

    def to_json(self) -> dict:
        return asdict(self)


def _s(retrieval_ratio, select="aoh", **hs):
    return dict(select=select, retrieval_ratio=retrieval_ratio, hs={**DENSE, **hs})


# With 3 KV groups per layer (SmolLM2), retrieval ratios 2/3 and 1/3 are what a layer can hold;
# hs-prep rounds the requested ratio up per layer, hence 0.666 / 0.333.
PRESETS = {
    "full": (_s(1.0), "full attention (all groups retrieval, dense KV)"),
    "aoh-s33": (_s(0.666), "AoH, 1/3 of KV groups streaming"),
    "aoh-s67": (_s(0.333), "AoH, 2/3 of KV groups streaming"),
    "random-s33": (_s(0.666, "random"), "random selection, 1/3 streaming"),
    "reverse-s33": (_s(0.666, "reverse"), "reversed AoH (highest rank kept), 1/3 streaming"),
    "random-s67": (_s(0.333, "random"), "random selection, 2/3 streaming"),
    "reverse-s67": (_s(0.333, "reverse"), "reversed AoH, 2/3 streaming"),
    "v24": (_s(1.0, prefill_sv=1.0, decode_sv=1.0), "all groups retrieval, V 2:4 in prefill and cache"),
    "k24": (_s(1.0, prefill_sk=1.0, decode_sk=1.0), "all groups retrieval, K 2:4 in prefill and cache"),
    "kv24": (_s(1.0, prefill_sk=1.0, prefill_sv=1.0, decode_sk=1.0, decode_sv=1.0), "all groups retrieval, K and V 2:4 in prefill and cache"),
    "kv24-decode": (_s(1.0, prefill_sv=1.0, decode_sk=1.0, decode_sv=1.0), "recipe split sparsity (prefill S_K 0 / S_V 1, cache S_K 1 / S_V 1), all groups retrieval"),
    "aoh-s33-recipe": (_s(0.666, prefill_sv=1.0, decode_sk=1.0, decode_sv=1.0), "AoH 1/3 streaming + recipe sparsity (prefill V, cache K+V)"),
}


def preset(name: str) -> Setting:
    if name not in PRESETS:
        raise ValueError(f"unknown setting {name!r}; known: {', '.join(PRESETS)}")
    kw, desc = PRESETS[name]
    return Setting(name=name, description=desc, **{k: (dict(v) if isinstance(v, dict) else v) for k, v in kw.items()})


def prepare_checkpoint(setting: Setting, root: Path, model: str | None = None) -> Path:
    """``hs-prep convert [MODEL] --output ROOT/<name> --retrieval-ratio R --select S`` unless it exists."""
    out = Path(root) / setting.checkpoint_name()
    if (out / "config.json").is_file():
        return out
    cmd = [sys.executable, "-c", "from hs_prep.cli import main; main()", "convert"] + ([model] if model else []) + [
        "--output", str(out), "--retrieval-ratio", str(setting.retrieval_ratio), "--select", setting.select,
        "--seed", str(setting.seed), "--overwrite"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"hs-prep convert failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return out


def checkpoint_facts(path: Path) -> dict:
    config = json.loads((Path(path) / "config.json").read_text())
    text = config.get("text_config", config)
    hs = config["hierasparse"]
    flags = [layer["is_retrieval"] for layer in hs["layers"]]
    return {
        "layers": text["num_hidden_layers"],
        "kv_groups": hs["num_key_value_heads"],
        "head_dim": text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"],
        "retrieval_groups": sum(map(sum, flags)),
        "total_groups": sum(map(len, flags)),
        "selection": hs.get("selection"),
    }


def kv_bytes_per_token(facts: dict, s_k: float, s_v: float, num_tokens: int, sink: int = 128, window: int = 256,
                       value_bytes: int = 2, index_bytes: int = 4) -> float:
    """KV-cache bytes per context token for a sequence of ``num_tokens`` (all layers, all groups)."""
    d = facts["head_dim"]
    nb = -(-num_tokens // BLOCK_SIZE)
    eligible = int(eligible_blocks(num_tokens, sink, window).sum())
    dense_block = BLOCK_SIZE * d * value_bytes
    per_group = 0.0
    for op, s in (("k", s_k), ("v", s_v)):
        n_sparse = num_sparse_blocks(eligible, s)
        (vals, meta) = sparse_shapes(op, d)
        sparse_block = (vals[0] * vals[1]) * value_bytes + (meta[0] * meta[1]) * 2  # int16 metadata
        per_group += (nb - n_sparse) * dense_block + n_sparse * sparse_block + nb * index_bytes
    # the partial last block is stored as a full page; count real tokens only for streaming groups
    streaming = min(num_tokens, sink + window) * d * 2 * value_bytes
    total = facts["retrieval_groups"] * per_group + (facts["total_groups"] - facts["retrieval_groups"]) * streaming
    return total / num_tokens


def dense_bytes_per_token(facts: dict, value_bytes: int = 2) -> int:
    """Stock dense KV cache: K and V of every group in every layer."""
    return facts["total_groups"] * facts["head_dim"] * 2 * value_bytes
