"""CPU: the Triton decode kernel under Triton's interpreter (TRITON_INTERPRET=1) vs the reference.

The interpreter runs the kernel's own code on CPU tensors, so CI checks its indexing (maps per sequence,
or a pool's read through pages), masking, 2:4 unpacking, online softmax and split combine on every path (dense / sparse / mixed pools,
GQA tiles 16 / 32 / 64, d 64 / 128 / 256), with the select form of the 2:4 unpacking (it cannot
run PTX: the prmt form is checked on the GPU, test_kernels_gpu_decode.py, with bfloat16, which
the interpreter lacks). The interpreter must be chosen before Triton decorates the kernel, hence a
fresh process.
"""

import pytest
from kv_cases import interpret

pytest.importorskip("triton")

CASES = [
    # batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v, splits
    (3, 8, 2, 64, "float16", [1, 130, 700], 0.5, 0.5, 3),
    (2, 8, 2, 128, "float16", [257, 64], 1.0, 0.0, 1),
    (2, 8, 2, 128, "float16", [333, 200], 0.0, 1.0, 2),
    (1, 8, 8, 64, "float16", [450], 1.0, 1.0, 4),
    (1, 40, 2, 64, "float16", [300], 0.5, 0.5, 2),
    (1, 64, 1, 64, "float16", [200], 0.3, 0.7, 1),
    (2, 4, 2, 256, "float16", [100, 77], 0.5, 0.5, 2),
    (1, 4, 1, 64, "float16", [640], 0.0, 0.0, 16),
]

SCRIPT = r"""
import json, math, sys, torch
sys.path.insert(0, sys.argv[1])
from kv_cases import make_case, paged, rel_err
from hs_kernels import attention as ref, gpu

results = []
for batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v, splits in json.loads(sys.argv[2]):
    dtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(len(results))
    k_pool, v_pool, k_index, v_index, sl = make_case(batch, h_kv, d, seq_lens, p_k, p_v, dtype, gen, "cpu")
    q = torch.randn(batch, h_q, d, generator=gen).to(dtype)
    parts = (torch.full((batch, h_q, splits, d), float("nan")), torch.full((batch, h_q, splits), float("nan")))
    if len(results) % 2:  # every other case reads a pool's maps through its pages
        k_map, v_map, pages = paged(k_index, v_index, gen)
        out, lse = gpu.triton_decode(q, k_pool, v_pool, k_map, v_map, sl, 0.11, splits, parts=parts, pages=pages)
    else:
        out, lse = gpu.triton_decode(q, k_pool, v_pool, k_index, v_index, sl, 0.11, splits, parts=parts)
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, 0.11)
    results.append({"rel_err": rel_err(out, r_out), "lse_err": (lse - r_lse).abs().max().item(),
                    "parts_nan": bool(parts[0].isnan().any() or parts[1].isnan().any()),
                    "dtype_ok": out.dtype == dtype and lse.dtype == torch.float32,
                    "kinds": [gpu._pool_kinds(k_pool), gpu._pool_kinds(v_pool)]})
print(json.dumps(results))
"""


def test_triton_decode_interpreted_matches_reference():
    results = interpret(SCRIPT, CASES)
    assert len(results) == len(CASES)
    kinds = {tuple(r["kinds"]) for r in results}
    assert {(1, 1), (2, 1), (1, 2), (3, 3), (2, 2)} <= kinds  # every load path ran
    for case, r in zip(CASES, results):
        assert r["rel_err"] < 2e-3, (case, r)  # float16 output rounding
        assert r["lse_err"] < 1e-3, (case, r)
        assert not r["parts_nan"], (case, r)  # every split's partial output written
        assert r["dtype_ok"], (case, r)


GROUPED_SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from kv_cases import extend_rows, make_case, paged, rel_err
from hs_kernels import attention as ref, gpu

