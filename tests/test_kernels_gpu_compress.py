"""GPU: TileLang fused compression kernel vs the reference pruner + compressor (bit exact).

Fresh random inputs every run (with ties, signed zeros, inf and NaN); the destination pool is
poisoned and checked written exactly where asked and untouched elsewhere.
"""

import pytest
import torch

from hs_kernels import gpu
from hs_kernels.compressor import compress_blocks
from hs_kernels.format import sparse_shapes
from hs_kernels.pruner import block_loss, element_mask

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.tilelang_available(), reason="needs CUDA and tilelang"),
]

SHAPES = [("k", 128, torch.bfloat16), ("v", 128, torch.bfloat16), ("k", 64, torch.float16),
          ("v", 64, torch.float16), ("k", 128, torch.float16), ("v", 256, torch.bfloat16)]


def random_blocks(n, d, dtype, gen):
    x = torch.randn(n, 64, d, generator=gen, device="cuda")
    ties = torch.randint(-2, 3, (n, 64, d), generator=gen, device="cuda").float()  # many equal magnitudes
    pick = torch.rand(n, 1, 1, generator=gen, device="cuda") < 0.5
    x = torch.where(pick, ties, x).to(dtype)
    special = torch.rand(n, 64, d, generator=gen, device="cuda")
    x[special < 0.002] = float("nan")
    x[(special > 0.002) & (special < 0.004)] = float("inf")
    x[(special > 0.004) & (special < 0.006)] = -0.0
    return x


def same_bits(a, b):
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("operand,d,dtype", SHAPES)
def test_compress_bit_exact(operand, d, dtype):
    gen = torch.Generator(device="cuda")
    gen.seed()
    n = 37
    blocks = random_blocks(n, d, dtype, gen)
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
    blocks = random_blocks(n, d, dtype, gen)
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


@pytest.mark.parametrize("loss_mode", ["block", "warp", "group"])
@pytest.mark.parametrize("operand,d,dtype", SHAPES)
def test_compress_kernel_loss_poisoned(operand, d, dtype, loss_mode):
    """The raw kernel's per-block loss output, poisoned before the launch (-7: a loss is >= 0 or NaN),
    on plain Gaussian blocks (no specials: every loss finite) against the reference's block_loss."""
    from hs_kernels import tl_compress

    gen = torch.Generator(device="cuda")
    gen.seed()
    n = 129
    blocks = (torch.randn(n, 64, d, generator=gen, device="cuda") * 3).to(dtype)
    vshape, mshape = sparse_shapes(operand, d)
    values = torch.empty((n, *vshape), dtype=dtype, device="cuda")
    meta = torch.empty((n, *mshape), dtype=torch.int16, device="cuda")
    shape = (n, vshape[0], vshape[1] // 2) if loss_mode == "group" else (n,)
    loss = torch.full(shape, -7.0, device="cuda")
    kernel = tl_compress.get_kernel(operand, d, gpu._DTYPES[dtype], loss_mode)
    kernel(blocks, torch.arange(n, dtype=torch.int32, device="cuda"), values, meta, loss)
    assert (loss >= 0).all()  # every poisoned element written
    loss = loss.sum(dim=(1, 2)) if loss_mode == "group" else loss
    r_loss = block_loss(blocks, element_mask(blocks, operand))
    assert torch.isfinite(r_loss).all() and (r_loss > 0).all()
    assert torch.isfinite(loss).all() and (loss >= 0).all()
    torch.testing.assert_close(loss, r_loss, rtol=1e-5, atol=1e-4)
