"""The measurement probes (benchmarks/kernels/probes: the operand layouts behind docs/kernels.md)
still compile for sm_90a with the machine's nvcc, so that their figures can be re-measured as documented; and the
Trans-Both driver's oracle, which its GPU check relies on, is right (on the CPU)."""

import subprocess
from pathlib import Path

import pytest
from kv_cases import trans_both_driver

PROBES = sorted((Path(__file__).parent.parent / "benchmarks" / "kernels" / "probes").glob("*.cu"))


def test_the_probes_are_found():
    assert {p.stem for p in PROBES} >= {"mma_sp_layout", "wgmma_sp_layout", "wgmma_tile_layout"}


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.stem)
def test_probe_builds_for_hopper(probe, tmp_path):
    from hs_kernels import nvcc

    if nvcc.find() is None:
        pytest.skip("no nvcc on this machine")
    out = tmp_path / "probe.cubin"
    proc = subprocess.run([nvcc.find(), "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-o", str(out),
                           str(probe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.stat().st_size > 0


@pytest.mark.parametrize("t, prefix, q_pos0", [(16, 64, None), (40, 192, 152), (40, 192, 76), (70, 256, 0)])
def test_trans_both_oracle(t, prefix, q_pos0):
    """The oracle the GPU check compares the probe with: the prefix's pools decompressed (slots shuffled), without a
    mask or causally, equals attention on the dense pruned keys computed here by SDPA with an explicit mask."""
    import torch
    import torch.nn.functional as F

    drv = trans_both_driver()
    gen = torch.Generator().manual_seed(t + prefix)
    h_kv = 2
    q = torch.randn(t, h_kv * drv.G, drv.D, generator=gen).to(torch.bfloat16)
    k_pool, k_index, v_pool, v_index = drv.sparse_prefix(prefix, h_kv, gen)
    out, lse = drv.reference(q, drv.dense(k_pool, k_index), drv.dense(v_pool, v_index), drv.D ** -0.5, q_pos0)

    k, v = (p.gather(i).flatten(1, 2).float() for p, i in ((k_pool, k_index), (v_pool, v_index)))  # [h_kv, prefix, d]
    allowed = torch.ones(t, prefix, dtype=torch.bool)
    if q_pos0 is not None:
        allowed = torch.arange(prefix)[None, :] <= torch.arange(q_pos0, q_pos0 + t)[:, None]
    expect = F.scaled_dot_product_attention(q.float().transpose(0, 1), k.repeat_interleave(drv.G, 0),
                                            v.repeat_interleave(drv.G, 0), attn_mask=allowed).transpose(0, 1)
    assert torch.allclose(out, expect, atol=1e-5, rtol=1e-4)
    scores = torch.einsum("thd,hkd->htk", q.float(), k.repeat_interleave(drv.G, 0)) * drv.D ** -0.5
    assert torch.allclose(lse, scores.masked_fill(~allowed, float("-inf")).logsumexp(-1).t(), atol=1e-4)
