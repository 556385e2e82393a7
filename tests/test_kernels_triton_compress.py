"""CPU: the Triton compression kernel under Triton's interpreter (TRITON_INTERPRET=1) vs the reference.

Bit-exact values and metadata, loss up to summation order, for K and V, d 64 / 128 / 256, float16
and float32 (bfloat16 runs on the GPU: test_kernels_gpu_compress.py), on blocks with ties, -0, inf
and NaN; the pool is poisoned, some blocks are loss-only (slot -1), and untouched slots must stay so.
"""

import pytest
from kv_cases import interpret

pytest.importorskip("triton")

CASES = [  # operand, d, dtype
    ("k", 64, "float16"), ("v", 64, "float16"), ("k", 128, "float32"), ("v", 128, "float16"),
    ("k", 256, "float16"), ("v", 256, "float32"),
]

SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from kv_cases import special_blocks
from hs_kernels import gpu
from hs_kernels.compressor import compress_blocks
from hs_kernels.format import sparse_shapes
from hs_kernels.pruner import block_loss, element_mask

results = []
for operand, d, dtype in json.loads(sys.argv[2]):
    dtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(len(results))
    n, n_slots = 9, 13
    blocks = special_blocks(n, d, dtype, gen, "cpu")
    vshape, mshape = sparse_shapes(operand, d)
    values = torch.full((n_slots, *vshape), 7.0, dtype=dtype)
    meta = torch.full((n_slots, *mshape), -7, dtype=torch.int16)
    slots = torch.randperm(n_slots, generator=gen)[:n].int()
    slots[1::4] = -1  # block 0 (the NaN / inf one) is compressed
    loss = torch.full((n,), -7.0)
    gpu.triton_compress(blocks, operand, slots, values, meta, loss)
    mask = element_mask(blocks, operand)
    r_vals, r_meta = compress_blocks(blocks, mask, operand)
    r_loss = block_loss(blocks, mask)
    sel = slots >= 0
    untouched = torch.ones(n_slots, dtype=torch.bool)
    untouched[slots[sel].long()] = False
    bits = torch.int16 if dtype != torch.float32 else torch.int32
    results.append({
        "values": torch.equal(values[slots[sel].long()].view(bits), r_vals[sel].view(bits)),
        "meta": torch.equal(meta[slots[sel].long()], r_meta[sel]),
        "untouched": bool((values[untouched] == 7.0).all() and (meta[untouched] == -7).all()),
        "loss": torch.allclose(loss, r_loss, rtol=1e-5, atol=1e-5, equal_nan=True),
        "finite_losses": torch.isfinite(r_loss).float().mean().item(),
        "meta_range": [int(r_meta.min()), int(r_meta.max())],
    })
print(json.dumps(results))
"""


def test_triton_compress_interpreted_matches_reference():
    results = interpret(SCRIPT, CASES)
    assert len(results) == len(CASES)
    for case, r in zip(CASES, results):
        assert r["values"] and r["meta"] and r["untouched"] and r["loss"], (case, r)
        assert r["finite_losses"] > 0.3, (case, r)  # the loss check is not only NaN == NaN
    assert any(r["meta_range"][0] < 0 for r in results)  # words with bit 15 set wrap into int16
