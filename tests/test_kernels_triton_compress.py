"""CPU: the Triton compression kernel and tile pruner under Triton's interpreter (TRITON_INTERPRET=1) vs the reference.

Compression: bit-exact values and metadata, loss up to summation order, for K and V, d 64 / 128 / 256, float16
and float32 (bfloat16 runs on the GPU: test_kernels_gpu_compress.py), on blocks with ties, -0, inf
and NaN; the pool is poisoned, some blocks are loss-only (slot -1), and untouched slots must stay so.
The same compressor on a chunk's tiles read in place (``[H, tiles, 64, D]``, strided).
Pruning (``prune_kernel``): a chunk ``[T, H, D]`` given as a strided view (some heads of a wider tensor, tokens before
its first tile and a partial tile after its last); the chosen tiles' pruned elements zeroed bit-exactly as
``element_mask`` says, every other element of the copy untouched; the losses equal ``block_loss``.
"""

import pytest
from kv_cases import interpret

pytest.importorskip("triton")

CASES = [  # operand, d, dtype
    ("k", 64, "float16"), ("v", 64, "float16"), ("k", 128, "float32"), ("v", 128, "float16"),
    ("k", 256, "float16"), ("v", 256, "float32"),
]

HEADER = r"""
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
    bits = torch.int16 if dtype != torch.float32 else torch.int32
"""

SCRIPT = HEADER + r"""
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


PRUNE_SCRIPT = HEADER + r"""
    h, tiles, start, tail = 3, 4, 5, 7
    t = start + tiles * 64 + tail
    wide = special_blocks(-(-t * 2 * h // 64), d, dtype, gen, "cpu").flatten(0, 1)[:t * 2 * h].view(t, 2 * h, d)
    x = wide[:, 1:1 + h]  # token stride 2 h d, head stride d
    blocks = x[start:start + tiles * 64].unflatten(0, (tiles, 64)).permute(2, 0, 1, 3)
    sparse = torch.rand(h, tiles, generator=gen) < 0.5
    sparse[0, 0] = sparse[1, 1] = True
    sparse[2, 2] = False
    out = x.clone(memory_format=torch.contiguous_format)
    gpu.triton_prune(x[start:], operand, sparse.view(torch.uint8), out[start:], None)
    mask = element_mask(blocks, operand)
    want = x.clone(memory_format=torch.contiguous_format)
    want[start:start + tiles * 64] = torch.where(sparse[..., None, None] & ~mask, 0, blocks).permute(1, 2, 0, 3).flatten(0, 1)
    loss = torch.full((h, tiles), -7.0)
    gpu.triton_prune(x[start:], operand, None, None, loss)
    r_loss = block_loss(blocks, mask)
    results.append({
        "pruned": torch.equal(out.view(bits), want.view(bits)),
        "changed": bool((out.view(bits) != x.view(bits)).any()),
        "loss": torch.allclose(loss, r_loss, rtol=1e-5, atol=1e-5, equal_nan=True),
        "finite_losses": torch.isfinite(r_loss).float().mean().item(),
    })
print(json.dumps(results))
"""


TILES_SCRIPT = HEADER + r"""
    h, tiles, start, tail = 3, 4, 5, 7
    t = start + tiles * 64 + tail
    wide = special_blocks(-(-t * 2 * h // 64), d, dtype, gen, "cpu").flatten(0, 1)[:t * 2 * h].view(t, 2 * h, d)
    x = wide[:, 1:1 + h]  # token stride 2 h d, head stride d
    blocks = x[start:start + tiles * 64].unflatten(0, (tiles, 64)).permute(2, 0, 1, 3)  # [h, tiles, 64, d], in place
    vshape, mshape = sparse_shapes(operand, d)
    values = torch.full((h * tiles, *vshape), 7.0, dtype=dtype)
    meta = torch.full((h * tiles, *mshape), -7, dtype=torch.int16)
    loss = torch.full((h, tiles), -7.0)
    gpu.triton_compress(blocks, operand, torch.arange(h * tiles, dtype=torch.int32), values, meta, loss)
    flat = blocks.flatten(0, 1)  # block h tiles + c
    mask = element_mask(flat, operand)
    r_vals, r_meta = compress_blocks(flat, mask, operand)
    r_loss = block_loss(flat, mask).view(h, tiles)
    results.append({
        "values": torch.equal(values.view(bits), r_vals.view(bits)),
        "meta": torch.equal(meta, r_meta),
        "loss": torch.allclose(loss, r_loss, rtol=1e-5, atol=1e-5, equal_nan=True),
        "finite_losses": torch.isfinite(r_loss).float().mean().item(),
    })
print(json.dumps(results))
"""


def test_triton_compress_reads_a_chunks_tiles_in_place():
    """The compressor on a chunk's tiles as a strided ``[H, tiles, 64, D]`` view (``gpu.compress_tiles``' launch)."""
    results = interpret(TILES_SCRIPT, CASES)
    assert len(results) == len(CASES)
    for case, r in zip(CASES, results):
        assert r["values"] and r["meta"] and r["loss"], (case, r)
        assert r["finite_losses"] > 0.3, (case, r)


def test_triton_prune_interpreted_matches_reference():
    results = interpret(PRUNE_SCRIPT, CASES)
    assert len(results) == len(CASES)
    for case, r in zip(CASES, results):
        assert r["pruned"] and r["changed"] and r["loss"], (case, r)
        assert r["finite_losses"] > 0.3, (case, r)  # the loss check is not only NaN == NaN
