"""CPU: the Triton streaming kernel under Triton's interpreter (TRITON_INTERPRET=1) vs the reference.

Key layouts: the serving backend's (sink, then a page-aligned window, then the chunk), keys in
random order with empty slots (position -1), decode (one token per sequence, padded key lists),
queries that see no key at all (lse -inf, out 0); GQA ratios 1 / 4 / 7, d 64 / 128, row tiles
of 16 to 128. The kernel must skip no block a query sees (the block bounds) and let no hidden key in.
"""

import pytest
from kv_cases import interpret

pytest.importorskip("triton")

CASES = [
    # layout, batch, t, keys, h_q, h_kv, d, sink, window, block_m
    ("backend", 1, 300, 0, 8, 2, 64, 128, 256, None),     # chunk from 0
    ("backend", 1, 150, 1000, 8, 2, 64, 64, 100, 64),       # a later chunk: prefix 1000, window not page-sized
    ("shuffled", 2, 40, 500, 4, 1, 128, 16, 64, 32),     # any order, empties
    ("decode", 3, 1, 448, 28, 4, 64, 128, 256, None),     # G 7, padded key lists
    ("shuffled", 1, 70, 200, 6, 6, 64, 0, 32, 16),       # MHA, no sink
    ("unseen", 1, 20, 128, 4, 2, 64, 8, 16, None),        # every key after the queries: nothing visible
]

SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from kv_cases import stream_case, rel_err
from hs_kernels import attention as ref, gpu

results = []
for case in json.loads(sys.argv[2]):
    layout, b, t, n, h_q, h_kv, d, sink, window, block_m = case
    gen = torch.Generator().manual_seed(len(results))
    q, q_pos, k, v, k_pos = stream_case(layout, b, t, n, h_q, h_kv, d, sink, window, torch.float16, gen, "cpu")
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"))
    gpu.triton_streaming(q, q_pos, k, v, k_pos, sink, window, 0.1, block_m, out=out, lse=lse)
    r_out, r_lse = ref.streaming_attention(q, q_pos, k, v, k_pos, sink, window, 0.1)
    seen = torch.isfinite(r_lse)
    out2, lse2 = gpu.triton_streaming(q, q_pos, k, v, k_pos, sink, window, 0.1, block_m,
                                      key_blocks=gpu.stream_key_blocks(k_pos))  # precomputed, as the backend does
    perm = torch.randperm(b * k.shape[1] + 37, generator=gen)[:b * k.shape[1]].view(b, -1)  # storage rows of the keys
    k_st, v_st = (torch.zeros(b * k.shape[1] + 37, h_kv, d, dtype=x.dtype).index_copy_(0, perm.flatten(), x.flatten(0, 1))
                  for x in (k, v))
    out3, lse3 = gpu.triton_streaming(q, q_pos, k_st, v_st, k_pos, sink, window, 0.1, block_m, k_rows=perm)
    out4, lse4 = gpu.triton_streaming(q, q_pos, k, v, k_pos, sink, window, 0.1, block_m, splits=3)  # merged partials
    results.append({"split_err": max(rel_err(out4, out) if seen.any() else 0.0,
                                     (lse4[seen] - lse[seen]).abs().max().item() if seen.any() else 0.0),
                    "split_unseen_ok": bool((lse4[~seen] == float("-inf")).all() and (out4[~seen] == 0).all()),
                    "same_with_blocks": bool(torch.equal(out, out2) and torch.equal(lse, lse2)),
                    "same_with_rows": bool(torch.equal(out, out3) and torch.equal(lse, lse3)),"rel_err": rel_err(out, r_out) if seen.any() else 0.0,
                    "lse_err": (lse[seen] - r_lse[seen]).abs().max().item() if seen.any() else 0.0,
                    "unseen_ok": bool((lse[~seen] == float("-inf")).all() and (out[~seen] == 0).all()),
                    "seen": int(seen.sum()), "nan": bool(out.isnan().any() or lse.isnan().any())})
print(json.dumps(results))
"""


def test_triton_streaming_interpreted_matches_reference():
    results = interpret(SCRIPT, CASES)
    assert len(results) == len(CASES)
    for case, r in zip(CASES, results):
        assert not r["nan"], (case, r)  # every element written, no NaN
        assert r["same_with_blocks"] and r["same_with_rows"], (case, r)
        assert r["split_err"] < 1e-3 and r["split_unseen_ok"], (case, r)
        assert r["unseen_ok"], (case, r)
        assert r["rel_err"] < 2e-3, (case, r)
        assert r["lse_err"] < 1e-3, (case, r)
    assert results[-1]["seen"] == 0 and all(r["seen"] > 0 for r in results[:-1])


def test_rows_fall_back_to_gathered_keys_off_the_gpu():
    """``streaming_attention(..., k_rows=)`` off CUDA: the reference on the gathered keys, cast to q's dtype."""
    import torch
    from kv_cases import stream_case

    from hs_kernels import attention as ref
    from hs_kernels import gpu

    gen = torch.Generator().manual_seed(3)
    q, q_pos, k, v, k_pos = stream_case("decode", 3, 1, 192, 8, 2, 64, 64, 128, torch.float32, gen, "cpu")
    rows = torch.randperm(600, generator=gen)[:3 * 192].view(3, 192)
    k_st, v_st = (torch.randn(600, 2, 64, generator=gen, dtype=torch.float64) for _ in range(2))
    k_st[rows], v_st[rows] = k.double(), v.double()
    out, lse = gpu.streaming_attention(q, q_pos, k_st, v_st, k_pos, 64, 128, 0.1, k_rows=rows)
    r_out, r_lse = ref.streaming_attention(q, q_pos, k, v, k_pos, 64, 128, 0.1)
    assert torch.equal(out, r_out) and torch.equal(lse, r_lse)
    with pytest.raises(ValueError, match="k_rows"):
        gpu.streaming_attention(q, q_pos, k, v, k_pos, 64, 128, k_rows=rows)  # per-key k with rows


def test_stream_splits_fill_idle_sms_only():
    from hs_kernels.gpu import stream_splits

    assert stream_splits(4, 7, 132) == 7  # a decode step of one sequence, 4 KV heads: a program per block
    assert stream_splits(64, 7, 132) == 2  # 16 sequences: twice the programs fill the SMs once
    assert stream_splits(132, 7, 132) == 1 and stream_splits(512, 7, 132) == 1  # a chunk's tiles fill them already
    assert stream_splits(1, 1, 132) == 1
