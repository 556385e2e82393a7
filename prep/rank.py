"""AoH effective rank of each query head's kernel M_h = W_K^T W_Q, from the d_head x d_head proxy.

The nonzero singular values of M_h are the square roots of the eigenvalues of
C_h = (W_Q W_Q^T)(W_K W_K^T) (paper eq. 5-6). C_h is not symmetric; we take the eigenvalues of the
similar symmetric matrix G_K^{1/2} G_Q G_K^{1/2} in float64, which are real and non-negative.
NumPy rather than torch: conversion never pays torch's import, and float64 LAPACK is all it needs.
"""
import math

import numpy as np

from hs_prep.architecture import AttentionGeometry

AGGREGATES = {"mean": np.mean, "min": np.min, "max": np.max}


def gram_matrices(q_weight: np.ndarray, k_weight: np.ndarray, geo: AttentionGeometry):
    """W W^T per query head [H, d, d] and per KV group [G, d, d], in float64."""
    wq = np.asarray(q_weight, np.float64).reshape(geo.num_heads, geo.head_dim, -1)
    wk = np.asarray(k_weight, np.float64).reshape(geo.num_kv_heads, geo.head_dim, -1)
    return wq @ wq.transpose(0, 2, 1), wk @ wk.transpose(0, 2, 1)


def _sqrt_psd(gram: np.ndarray) -> np.ndarray:
    evals, evecs = np.linalg.eigh(gram)
    return (evecs * np.sqrt(np.clip(evals, 0, None))[..., None, :]) @ np.swapaxes(evecs, -1, -2)


def kernel_singular_values(gram_q: np.ndarray, gram_k: np.ndarray, geo: AttentionGeometry) -> np.ndarray:
    """Singular values of every head's M_h from Gram matrices [..., H, d, d] and [..., G, d, d]; descending."""
    root_k = np.repeat(_sqrt_psd(gram_k), geo.heads_per_group, axis=-3)
    sym = root_k @ gram_q @ root_k
    evals = np.linalg.eigvalsh((sym + np.swapaxes(sym, -1, -2)) / 2)
    return np.sqrt(np.clip(evals, 0, None))[..., ::-1]


def effective_rank(singular_values: np.ndarray) -> np.ndarray:
    """exp(Shannon entropy of the normalized spectrum) (paper eq. 4), over the last axis."""
    total = singular_values.sum(-1, keepdims=True)
    if (total <= 0).any():
        raise ValueError("a head has an all-zero query-key kernel; its effective rank is undefined")
    p = singular_values / total
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return np.exp(-plogp.sum(-1))


def head_effective_ranks(q_weight, k_weight, geo: AttentionGeometry) -> np.ndarray:
    """Vanilla AoH score of every query head of one layer: [H] float64."""
    gram_q, gram_k = gram_matrices(q_weight, k_weight, geo)
    return effective_rank(kernel_singular_values(gram_q, gram_k, geo))


def rope_inv_freq(geo: AttentionGeometry) -> np.ndarray:
    """Per-pair rotary frequencies, with the llama3 and linear scalings applied when configured."""
    d = geo.head_dim
    inv = geo.rope_theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    scaling = geo.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        original = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = np.clip((original / wavelen - low) / (high - low), 0, 1)
        inv = (1 - smooth) * inv / factor + smooth * inv
    return inv


def rope_rotations(geo: AttentionGeometry, distances: np.ndarray) -> np.ndarray:
    """R_Delta for each distance: [n, d, d], rotating pair (i, i + d/2) by Delta * inv_freq[i]."""
    half = geo.head_dim // 2
    angle = np.asarray(distances, np.float64)[:, None] * rope_inv_freq(geo)[None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    rot = np.zeros((len(distances), geo.head_dim, geo.head_dim))
    idx = np.arange(half)
    rot[:, idx, idx] = cos
    rot[:, idx + half, idx + half] = cos
    rot[:, idx, idx + half] = -sin
    rot[:, idx + half, idx] = sin
    return rot


def log_spaced_distances(max_distance: int, count: int = 16) -> np.ndarray:
    return np.unique(np.round(np.logspace(0, math.log10(max_distance), count)).astype(np.int64))


def rope_aware_head_effective_ranks(q_weight, k_weight, geo: AttentionGeometry, max_distance: int) -> np.ndarray:
    """Paper eq. 9: mean over log-spaced Delta <= max_distance of ER((R G_Q R^T) G_K): [H] float64."""
    gram_q, gram_k = gram_matrices(q_weight, k_weight, geo)
    rot = rope_rotations(geo, log_spaced_distances(max_distance))[:, None]  # [n, 1, d, d]
    rotated_q = rot @ gram_q[None] @ np.swapaxes(rot, -1, -2)
    return effective_rank(kernel_singular_values(rotated_q, gram_k[None], geo)).mean(0)


def group_scores(head_ranks: np.ndarray, geo: AttentionGeometry, aggregate: str) -> np.ndarray:
    """Aggregate per-head scores [H] into per-KV-group scores [G]."""
    return AGGREGATES[aggregate](np.reshape(head_ranks, (geo.num_kv_heads, geo.heads_per_group)), axis=-1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation with average ranks for ties (NaN when either side is constant)."""
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(np.linalg.norm(ra) * np.linalg.norm(rb))
    return math.nan if denom == 0 else float(ra @ rb / denom)


def _average_ranks(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    values, inverse = np.unique(x, return_inverse=True)
    order = np.argsort(x, kind="stable")
    ranks = np.empty_like(x)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    sums = np.bincount(inverse, weights=ranks, minlength=len(values))
    return (sums / np.bincount(inverse, minlength=len(values)))[inverse]
