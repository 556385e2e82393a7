"""GPU: the fused compression kernel (Triton) vs the reference pruner + compressor (bit exact).

Fresh random inputs every run (with ties, signed zeros, inf and NaN, and a block where NaN and inf
compete); the destination pool is poisoned and checked written exactly where asked and untouched
elsewhere.
"""

import pytest
import torch
from kv_cases import special_blocks

from hs_kernels import gpu
from hs_kernels.chunk_blocks import compress_chunk
from hs_kernels.compressor import compress_blocks
from hs_kernels.format import sparse_shapes
from hs_kernels.pruner import block_loss, element_mask

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu.triton_available(), reason="needs CUDA and triton")]

SHAPES = [("k", 128, torch.bfloat16), ("v", 128, torch.bfloat16), ("k", 64, torch.float16),
          ("v", 64, torch.float16), ("k", 128, torch.float16), ("v", 256, torch.bfloat16)]


def same_bits(a, b):
    bits = torch.int32 if a.dtype == torch.float32 else torch.int16
    return torch.equal(a.view(bits), b.view(bits))


@pytest.mark.parametrize("operand,d,dtype", SHAPES + [("k", 128, torch.float32), ("v", 64, torch.float32)])
def test_compress_bit_exact(operand, d, dtype):
    gen = torch.Generator(device="cuda")
    gen.seed()
    n = 37
    blocks = special_blocks(n, d, dtype, gen, "cuda")
    mask = element_mask(blocks, operand)
    r_vals, r_meta = compress_blocks(blocks, mask, operand)
    r_loss = block_loss(blocks, mask)

    assert torch.isfinite(r_loss).float().mean().item() > 0.5  # the loss comparison is not NaN == NaN

    vals, meta, loss = gpu.compress_magnitude(blocks, operand)
    assert same_bits(vals, r_vals)
    assert torch.equal(meta, r_meta)
    torch.testing.assert_close(loss, r_loss, rtol=1e-5, atol=1e-5, equal_nan=True,
                               msg=lambda m: f"{m}\nours {loss[:4].tolist()} ref {r_loss[:4].tolist()}")


@pytest.mark.parametrize("operand,d,dtype", SHAPES[:2])
def test_compress_into_pool_slots(operand, d, dtype):
    gen = torch.Generator(device="cuda")
    gen.seed()
    n, n_slots = 50, 80
    blocks = special_blocks(n, d, dtype, gen, "cuda")
    vshape, mshape = sparse_shapes(operand, d)
    pool_v = torch.full((n_slots, *vshape), 7.0, dtype=dtype, device="cuda")
    pool_m = torch.full((n_slots, *mshape), -7, dtype=torch.int16, device="cuda")
    slots = torch.randperm(n_slots, generator=gen, device="cuda")[:n].int()
    slots[::3] = -1  # loss only for these
    _, _, loss = gpu.compress_magnitude(blocks, operand, pool_v, pool_m, slots)

    mask = element_mask(blocks, operand)
    r_vals, r_meta = compress_blocks(blocks, mask, operand)
    torch.testing.assert_close(loss, block_loss(blocks, mask), rtol=1e-5, atol=1e-5, equal_nan=True)
    sel = slots >= 0
    assert same_bits(pool_v[slots[sel].long()], r_vals[sel])
    assert torch.equal(pool_m[slots[sel].long()], r_meta[sel])
    untouched = torch.ones(n_slots, dtype=torch.bool, device="cuda")
    untouched[slots[sel].long()] = False
    assert (pool_v[untouched] == 7.0).all() and (pool_m[untouched] == -7).all()


