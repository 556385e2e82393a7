"""GPU: TileLang prefill kernel (Trans-Both) vs the PyTorch reference, mixed dense/sparse prefixes.

Fresh random inputs every run; out and lse are poisoned with NaN before each launch and checked
fully written; the rows past the prefix in its last block are NaN in the pools (they must be
ignored); every compiled mode (dense / sparse / mixed prefix, dense / compressed chunk) and every
shipped tile shape (128 rows x 128 threads; 64 rows; 256 threads; P^T K-major) is covered.
"""

import math

import pytest
import torch
from kv_cases import rel_err, store_shuffled

from hs_kernels import attention as ref
from hs_kernels import gpu
from hs_kernels.format import NO_BLOCK
from hs_kernels.pool import BlockPool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.tilelang_available(), reason="needs CUDA and tilelang"),
]


def make_prefix(h_kv, d, prefix_len, p_k, p_v, dtype, gen):
    """Pools + [H_kv, nb] index maps for a prefix: each (head, block) dense or sparse with
    probability p (p = 0 / 1 exactly all dense / all sparse), slots shuffled, one spare NO_BLOCK
    column, NaN in the rows past the prefix of its last block."""
    dev = "cuda"
    used = -(-prefix_len // 64)
    nb = used + 1
    tail = prefix_len % 64
    pools, indexes = [], []
    for operand, p in (("k", p_k), ("v", p_v)):
        sparse = torch.rand(h_kv, used, generator=gen, device=dev) < p
        blocks = torch.randn(h_kv, used, 64, d, generator=gen, device=dev).to(dtype)
        if tail:
            blocks[:, -1, tail:] = float("nan")
        pool, flat_index = store_shuffled(operand, blocks.flatten(0, 1), sparse.flatten(), gen)
        index = torch.full((h_kv, nb), NO_BLOCK, dtype=torch.int32, device=dev)
        index[:, :used] = flat_index.view(h_kv, used)
        pools.append(pool)
        indexes.append(index)
    return pools[0], pools[1], indexes[0], indexes[1]


CASES = [
    # (h_q, h_kv, d, dtype, T, prefix_len, p_k, p_v, chunk (s_k, s_v) or None, knobs)
    (32, 8, 128, torch.bfloat16, 200, 0, 0.0, 0.0, None, {}),                 # no prefix, T % 64
    (32, 8, 128, torch.bfloat16, 100, 1000, 0.5, 0.5, None, {}),              # mixed/mixed, P % 64
    (32, 8, 128, torch.float16, 130, 640, 1.0, 1.0, None, {}),                # sparse/sparse fast path
    (32, 8, 128, torch.bfloat16, 327, 333, 0.0, 1.0, None, {}),               # dense K / sparse V
    (32, 8, 128, torch.bfloat16, 96, 256, 1.0, 0.0, None, {}),                # sparse K / dense V
    (32, 8, 128, torch.bfloat16, 300, 700, 0.0, 0.0, None, {}),               # dense/dense fast path
    (16, 2, 64, torch.bfloat16, 77, 129, 1.0, 0.0, None, {}),                 # d 64, G 8
    (6, 6, 64, torch.float16, 300, 64, 0.5, 0.5, None, {}),                   # MHA (hg 1, 128 tokens/tile)
    (28, 4, 128, torch.bfloat16, 50, 200, 0.5, 0.5, None, {}),                # G 7 (hg 1)
    (32, 8, 128, torch.bfloat16, 1, 65, 0.5, 0.5, None, {}),                  # one query token
    (32, 8, 128, torch.bfloat16, 512, 0, 0.0, 0.0, (1.0, 1.0), {}),           # compressed chunk, all sparse
    (32, 8, 128, torch.bfloat16, 394, 100, 0.5, 0.5, (0.5, 0.5), {}),         # compressed chunk, mixed
    (32, 8, 128, torch.bfloat16, 384, 0, 0.0, 0.0, (0.0, 1.0), {}),           # chunk V sparse only
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, None, {"rows": 64}),     # 64 rows per program
    (32, 8, 128, torch.bfloat16, 600, 0, 0.0, 0.0, (1.0, 1.0), {"rows": 64}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, None, {"threads": 256}),  # two warpgroups
    (32, 8, 128, torch.bfloat16, 600, 0, 0.0, 0.0, (1.0, 1.0), {"threads": 256}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, None, {"p_major": "k"}),  # P^T stored K-major
    (32, 8, 128, torch.bfloat16, 600, 0, 0.0, 0.0, (1.0, 1.0), {"p_major": "k"}),
]


