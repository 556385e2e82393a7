"""GPU: TileLang decode kernel vs the PyTorch reference (mixed dense/sparse blocks via the index map).

Fresh random inputs every run; the kernel's partial outputs are poisoned with NaN before each
launch and checked fully written; every compiled tile shape (block_h 16 / 32 / 64) is covered.
"""

import math

import pytest
import torch

from hs_kernels import attention as ref
from hs_kernels import gpu
from hs_kernels.format import NO_BLOCK, encode_dense, encode_sparse
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.tilelang_available(), reason="needs CUDA and tilelang"),
]


def make_case(batch, h_kv, d, seq_lens, p_sparse_k, p_sparse_v, dtype, gen):
    """Random pools + index maps: each (seq, head, block) dense or sparse at random, slots shuffled."""
    dev = "cuda"
    nb = max(-(-s // 64) for s in seq_lens) + 1  # one spare column holding NO_BLOCK
    n_total = batch * h_kv * nb
    pools, indexes = [], []
    for operand, p in (("k", p_sparse_k), ("v", p_sparse_v)):
        sparse = torch.rand(batch, h_kv, nb, generator=gen, device=dev) < p
        n_sp = int(sparse.sum())
        pool = BlockPool.allocate(operand, d, n_total - n_sp, n_sp, dtype, dev)
        blocks = torch.randn(n_total, 64, d, generator=gen, device=dev).to(dtype)
        flat = sparse.flatten()
        dense_slots = torch.randperm(n_total - n_sp, generator=gen, device=dev)
        sparse_slots = torch.randperm(n_sp, generator=gen, device=dev)
        pool.store_dense(dense_slots, blocks[~flat])
        if n_sp:
            sb = blocks[flat]
            pool.store_sparse(sparse_slots, sb, element_mask(sb, operand))
        index = torch.empty(n_total, dtype=torch.int32, device=dev)
        index[~flat] = encode_dense(dense_slots.int())
        index[flat] = encode_sparse(sparse_slots.int())
        index = index.view(batch, h_kv, nb)
        for b, s in enumerate(seq_lens):  # entries past the sequence are ignored: make them invalid
            index[b, :, -(-s // 64):] = NO_BLOCK
        pools.append(pool)
        indexes.append(index)
    return pools[0], pools[1], indexes[0], indexes[1], torch.tensor(seq_lens, device=dev, dtype=torch.int32)


def rel_err(x, y):
    return ((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-30)).item()


CASES = [
    # (batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v)          block_h
    (3, 32, 8, 128, torch.bfloat16, [1, 700, 2049], 0.5, 0.5),   # 16 (G 4)
    (2, 32, 8, 128, torch.float16, [4096, 130], 1.0, 0.0),       # 16
    (2, 32, 8, 128, torch.bfloat16, [333, 1024], 0.0, 1.0),      # 16
    (2, 16, 2, 64, torch.bfloat16, [64, 1500], 1.0, 1.0),        # 16 (G 8)
    (2, 6, 6, 64, torch.float16, [65, 900], 0.3, 0.7),           # 16 (G 1, MHA)
    (2, 40, 2, 128, torch.bfloat16, [257, 3000], 0.5, 0.5),      # 32 (G 20)
    (1, 64, 1, 64, torch.float16, [1234], 0.5, 0.5),             # 64 (G 64)
    (2, 8, 2, 256, torch.bfloat16, [100, 777], 0.5, 0.5),        # 16 (d 256)
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-hq{c[1]}-hkv{c[2]}-d{c[3]}-{str(c[4])[6:]}-k{c[6]}-v{c[7]}")
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_decode_matches_reference(case, splits):
    batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v = case
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index, sl = make_case(batch, h_kv, d, seq_lens, p_k, p_v, dtype, gen)
    q = torch.randn(batch, h_q, d, generator=gen, device="cuda").to(dtype)
    scale = 1.0 / math.sqrt(d) if splits != 3 else 0.07
    from hs_kernels import tl_decode

    # the raw kernel: poisoned partial outputs must be fully written
    kernel = tl_decode.get_kernel(h_q, h_kv, d, gpu._DTYPES[dtype])
    o_part = torch.full((batch, h_q, splits, d), float("nan"), device="cuda")
    lse_part = torch.full((batch, h_q, splits), float("nan"), device="cuda")
    kernel(q, gpu._nonempty(k_pool.dense), gpu._nonempty(k_pool.values), gpu._nonempty(k_pool.meta),
           gpu._nonempty(v_pool.dense), gpu._nonempty(v_pool.values), gpu._nonempty(v_pool.meta),
           k_index, v_index, sl, torch.full((1,), scale * tl_decode.LOG2E, device="cuda"), o_part, lse_part)
    torch.cuda.synchronize()
    assert not o_part.isnan().any() and not lse_part.isnan().any()

    out, lse = gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, scale, num_splits=splits)
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, scale)
    assert out.dtype == dtype and out.shape == (batch, h_q, d) and lse.shape == (batch, h_q)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert rel_err(out, r_out) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-2


def test_decode_default_splits_and_dispatch():
    """The automatic path (default split count) on a 32K-context Llama-shaped batch."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    seq_lens = [32768, 20000]
    k_pool, v_pool, k_index, v_index, sl = make_case(2, 8, 128, seq_lens, 0.9, 0.9, torch.bfloat16, gen)
    q = torch.randn(2, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    torch.cuda.empty_cache()
    junk = torch.full((1 << 24,), float("nan"), device="cuda")  # poison the allocator's free memory
    del junk
    out, lse = gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl)
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl)
    assert torch.isfinite(out).all()
    assert rel_err(out, r_out) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-2


@pytest.mark.parametrize("splits", [1, 7])
def test_decode_256_threads(splits):
    """The 256-thread tile (8 warps along N) on the Llama shape, mixed blocks."""
    batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v = CASES[0]
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index, sl = make_case(batch, h_kv, d, seq_lens, p_k, p_v, dtype, gen)
    q = torch.randn(batch, h_q, d, generator=gen, device="cuda").to(dtype)
    out, lse = gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, num_splits=splits, threads=256)
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl)
    assert torch.isfinite(out).all()
    assert rel_err(out, r_out) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-2
