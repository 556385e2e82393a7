"""AoH effective rank of each query head's kernel M_h = W_K^T W_Q, from the d_head x d_head proxy.

The nonzero singular values of M_h are the square roots of the eigenvalues of
C_h = (W_Q W_Q^T)(W_K W_K^T) (paper eq. 5-6). C_h is not symmetric; we take the eigenvalues of the
similar symmetric matrix G_K^{1/2} G_Q G_K^{1/2} in float64, which are real and non-negative.
"""
import math

import torch

from hs_prep.architecture import AttentionGeometry

AGGREGATES = {"mean": lambda x: x.mean(-1), "min": lambda x: x.amin(-1), "max": lambda x: x.amax(-1)}


def gram_matrices(q_weight: torch.Tensor, k_weight: torch.Tensor, geo: AttentionGeometry):
    """W W^T per query head [H, d, d] and per KV group [G, d, d], in float64."""
    wq = q_weight.to(torch.float64).reshape(geo.num_heads, geo.head_dim, -1)
    wk = k_weight.to(torch.float64).reshape(geo.num_kv_heads, geo.head_dim, -1)
    return wq @ wq.transpose(-1, -2), wk @ wk.transpose(-1, -2)


def _sqrt_psd(gram: torch.Tensor) -> torch.Tensor:
    evals, evecs = torch.linalg.eigh(gram)
    return (evecs * evals.clamp_min(0).sqrt().unsqueeze(-2)) @ evecs.transpose(-1, -2)


def kernel_singular_values(gram_q: torch.Tensor, gram_k: torch.Tensor, geo: AttentionGeometry) -> torch.Tensor:
    """Singular values of every head's M_h from Gram matrices [..., H, d, d] and [..., G, d, d]; descending."""
    root_k = _sqrt_psd(gram_k).repeat_interleave(geo.heads_per_group, dim=-3)
    sym = root_k @ gram_q @ root_k
    evals = torch.linalg.eigvalsh((sym + sym.transpose(-1, -2)) / 2)
    return evals.clamp_min(0).sqrt().flip(-1)


def effective_rank(singular_values: torch.Tensor) -> torch.Tensor:
    """exp(Shannon entropy of the normalized spectrum) (paper eq. 4), over the last dim."""
    total = singular_values.sum(-1, keepdim=True)
    if (total <= 0).any():
        raise ValueError("a head has an all-zero query-key kernel; its effective rank is undefined")
    p = singular_values / total
    return torch.exp(-torch.special.xlogy(p, p).sum(-1))


def head_effective_ranks(q_weight, k_weight, geo: AttentionGeometry) -> torch.Tensor:
    """Vanilla AoH score of every query head of one layer: [H] float64."""
    gram_q, gram_k = gram_matrices(q_weight, k_weight, geo)
    return effective_rank(kernel_singular_values(gram_q, gram_k, geo))


def rope_inv_freq(geo: AttentionGeometry) -> torch.Tensor:
    """Per-pair rotary frequencies, with the llama3 and linear scalings applied when configured."""
    d = geo.head_dim
    inv = geo.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    scaling = geo.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        original = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = ((original / wavelen - low) / (high - low)).clamp(0, 1)
        inv = (1 - smooth) * inv / factor + smooth * inv
    return inv


def rope_rotations(geo: AttentionGeometry, distances: torch.Tensor) -> torch.Tensor:
    """R_Delta for each distance: [n, d, d], rotating pair (i, i + d/2) by Delta * inv_freq[i]."""
    half = geo.head_dim // 2
    angle = distances.to(torch.float64)[:, None] * rope_inv_freq(geo)[None, :]
    cos, sin = angle.cos(), angle.sin()
    rot = torch.zeros(len(distances), geo.head_dim, geo.head_dim, dtype=torch.float64)
    idx = torch.arange(half)
    rot[:, idx, idx] = cos
    rot[:, idx + half, idx + half] = cos
    rot[:, idx, idx + half] = -sin
    rot[:, idx + half, idx] = sin
    return rot


def log_spaced_distances(max_distance: int, count: int = 16) -> torch.Tensor:
    points = torch.logspace(0, math.log10(max_distance), count, dtype=torch.float64).round().long()
    return torch.unique(points)


def rope_aware_head_effective_ranks(q_weight, k_weight, geo: AttentionGeometry, max_distance: int) -> torch.Tensor:
    """Paper eq. 9: mean over log-spaced Delta <= max_distance of ER((R G_Q R^T) G_K): [H] float64."""
    gram_q, gram_k = gram_matrices(q_weight, k_weight, geo)
    rot = rope_rotations(geo, log_spaced_distances(max_distance))[:, None]  # [n, 1, d, d]
    rotated_q = rot @ gram_q[None] @ rot.transpose(-1, -2)
    return effective_rank(kernel_singular_values(rotated_q, gram_k[None], geo)).mean(0)


def group_scores(head_ranks: torch.Tensor, geo: AttentionGeometry, aggregate: str) -> torch.Tensor:
    """Aggregate per-head scores [H] into per-KV-group scores [G]."""
    return AGGREGATES[aggregate](head_ranks.reshape(geo.num_kv_heads, geo.heads_per_group))


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation with average ranks for ties (NaN when either side is constant)."""
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = (ra.norm() * rb.norm()).item()
    return math.nan if denom == 0 else float((ra @ rb).item() / denom)


def _average_ranks(x: torch.Tensor) -> torch.Tensor:
    x = x.to(torch.float64)
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(len(x), dtype=torch.float64)
    for value in torch.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks
