"""What is compared: a setting = a prepared checkpoint (its head selection) + hs flags (the retrieval ratio and scope
cut the selection's order at serve time; sparsities, sink and window).

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

DENSE = {"retrieval_ratio": 1.0, "retrieval_scope": "layer", "prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0,
         "decode_sv": 0.0, "sink_tokens": 128, "window_tokens": 256}
PREPARED_RATIO = 0.5  # the checkpoints' own split; every setting names its ratio, so it only orders the groups


@dataclass
class Setting:
    name: str
    select: str = "aoh"            # aoh | random | reverse (hs-prep convert --select)
    hs: dict = field(default_factory=lambda: dict(DENSE))
    seed: int = 0                  # for select=random
    description: str = ""
    engine: str = "hs"             # hs | stock (stock SGLang on the unprepared checkpoint, its default backend)

    def checkpoint_name(self) -> str:
        return self.select + (f"-seed{self.seed}" if self.select == "random" else "")

    def hs_flags(self) -> list[str]:
        return [f"--hs-{k.replace('_', '-')}={v}" for k, v in sorted(self.hs.items())]

    def to_json(self) -> dict:
        return asdict(self)


def _s(retrieval_ratio=1.0, select="aoh", **hs):
    return dict(select=select, hs={**DENSE, "retrieval_ratio": retrieval_ratio, **hs})


V24 = dict(prefill_sv=1.0, decode_sv=1.0)
K24 = dict(prefill_sk=1.0, decode_sk=1.0)
KV24 = {**V24, **K24}
WIDE = dict(sink_tokens=512, window_tokens=2048)


def _factors() -> dict:
    """The factor table: one factor at a time against ``full`` (docs/quality.md)."""
    out = {
        "stock": (dict(engine="stock", hs={}), "stock SGLang on the original checkpoint (no hs)"),
        "full": (_s(), "hs, every group retrieval, dense KV (must equal stock)"),
    "default": (dict(hs={}), "hs with no flags: the checkpoint's calibrated setting, else the conservative recipe"),
    }
    for streaming in (25, 50, 75):
        ratio = 1 - streaming / 100
        for select in ("aoh", "random", "reverse"):
            out[f"{select}-s{streaming}"] = (_s(ratio, select), f"{select} selection, {streaming} % of each layer's groups streaming")
        out[f"aoh-s{streaming}-model"] = (_s(ratio, retrieval_scope="model"),
                                         f"AoH, the {streaming} % lowest-ranked groups of the model streaming")
        out[f"aoh-s{streaming}-wide"] = (_s(ratio, **WIDE), f"AoH, {streaming} % streaming, sink 512 + window 2048")
    out.update({
        "v24": (_s(**V24), "V 2:4 in prefill and cache"),
        "k24": (_s(**K24), "K 2:4 in prefill and cache"),
        "kv24": (_s(**KV24), "K and V 2:4 in prefill and cache"),
        "kv24-prefill": (_s(prefill_sk=1.0, prefill_sv=1.0), "K and V 2:4 in prefill only"),
        "kv24-decode": (_s(decode_sk=1.0, decode_sv=1.0), "K and V 2:4 in the cache (decode) only"),
        "v24-decode": (_s(decode_sv=1.0), "V 2:4 in the cache (decode) only"),
        "kv24-wide": (_s(**KV24, **WIDE), "K and V 2:4 in prefill and cache, sink 512 + window 2048 dense"),
        "old-default": (_s(0.5, prefill_sv=1.0, decode_sk=1.0, decode_sv=1.0),
                        "the former recipe: 50 % streaming, prefill S_V 1, decode S_K = S_V = 1"),
    })
    return out


PRESETS = _factors()


def preset(name: str) -> Setting:
    if name not in PRESETS:
        raise ValueError(f"unknown setting {name!r}; known: {', '.join(PRESETS)}")
    kw, desc = PRESETS[name]
    return Setting(name=name, description=desc, **{k: (dict(v) if isinstance(v, dict) else v) for k, v in kw.items()})


def custom(name: str, hs: dict, select: str = "aoh") -> Setting:
    """A setting outside the presets (the calibration ladder's rungs)."""
    return Setting(name=name, select=select, hs={**DENSE, **hs}, description="calibration rung")


def prepare_checkpoint(setting: Setting, root: Path, model: str | None = None) -> Path:
    """``hs-prep convert [MODEL] --output ROOT/<select> --select S`` unless it exists; the original checkpoint for a
    stock setting."""
    if setting.engine == "stock":
        from hs_prep.source import resolve

        return Path(resolve(model).path)
    out = Path(root) / setting.checkpoint_name()
    if (out / "config.json").is_file():
        return out
    cmd = [sys.executable, "-c", "from hs_prep.cli import main; main()", "convert"] + ([model] if model else []) + [
        "--output", str(out), "--retrieval-ratio", str(PREPARED_RATIO), "--select", setting.select,
        "--seed", str(setting.seed), "--overwrite"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"hs-prep convert failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return out


def checkpoint_facts(path: Path, setting: dict | None = None) -> dict:
    """The checkpoint's shape and, as the launcher would serve it with the hs flags ``setting``, how many of its groups
    are retrieval groups; with the sparsities, sink and window served (``hs``)."""
    config = json.loads((Path(path) / "config.json").read_text())
    text = config.get("text_config", config)
    section = config.get("hierasparse") or {}
    kv_groups = section.get("num_key_value_heads") or text.get("num_key_value_heads") or text["num_attention_heads"]
    layers = text["num_hidden_layers"]
    facts = {"layers": layers, "kv_groups": kv_groups,
             "head_dim": text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"],
             "retrieval_groups": layers * kv_groups, "total_groups": layers * kv_groups,
             "selection": section.get("selection"), "hs": dict(DENSE)}
    if section:
        from ..settings import resolve

        served = resolve(str(path), dict(setting or {}))
        facts["retrieval_groups"] = sum(len(g.retrieval) for g in served.layers)
        facts["hs"] = {"retrieval_ratio": (setting or {}).get("retrieval_ratio"), "prefill_sk": served.prefill.s_k,
                       "prefill_sv": served.prefill.s_v, "decode_sk": served.decode.s_k, "decode_sv": served.decode.s_v,
                       "sink_tokens": served.sink_tokens, "window_tokens": served.window_tokens, "source": served.recipe}
    return facts


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