@pytest.mark.parametrize("operand,d,dtype", SHAPES)
def test_compress_kernel_loss_poisoned(operand, d, dtype):
    """The raw Triton kernel's per-block loss output, poisoned before the launch (-7: a loss is >= 0 or NaN), on
    plain Gaussian blocks (no specials: every loss finite) against the reference's block_loss."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    n = 129
    blocks = (torch.randn(n, 64, d, generator=gen, device="cuda") * 3).to(dtype)
    vshape, mshape = sparse_shapes(operand, d)
    values = torch.empty((n, *vshape), dtype=dtype, device="cuda")
    meta = torch.empty((n, *mshape), dtype=torch.int16, device="cuda")
    loss = torch.full((n,), -7.0, device="cuda")
    slots = torch.arange(n, dtype=torch.int32, device="cuda")
    gpu.triton_compress(blocks, operand, slots, values, meta, loss)
    assert (loss >= 0).all()  # every poisoned element written
    r_loss = block_loss(blocks, element_mask(blocks, operand))
    assert torch.isfinite(r_loss).all() and (r_loss > 0).all()
    assert torch.isfinite(loss).all() and (loss >= 0).all()
    torch.testing.assert_close(loss, r_loss, rtol=1e-5, atol=1e-4)


def strided_chunk(h: int, tiles: int, start: int, d: int, dtype, gen) -> torch.Tensor:
    """A chunk [T, h, d] as some heads of a wider tensor, ``tiles`` tiles from token ``start``, then a partial one."""
    t = start + tiles * 64 + 30
    wide = special_blocks(-(-t * 2 * h // 64), d, dtype, gen, "cuda").flatten(0, 1)[:t * 2 * h].view(t, 2 * h, d)
    return wide[:, 3:3 + h]


@pytest.mark.parametrize("operand,d,dtype", SHAPES)
def test_tile_pruning_matches_the_reference(operand, d, dtype):
    """``prune_tiles`` and ``tile_loss`` on the GPU (one Triton launch each) against the reference on the CPU, for a
    strided chunk (some heads of a wider tensor) whose tiles start after a few tokens and end before a partial one."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    h, tiles, start = 5, 9, 17
    x = strided_chunk(h, tiles, start, d, dtype, gen)
    sparse = torch.rand(h, tiles, generator=gen, device="cuda") < 0.5
    sparse[0, 0] = True
    out, loss = gpu.prune_tiles(x, operand, sparse, start), gpu.tile_loss(x, operand, tiles, start)
    with torch.device("cpu"):
        r_out = gpu.prune_tiles(x.cpu(), operand, sparse.cpu(), start)
        r_loss = gpu.tile_loss(x.cpu(), operand, tiles, start)
    assert out.is_contiguous() and same_bits(out.cpu(), r_out) and not same_bits(out.cpu(), x.cpu())
    assert torch.isfinite(r_loss).float().mean().item() > 0.5
    torch.testing.assert_close(loss.cpu(), r_loss, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("operand,d,dtype", SHAPES)
def test_tile_compression_matches_the_reference(operand, d, dtype):
    """``compress_tiles`` on the GPU (one launch, the tiles read in place) against the reference on the CPU, on the
    same strided chunk as above: values and metadata bit exact, tile (h, c) as block h tiles + c."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    h, tiles, start = 5, 9, 17
    x = strided_chunk(h, tiles, start, d, dtype, gen)
    vals, meta, loss = gpu.compress_tiles(x, operand, tiles, start)
    blocks = x[start:start + tiles * 64].cpu().unflatten(0, (tiles, 64)).permute(2, 0, 1, 3).flatten(0, 1)
    mask = element_mask(blocks, operand)
    r_vals, r_meta = compress_blocks(blocks, mask, operand)
    assert same_bits(vals.cpu(), r_vals) and torch.equal(meta.cpu(), r_meta)
    r_loss = block_loss(blocks, mask).view(h, tiles)
    assert torch.isfinite(r_loss).float().mean().item() > 0.5
    torch.testing.assert_close(loss.cpu(), r_loss, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("s", [1.0, 0.5])
def test_compress_chunk_on_the_gpu_matches_the_cpu(s):
    """``compress_chunk`` on the GPU against the same call on the CPU (a chunk ending in a partial tile): the same
    index maps, values and metadata bit exact."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    k, v = ((torch.randn(64 * 11 + 5, 3, 128, generator=gen, device="cuda") * 2).to(torch.bfloat16) for _ in "kv")
    got = compress_chunk(k, v, s, s)
    want = compress_chunk(k.cpu(), v.cpu(), s, s)
    for name in ("k_index", "v_index", "k_meta", "v_meta"):
        assert torch.equal(getattr(got, name).cpu(), getattr(want, name)), name
    assert same_bits(got.k_vals.cpu(), want.k_vals) and same_bits(got.v_vals.cpu(), want.v_vals)
    assert (got.k_mode, got.v_mode) == (want.k_mode, want.v_mode) == ("mixed", "mixed")
