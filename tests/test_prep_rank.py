import math

import numpy as np
import pytest

from hs_prep import rank
from hs_prep.architecture import AttentionGeometry


def geometry(heads=4, kv=2, d=8, hidden=24, theta=10000.0, scaling=None):
    return AttentionGeometry("llama", 1, heads, kv, d, hidden, theta, scaling)


def full_svd_effective_rank(m: np.ndarray) -> float:
    s = np.linalg.svd(m, compute_uv=False)
    s = s[s > s[0] * 1e-10]
    p = s / s.sum()
    return math.exp(-(p * np.log(p)).sum())


def test_proxy_matches_full_svd_of_kernel_matrix():
    geo = geometry()
    g = np.random.default_rng(1)
    q = g.standard_normal((geo.num_heads * geo.head_dim, geo.hidden_size))
    k = g.standard_normal((geo.num_kv_heads * geo.head_dim, geo.hidden_size))
    ours = rank.head_effective_ranks(q, k, geo)
    for h in range(geo.num_heads):
        wq = q[h * geo.head_dim:(h + 1) * geo.head_dim]
        group = h // geo.heads_per_group
        wk = k[group * geo.head_dim:(group + 1) * geo.head_dim]
        assert ours[h] == pytest.approx(full_svd_effective_rank(wk.T @ wq), rel=1e-9)


def test_rope_aware_matches_full_svd_with_rotation_inserted():
    geo = geometry(heads=2, kv=1, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    g = np.random.default_rng(2)
    q = g.standard_normal((geo.num_heads * geo.head_dim, geo.hidden_size))
    k = g.standard_normal((geo.head_dim, geo.hidden_size))
    max_distance = 512
    rotations = rank.rope_rotations(geo, rank.log_spaced_distances(max_distance))
    ours = rank.rope_aware_head_effective_ranks(q, k, geo, max_distance)
    for h in range(geo.num_heads):
        wq = q[h * geo.head_dim:(h + 1) * geo.head_dim]
        expected = sum(full_svd_effective_rank(k.T @ r @ wq) for r in rotations) / len(rotations)
        assert ours[h] == pytest.approx(expected, rel=1e-9)


def test_rotation_is_orthogonal_and_identity_at_zero():
    geo = geometry(d=16)
    rot = rank.rope_rotations(geo, np.array([0, 7, 1000]))
    assert np.allclose(rot[0], np.eye(16))
    assert np.allclose(rot @ rot.transpose(0, 2, 1), np.broadcast_to(np.eye(16), (3, 16, 16)), atol=1e-12)


def test_effective_rank_extremes():
    assert rank.effective_rank(np.array([3.0, 0.0, 0.0])) == pytest.approx(1.0)
    assert rank.effective_rank(np.full(5, 2.0)) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="all-zero"):
        rank.effective_rank(np.zeros(4))


def test_low_rank_head_scores_lower():
    geo = geometry(heads=2, kv=2)
    g = np.random.default_rng(3)
    q = g.standard_normal((2 * geo.head_dim, geo.hidden_size))
    k = g.standard_normal((2 * geo.head_dim, geo.hidden_size))
    k[: geo.head_dim] = np.outer(g.standard_normal(geo.head_dim), g.standard_normal(geo.hidden_size))
    ranks = rank.head_effective_ranks(q, k, geo)
    assert ranks[0] == pytest.approx(1.0, abs=1e-6)
    assert ranks[1] > 3


def test_group_aggregation():
    geo = geometry(heads=4, kv=2)
    scores = np.array([1.0, 3.0, 10.0, 2.0])
    assert rank.group_scores(scores, geo, "mean").tolist() == [2.0, 6.0]
    assert rank.group_scores(scores, geo, "min").tolist() == [1.0, 2.0]
    assert rank.group_scores(scores, geo, "max").tolist() == [3.0, 10.0]


def test_spearman():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert rank.spearman(a, a * 10) == pytest.approx(1.0)
    assert rank.spearman(a, -a) == pytest.approx(-1.0)
    assert rank.spearman(a, np.array([1.0, 1.0, 2.0, 2.0])) == pytest.approx(0.894427, abs=1e-6)
    assert math.isnan(rank.spearman(a, np.ones(4)))