def case_id(c):
    return (f"hq{c[0]}-hkv{c[1]}-d{c[2]}-{str(c[3])[6:]}-t{c[4]}-p{c[5]}-k{c[6]}-v{c[7]}"
            f"-chunk{c[8]}-{'-'.join(f'{a}{b}' for a, b in c[9].items()) or 'default'}")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_prefill_matches_reference(case):
    from hs_kernels import tl_prefill

    h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v, chunk_s, knobs = case
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index = make_prefix(h_kv, d, prefix_len, p_k, p_v, dtype, gen)
    q = torch.randn(t, h_q, d, generator=gen, device="cuda").to(dtype)
    k = torch.randn(t, h_kv, d, generator=gen, device="cuda").to(dtype)
    v = torch.randn(t, h_kv, d, generator=gen, device="cuda").to(dtype)
    scale = 1.0 / math.sqrt(d) if prefix_len % 2 == 0 else 0.07
    chunk = None
    k_ref, v_ref = k, v
    if chunk_s is not None:
        chunk = tl_prefill.compress_chunk(k, v, *chunk_s)
        k_ref, v_ref = tl_prefill.chunk_as_dense(k, v, chunk)
        assert (not chunk_s[0] or bool((chunk.k_index < 0).any())) and (not chunk_s[1] or bool((chunk.v_index < 0).any()))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((t, h_q), float("nan"), dtype=torch.float32, device="cuda")
    tl_prefill.prefill_blocks(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale, chunk=chunk,
                              out=out, lse=lse, **knobs)
    torch.cuda.synchronize()
    o_ref, l_ref = ref.prefill_attention(q, k_ref, v_ref, k_pool, v_pool, k_index, v_index, prefix_len, scale)
    assert not torch.isnan(out).any(), "out not fully written (or NaN leaked from the stale rows)"
    assert not torch.isnan(lse).any(), "lse not fully written"
    assert rel_err(out, o_ref) < 1e-2
    assert (lse - l_ref).abs().max().item() < 1e-2 * max(1.0, l_ref.abs().max().item())


def test_entry_point_matches_reference_and_falls_back(monkeypatch):
    """``hs_kernels.prefill_attention`` (gpu's dispatcher) has the reference's signature: the kernel on
    CUDA bf16, the reference for float32."""
    import hs_kernels
    from hs_kernels import tl_prefill

    launches = []
    kernel_entry = tl_prefill.prefill_blocks
    monkeypatch.setattr(tl_prefill, "prefill_blocks", lambda *a, **kw: launches.append(1) or kernel_entry(*a, **kw))
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index = make_prefix(8, 128, 390, 0.5, 0.5, torch.bfloat16, gen)
    q = torch.randn(70, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    k = torch.randn(70, 8, 128, generator=gen, device="cuda").to(torch.bfloat16)
    v = torch.randn(70, 8, 128, generator=gen, device="cuda").to(torch.bfloat16)
    out, lse = hs_kernels.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 390)
    assert launches == [1]
    o_ref, l_ref = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 390)
    assert out.dtype == q.dtype and lse.dtype == torch.float32
    assert rel_err(out, o_ref) < 1e-2 and (lse - l_ref).abs().max().item() < 1e-2 * l_ref.abs().max().item()
    # float32 is not a kernel dtype: the reference answers, bit for bit
    out32, lse32 = hs_kernels.prefill_attention(q.float(), k.float(), v.float(), *_as_float(k_pool, v_pool),
                                                k_index, v_index, 390)
    assert launches == [1]
    o32, l32 = ref.prefill_attention(q.float(), k.float(), v.float(), *_as_float(k_pool, v_pool), k_index, v_index, 390)
    assert torch.equal(out32, o32) and torch.equal(lse32, l32)


def _as_float(*pools):
    return [BlockPool(p.operand, p.dense.float(), p.values.float(), p.meta) for p in pools]
