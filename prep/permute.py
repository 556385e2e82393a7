"""Reorder KV groups inside raw tensor bytes, so any dtype is permuted exactly and without conversion.

q_proj rows hold each KV group's query heads contiguously (HF's repeat_kv convention: KV head g serves
query heads g*r .. g*r+r-1), k_proj/v_proj rows hold one head per group, and o_proj columns follow
q_proj rows. Moving whole group blocks therefore keeps the attention function unchanged.
"""
from typing import Callable

import numpy as np


def permute_rows(data: bytes, permutation: list[int]) -> memoryview:
    """Tensor whose leading dim splits into len(permutation) equal group blocks (q/k/v weights, biases)."""
    return memoryview(np.frombuffer(data, np.uint8).reshape(len(permutation), -1)[permutation].reshape(-1))


def permute_columns(data: bytes, permutation: list[int], rows: int) -> memoryview:
    """[rows, G*c] tensor (o_proj weight): permute the G column blocks of every row."""
    blocks = np.frombuffer(data, np.uint8).reshape(rows, len(permutation), -1)
    return memoryview(blocks[:, permutation].reshape(-1))


def attention_edit(key: str, permutation: list[int], hidden_size: int) -> Callable[[bytes], memoryview] | None:
    """The byte transform for one attention tensor ("q_proj.weight", ...), or None if it needs none."""
    if key == "o_proj.weight":
        return lambda data: permute_columns(data, permutation, hidden_size)
    if key == "o_proj.bias":
        return None
    return lambda data: permute_rows(data, permutation)
