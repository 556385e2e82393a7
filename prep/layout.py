"""Where each KV group goes: retrieval groups (lowest scores) first, balanced over tensor-parallel ranks."""
import math
from dataclasses import dataclass

import numpy as np

from hs_prep.errors import PrepError

SCOPES = ("layer", "model")


@dataclass(frozen=True)
class LayerLayout:
    permutation: list[int]  # permutation[i] = original KV group now at position i
    is_retrieval: list[bool]  # per position, after permutation

    @property
    def num_retrieval(self) -> int:
        return sum(self.is_retrieval)


def retrieval_count(num_groups: int, ratio: float, tp_size: int) -> int:
    """k = ceil(ratio * G), raised to a multiple of tp_size so that every rank holds the same number."""
    if not 0 < ratio <= 1:
        raise PrepError(f"retrieval ratio must be in (0, 1], got {ratio}")
    check_tp(num_groups, tp_size)
    k = max(1, math.ceil(ratio * num_groups - 1e-9))
    return math.ceil(k / tp_size) * tp_size


def check_tp(num_groups: int, tp_size: int) -> None:
    if tp_size < 1 or num_groups % tp_size:
        raise PrepError(f"--tp-size {tp_size} does not divide the {num_groups} KV groups")


def plan_layer(scores: np.ndarray, num_retrieval: int, tp_size: int) -> LayerLayout:
    """Deal the groups, in ascending score order, round-robin over the tp rank blocks.

    SGLang gives rank r the contiguous KV groups [r*G/t, (r+1)*G/t). Dealing retrieval groups first and
    then streaming groups gives every block num_retrieval/t retrieval groups, each block sorted
    retrieval-first and by score inside each kind. Ties keep the original order.
    """
    num_groups = len(scores)
    order = np.argsort(scores, kind="stable").tolist()
    blocks: list[list[int]] = [[] for _ in range(tp_size)]
    for rank_in_order, group in enumerate(order):
        blocks[rank_in_order % tp_size].append(group)
    per_block = num_retrieval // tp_size
    permutation, is_retrieval = [], []
    for block in blocks:
        permutation += block
        is_retrieval += [i < per_block for i in range(num_groups // tp_size)]
    return LayerLayout(permutation, is_retrieval)


def selection_keys(section: dict) -> list[list[float]]:
    """Per layer and prepared position, the key its selection ranked the groups by (ascending = retrieval first)."""
    selection = section.get("selection", "aoh")
    keys = []
    for layer_no, layer in enumerate(section["layers"]):
        scores = [layer["group_scores"][g] for g in layer["permutation"]]
        if selection == "reverse":
            scores = [-x for x in scores]
        elif selection == "random":  # positions hold a random order already; random keys, ascending within the layer
            rng = np.random.default_rng([section.get("seed", 0), layer_no])
            scores = sorted(rng.random(len(scores)).tolist())
        keys.append(scores)
    return keys


def relayout(section: dict, ratio: float, scope: str = "layer") -> list[list[bool]]:
    """Per layer of a prepared checkpoint's ``hierasparse`` section, the ``is_retrieval`` flags at another retrieval
    ratio. Each rank block's groups are in selection order, so its first positions are its lowest-ranked. ``scope``
    "layer": ``retrieval_count`` groups in every layer (the AoH paper); "model": the ``ceil(ratio * L * G)``
    lowest-ranked groups of the whole model, each layer's count raised to a multiple of the tp size."""
    if scope not in SCOPES:
        raise PrepError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    tp_size = section.get("tp_size", 1)
    sizes = [len(layer["is_retrieval"]) for layer in section["layers"]]
    if scope == "layer":
        counts = [retrieval_count(g, ratio, tp_size) for g in sizes]
    else:
        if not 0 < ratio <= 1:
            raise PrepError(f"retrieval ratio must be in (0, 1], got {ratio}")
        keys = selection_keys(section)
        ranked = sorted((key, layer, i) for layer, row in enumerate(keys) for i, key in enumerate(row))
        counts = [0] * len(sizes)
        for _, layer, _ in ranked[:math.ceil(ratio * sum(sizes) - 1e-9)]:
            counts[layer] += 1
        counts = [math.ceil(c / tp_size) * tp_size for c in counts]
    flags = []
    for num_groups, count in zip(sizes, counts):
        per_block = count // tp_size
        flags.append([i % (num_groups // tp_size) < per_block for i in range(num_groups)])
    return flags