results = []
for seqs, padding, h_q, h_kv, d, p_k, p_v, splits, tile_rows in json.loads(sys.argv[2]):
    gen = torch.Generator().manual_seed(100 + len(results))
    k_pool, v_pool, k_index, v_index, _ = make_case(len(seqs), h_kv, d, [p + t for p, t in seqs], p_k, p_v,
                                                    torch.float16, gen, "cpu")
    k_map, v_map, seq_pages = paged(k_index, v_index, gen)
    pages, groups, sl = extend_rows(seqs, padding, seq_pages)
    batch = len(sl)
    q = torch.randn(batch, h_q, d, generator=gen).to(torch.float16)
    parts = (torch.full((batch, h_q, splits, d), float("nan")), torch.full((batch, h_q, splits), float("nan")))
    out, lse = gpu.triton_decode(q, k_pool, v_pool, k_map, v_map, sl, 0.11, splits, parts=parts, pages=pages,
                                 groups=groups, tile_rows=tile_rows)
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, 0.11, pages=pages)
    results.append({"rel_err": rel_err(out, r_out), "lse_err": (lse - r_lse).abs().max().item(),
                    "parts_nan": bool(parts[0].isnan().any() or parts[1].isnan().any())})
print(json.dumps(results))
"""


def test_grouped_rows_read_their_blocks_once_per_tile_and_match_reference():
    """Rows of one sequence at successive lengths (an extend run as decode rows) packed several to a program: tiles
    that hold one sequence, that straddle two or three, padding rows of their own group, splits past a row's end;
    every row as the reference decodes it alone."""
    cases = [
        # (prefix, tokens) per sequence, padding rows, h_q, h_kv, d, p_k, p_v, splits, tile rows
        ([[130, 9]], 3, 8, 2, 64, 0.5, 0.5, 2, 4),
        ([[64, 3], [200, 2], [1, 4]], 2, 8, 2, 64, 1.0, 0.0, 3, 4),
        ([[300, 5], [70, 6]], 0, 12, 4, 128, 0.0, 1.0, 4, 8),
        ([[190, 20]], 4, 4, 1, 64, 0.5, 0.5, 1, None),
        ([[150, 6], [20, 3]], 1, 8, 2, 64, 1.0, 1.0, 3, 4),  # a block a split, as the grouped split rule runs them
    ]
    results = interpret(GROUPED_SCRIPT, cases)
    for case, r in zip(cases, results):
        assert r["rel_err"] < 2e-3, (case, r)
        assert r["lse_err"] < 1e-3, (case, r)
        assert not r["parts_nan"], (case, r)


def test_decode_tile_rows():
    from hs_kernels import gpu

    assert gpu.decode_tile_rows(4, 128) == 16  # Llama-3.1-8B: 64 tile rows
    assert gpu.decode_tile_rows(3, 64) == 16  # SmolLM2: 48 of them
    assert gpu.decode_tile_rows(4, 256) == 8
    assert gpu.decode_tile_rows(64, 128) == 1


def test_decode_stages():
    from hs_kernels import gpu

    assert gpu.decode_stages(16, 128) == 3 and gpu.decode_stages(16, 64) == 3  # grouped rows (H100 probe)
    assert gpu.decode_stages(8, 256) == 2  # 3 stages would double its spills (tests/test_kernels_resources.py)
    assert gpu.decode_stages(1, 128) == 2


def test_triton_decode_splits():
    """The Triton decode's split rule at the H200's 132 SMs: 8 at B=8, 32K (the measured best)."""
    from hs_kernels import gpu

    assert gpu.triton_decode_splits(8, 8, 512, 132) == 8
    assert gpu.triton_decode_splits(1, 8, 40, 132) == 5  # at least 8 blocks per split
    assert gpu.triton_decode_splits(64, 8, 512, 132) == 1  # the batch alone fills the GPU
    # grouped rows: about 2 programs per SM, down to one block per split (the H100's sweep, docs/kernels.md)
    assert gpu.triton_decode_splits(1, 4, 65, 132, tile_rows=16) == 65
    assert gpu.triton_decode_splits(4, 4, 1025, 132, tile_rows=16) == 16
    assert gpu.triton_decode_splits(1, 4, 40, 132, tile_rows=16) == 40


def test_wave_splits():
    """The CUDA decode's split choice on the H200's measured sweeps (132 SMs; B=8, 32K: 64 programs of
    512 blocks; docs/kernels.md) and at its edges."""
    from hs_kernels import gpu

    assert gpu.wave_splits(64, 512, 12 * 132) == 24  # v2: 24 splits were the fastest (0.221 ms)
    assert gpu.wave_splits(64, 512, 8 * 132) == 16  # v3: 0.226 ms, the best count timed 0.222
    assert gpu.wave_splits(64, 512, 3 * 132) == 6  # v4: 6 splits were the fastest (0.177 ms; 8: 0.257)
    assert gpu.wave_splits(1, 10, 100) == 10  # room for every block alone
    assert gpu.wave_splits(200, 10, 100) == 1  # already two waves unsplit


MERGE_SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from hs_kernels import attention as ref, gpu

results = []
for t, h, d, splits, split_major, per in json.loads(sys.argv[2]):
    gen = torch.Generator().manual_seed(len(results))
    shape = (splits, t, h) if split_major else (t, h, splits)
    o = torch.randn(*shape, d, generator=gen).to(torch.float16)
    lse = torch.randn(*shape, generator=gen) * 3
    lse.view(-1)[::7] = float("-inf")  # partials without keys
    o_part, lse_part = (o.permute(1, 2, 0, 3), lse.permute(1, 2, 0)) if split_major else (o, lse)
    lse_part[1, 0] = float("-inf")  # a row whose partials all lack keys
    out = torch.full((t, h, d), float("nan"), dtype=torch.float16)
    lse_out = torch.full((t, h), float("nan"))
    gpu._merge_splits(o_part, lse_part, out, lse_out, rows_per_program=per)
    r_out, r_lse = o_part[:, :, 0], lse_part[:, :, 0]
    for s in range(1, splits):
        r_out, r_lse = ref.merge_attention(r_out, r_lse, o_part[:, :, s], lse_part[:, :, s])
    both = r_lse.isfinite()
    results.append({"out_err": (out.float() - r_out.float())[both].abs().max().item(),
                    "lse_err": (lse_out - r_lse)[both].abs().max().item(),
                    "empty_rows": int((~both).sum()),
                    "empty_rows_ok": bool((lse_out[~both] == float("-inf")).all() and (out[~both] == 0).all())})
print(json.dumps(results))
"""


def test_split_merge_reads_partials_at_any_split_stride():
    """The combine merges partials laid out split-major ([splits, rows, D], the prefill's CUDA prefix path) as it does
    split-minor ones (decode), one row per program or several (the last program's rows part past the end): the
    reference's pairwise merge, rows whose partials all lack keys -inf and 0."""
    cases = [(5, 3, 64, 2, True, None), (4, 2, 128, 3, False, None), (3, 4, 64, 2, False, None), (5, 3, 64, 3, True, 4),
             (7, 2, 64, 5, True, 8)]
    results = interpret(MERGE_SCRIPT, cases)
    for case, r in zip(cases, results):
        assert r["out_err"] < 2e-3 and r["lse_err"] < 1e-5, (case, r)
        assert r["empty_rows"] >= 1 and r["empty_rows_ok"], (case, r)


def test_split_merge_refuses_partials_that_do_not_flatten():
    import torch

    from hs_kernels import gpu

    o = torch.zeros(2, 4, 3, 8)
    with pytest.raises(ValueError, match="flatten"):
        gpu._merge_splits(o.transpose(0, 1), torch.zeros(2, 4, 3), torch.zeros(4, 2, 8), torch.zeros(4, 2))
