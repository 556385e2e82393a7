"""hs-prep convert: rank KV groups by AoH effective rank and write the permuted checkpoint."""
import json
import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from hs_prep import rank
from hs_prep.checkpoint import Checkpoint, open_checkpoint
from hs_prep.errors import PrepError
from hs_prep.layout import LayerLayout, plan_layer, retrieval_count
from hs_prep.output import atomic_directory
from hs_prep.permute import attention_edit
from hs_prep.report import write_report
from hs_prep.safetensors_file import rewrite
from hs_prep.source import Source

FORMAT_VERSION = 1
REPORT_JSON = "hs_report.json"
REPORT_PNG = "hs_report.png"
SELECTIONS = ("aoh", "random", "reverse")  # random and reverse are the AoH paper's controls
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack")


@dataclass(frozen=True)
class ConvertOptions:
    retrieval_ratio: float = 0.5
    aggregate: str = "mean"
    rope_aware: bool = False
    rope_max_distance: int = 32768
    tp_size: int = 1
    overwrite: bool = False
    selection: str = "aoh"
    seed: int = 0


@dataclass
class LayerRanking:
    head_ranks: np.ndarray  # [H] vanilla AoH
    scores: np.ndarray  # [H] the score the selection used (vanilla, or RoPE-aware)
    group_scores: np.ndarray  # [G]
    layout: LayerLayout


def rank_layers(ckpt: Checkpoint, options: ConvertOptions) -> list[LayerRanking]:
    geo = ckpt.geometry
    k = retrieval_count(geo.num_kv_heads, options.retrieval_ratio, options.tp_size)
    rng = np.random.default_rng(options.seed)
    rankings = []
    for layer in range(geo.num_layers):
        q, kw = ckpt.read_attention(layer, "q_proj.weight"), ckpt.read_attention(layer, "k_proj.weight")
        try:
            head_ranks = rank.head_effective_ranks(q, kw, geo)
            scores = (rank.rope_aware_head_effective_ranks(q, kw, geo, options.rope_max_distance)
                      if options.rope_aware else head_ranks)
        except ValueError as e:
            raise PrepError(f"layer {layer}: {e}") from None
        groups = rank.group_scores(scores, geo, options.aggregate)
        order = {"aoh": groups, "reverse": -groups, "random": rng.permutation(len(groups)).astype(float)}
        layout = plan_layer(order[options.selection], k, options.tp_size)
        rankings.append(LayerRanking(head_ranks, scores, groups, layout))
    return rankings


def hierasparse_section(ckpt: Checkpoint, source: Source, options: ConvertOptions, rankings) -> dict:
    geo = ckpt.geometry
    section = {
        "format_version": FORMAT_VERSION,
        "metric": "effective_rank_rope" if options.rope_aware else "effective_rank",
        "aggregate": options.aggregate,
        "selection": options.selection,
        "retrieval_ratio": options.retrieval_ratio,
        "tp_size": options.tp_size,
        "num_key_value_heads": geo.num_kv_heads,
        "heads_per_group": geo.heads_per_group,
        "family": geo.family,
        "source": source.describe(),
        "layers": [
            {
                "num_retrieval": r.layout.num_retrieval,
                "is_retrieval": r.layout.is_retrieval,
                "permutation": r.layout.permutation,
                "group_scores": [round(float(s), 6) for s in r.group_scores],
                "head_effective_rank": [round(float(s), 6) for s in r.head_ranks],
            }
            for r in rankings
        ],
    }
    if options.selection == "random":
        section["seed"] = options.seed
    if options.rope_aware:
        agreement = [rank.spearman(r.head_ranks, r.scores) for r in rankings]
        finite = [a for a in agreement if not math.isnan(a)]
        section["rope_aware"] = {
            "max_distance": options.rope_max_distance,
            "distances": rank.log_spaced_distances(options.rope_max_distance).tolist(),
            "spearman_vs_vanilla_per_layer": [None if math.isnan(a) else round(a, 6) for a in agreement],
            "spearman_vs_vanilla_mean": round(sum(finite) / len(finite), 6) if finite else None,
        }
    return section


def write_prepared(ckpt: Checkpoint, out_dir: str, section: dict) -> None:
    geo = ckpt.geometry
    for file_name, shard in ckpt.shards.items():
        edits = {}
        for layer, keys in ckpt.attention.items():
            permutation = section["layers"][layer]["permutation"]
            for key, owner in keys.items():
                edit = attention_edit(key, permutation, geo.hidden_size)
                if owner == file_name and edit is not None:
                    edits[ckpt.attention_names[layer][key]] = edit
        rewrite(shard, os.path.join(out_dir, file_name), edits)
    for name in sorted(os.listdir(ckpt.path)):
        src = os.path.join(ckpt.path, name)
        if name == "config.json" or name in ckpt.shards or name.endswith(WEIGHT_SUFFIXES) or not os.path.isfile(src):
            continue
        shutil.copyfile(src, os.path.join(out_dir, name))  # tokenizer, generation config, index, licence
    config = dict(ckpt.config, hierasparse=section)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def convert(source: Source, output: str, options: ConvertOptions) -> dict:
    """Prepare source into output (atomically); returns the hierasparse section written to config.json."""
    if options.aggregate not in rank.AGGREGATES:
        raise PrepError(f"--aggregate must be one of {', '.join(rank.AGGREGATES)}")
    if options.selection not in SELECTIONS:
        raise PrepError(f"--select must be one of {', '.join(SELECTIONS)}")
    if os.path.abspath(output) == os.path.abspath(source.path):
        raise PrepError("the output directory must differ from the input checkpoint")
    ckpt = open_checkpoint(source.path)
    retrieval_count(ckpt.geometry.num_kv_heads, options.retrieval_ratio, options.tp_size)
    with atomic_directory(output, options.overwrite) as out_dir:
        rankings = rank_layers(ckpt, options)
        section = hierasparse_section(ckpt, source, options, rankings)
        # The report renders while the shards stream (the copies release the GIL).
        with ThreadPoolExecutor(1) as pool:
            report = pool.submit(write_report, section, ckpt.geometry, os.path.join(out_dir, REPORT_JSON),
                                 os.path.join(out_dir, REPORT_PNG))
            write_prepared(ckpt, out_dir, section)
            report.result()
    return section
