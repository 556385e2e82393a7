"""GPU: the Triton prefill kernel (the serving path behind ``hs_kernels.prefill_attention``) vs
the PyTorch reference, on mixed dense/sparse prefixes.

Fresh random inputs every run; the rows past the prefix in its last block are NaN in the pools
(they must be ignored); out and lse are poisoned with NaN before each launch and checked fully
written; every pool path
(dense / sparse / mixed), tile (64 / 128 rows, 4 / 8 warps), head_dim 64 / 128 / 256 and the GQA
ratios 1 / 4 / 7 / 8, 1 / 2 / 4 / 8 query heads per tile, the prefix densified first, dense prefixes two blocks
per key tile, the chunk's keys through TMA descriptors (the default on sm_90) or pointers, with the prmt form of
the 2:4 unpack and
bfloat16; the prefix split among programs (auto for a short chunk after a long prefix, and forced counts).
Cases about the in-place kernel's features pin ``densify`` so that they keep testing the path they were
written for whatever ``gpu.prefill_densify`` picks.
"""

import pytest
import torch
from kv_cases import prefill_inputs, rel_err

import hs_kernels
from hs_kernels import attention as ref
from hs_kernels import gpu
from hs_kernels.pool import BlockPool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.triton_available(), reason="needs CUDA and triton"),
]

CASES = [
    # (h_q, h_kv, d, dtype, T, prefix_len, p_k, p_v, launch options)
    (32, 8, 128, torch.bfloat16, 200, 0, 0.0, 0.0, {}),                    # no prefix, T % 64
    (32, 8, 128, torch.bfloat16, 100, 1000, 0.5, 0.5, {"densify": False}),  # mixed/mixed, P % 64
    (32, 8, 128, torch.float16, 130, 640, 1.0, 1.0, {}),                   # sparse-only pools
    (32, 8, 128, torch.bfloat16, 327, 333, 0.0, 1.0, {}),                  # dense K / sparse V
    (32, 8, 128, torch.bfloat16, 96, 256, 1.0, 0.0, {}),                   # sparse K / dense V
    (32, 8, 128, torch.bfloat16, 300, 700, 0.0, 0.0, {}),                  # dense-only pools
    (16, 2, 64, torch.bfloat16, 77, 129, 1.0, 0.0, {}),                    # d 64, G 8
    (6, 6, 64, torch.float16, 300, 64, 0.5, 0.5, {}),                      # MHA
    (28, 4, 128, torch.bfloat16, 50, 200, 0.5, 0.5, {"densify": False}),   # G 7
    (8, 2, 256, torch.bfloat16, 150, 190, 0.5, 0.5, {"block_m": 64, "num_warps": 4, "densify": False}),  # d 256
    (8, 2, 256, torch.bfloat16, 200, 640, 1.0, 1.0, {}),                   # d 256, its default launch
    (32, 8, 128, torch.bfloat16, 1, 65, 0.5, 0.5, {}),                     # one query token
    (32, 8, 128, torch.bfloat16, 1000, 3000, 0.5, 0.5, {}),                # longer
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, {"block_m": 64, "num_warps": 4}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, {"num_stages": 2, "densify": False}),
    (32, 8, 128, torch.bfloat16, 513, 0, 0.0, 0.0, {"block_m": 64, "num_warps": 4, "num_stages": 2}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, {"select": True, "densify": False}),  # mixed: select, not branch
    (32, 8, 128, torch.bfloat16, 77, 1000, 0.5, 0.5, {"select": True, "block_m": 64, "num_warps": 4, "densify": False}),
    (32, 8, 128, torch.bfloat16, 64, 32768, 1.0, 1.0, {}),                # question after a cached prefix: auto split
    (16, 4, 128, torch.bfloat16, 64, 4000, 0.5, 0.5, {"splits": 5}),      # split, partial last block
    (32, 8, 128, torch.bfloat16, 200, 2000, 0.5, 0.5, {"splits": 40, "densify": False}),    # more splits than full blocks
    (16, 2, 64, torch.bfloat16, 33, 1500, 1.0, 0.0, {"splits": 3, "block_m": 64, "num_warps": 4}),
    (32, 8, 128, torch.bfloat16, 1000, 3000, 0.5, 0.5, {"chunk_n": 128}),  # 128-key chunk tiles
    (32, 8, 128, torch.float16, 300, 0, 0.0, 0.0, {"chunk_n": 128, "num_stages": 2}),
    (16, 2, 64, torch.bfloat16, 257, 640, 1.0, 1.0, {"chunk_n": 128, "densify": True}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, {"heads": 1, "densify": False}),       # one query head per tile
    (32, 8, 128, torch.bfloat16, 64, 32768, 1.0, 1.0, {"heads": 1}),
    (16, 2, 64, torch.bfloat16, 200, 130, 0.5, 0.5, {"heads": 2, "chunk_n": 128}),
    (32, 4, 128, torch.bfloat16, 97, 700, 0.5, 0.5, {"densify": False}),                  # 8 heads x 16 tokens per tile
    (32, 8, 128, torch.bfloat16, 1000, 3000, 0.5, 0.5, {"densify": True}),  # prefix copied dense first
    (32, 8, 128, torch.float16, 300, 640, 1.0, 1.0, {"densify": True}),
    (16, 2, 64, torch.bfloat16, 77, 129, 0.0, 1.0, {"densify": True, "splits": 2}),
    (32, 8, 128, torch.bfloat16, 1000, 3000, 0.5, 0.5, {"densify": False}),  # long chunk, unpacked in place
    (32, 8, 128, torch.bfloat16, 200, 0, 0.0, 0.0, {"chunk_n": 64}),     # no prefix, 64-key tiles
    (32, 8, 128, torch.bfloat16, 300, 1280, 0.0, 0.0, {"prefix_n": 64}),  # dense prefix, one block per tile
    (32, 8, 128, torch.bfloat16, 1000, 3000, 0.5, 0.5, {"prefix_n": 64, "densify": True}),
    (32, 8, 128, torch.bfloat16, 300, 1280, 0.0, 0.0, {"prefix_n": 128}),  # dense prefix, two blocks per tile
    (32, 8, 128, torch.bfloat16, 300, 1000, 0.0, 0.0, {"prefix_n": 128}),  # odd block count, partial block
    (16, 2, 64, torch.bfloat16, 64, 4000, 0.0, 0.0, {"prefix_n": 128, "splits": 5}),
    (32, 8, 128, torch.bfloat16, 1000, 3000, 0.5, 0.5, {"prefix_n": 128, "densify": True}),
    (32, 8, 128, torch.bfloat16, 200, 0, 0.0, 0.0, {"tma": False}),  # the chunk's keys by pointers, not TMA
    (32, 8, 128, torch.bfloat16, 1000, 3000, 0.5, 0.5, {"tma": False}),
    (16, 2, 64, torch.float16, 257, 640, 1.0, 1.0, {"tma": False, "chunk_n": 128}),
    (8, 2, 256, torch.bfloat16, 150, 190, 0.5, 0.5, {"tma": True}),    # d 256: 64 x 256 descriptor tiles
    (32, 8, 128, torch.bfloat16, 1500, 0, 0.0, 0.0, {}),                # from TMA_MIN_TOKENS: TMA by default
    (32, 8, 128, torch.float16, 1100, 2000, 0.5, 0.5, {}),
    (16, 2, 64, torch.bfloat16, 200, 130, 0.5, 0.5, {"tma": True, "chunk_n": 128}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, {"tma": True, "densify": False}),
    (28, 4, 128, torch.bfloat16, 50, 200, 0.0, 0.0, {"tma": True}),
    # long chunks (TMA, 128-key chunk tiles after a prefix by default) after a prefix copied whole, dense or 2:4
    # (pairs as descriptor tiles at computed places): an odd split, a partial block, d 64
    (32, 8, 128, torch.bfloat16, 1100, 3000, 0.0, 0.0, {}),
    (32, 8, 128, torch.bfloat16, 1100, 2900, 0.5, 0.5, {"splits": 2}),
    (16, 2, 64, torch.float16, 1030, 700, 1.0, 1.0, {}),
    (32, 8, 128, torch.bfloat16, 1100, 3000, 0.0, 1.0, {}),
    (32, 8, 128, torch.bfloat16, 1100, 3000, 1.0, 0.0, {"chunk_n": 64}),
    # the same after a dense prefix read in place (pairs by pointers through the index maps)
    (32, 8, 128, torch.bfloat16, 1100, 2900, 0.0, 0.0, {"densify": False}),
    (16, 2, 64, torch.bfloat16, 1030, 3000, 0.0, 0.0, {"densify": False, "splits": 3}),
    (16, 2, 64, torch.bfloat16, 1030, 3000, 0.0, 0.0, {"splits": 3}),
]


def case_id(c):
    return (f"hq{c[0]}-hkv{c[1]}-d{c[2]}-{str(c[3])[6:]}-t{c[4]}-p{c[5]}-k{c[6]}-v{c[7]}-"
            f"{'-'.join(f'{a}{b}' for a, b in c[8].items()) or 'default'}")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_triton_prefill_matches_reference(case):
    h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v, opts = case
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((t, h_q), float("nan"), device="cuda")
    gpu.triton_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale, **opts, out=out, lse=lse)
    o_ref, l_ref = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale)
    assert not torch.isnan(out).any(), "out not fully written (or NaN leaked from the stale rows)"
    assert not torch.isnan(lse).any(), "lse not fully written"
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert rel_err(out, o_ref) < 1e-2
    assert (lse - l_ref).abs().max().item() < 1e-2 * max(1.0, l_ref.abs().max().item())


def test_entry_point_runs_the_kernel_and_falls_back(monkeypatch):
    """``hs_kernels.prefill_attention`` launches the Triton kernel on CUDA bf16 and answers with the
    reference, bit for bit, for float32."""
    launches = []
    kernel_entry = gpu.triton_prefill
    monkeypatch.setattr(gpu, "triton_prefill", lambda *a, **kw: launches.append(1) or kernel_entry(*a, **kw))
    k_pool, v_pool, k_index, v_index, q, k, v, _ = prefill_inputs(32, 8, 128, torch.bfloat16, 70, 390, 0.5, 0.5)
    out, lse = hs_kernels.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 390)
    assert launches == [1]
    o_ref, l_ref = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 390)
    assert rel_err(out, o_ref) < 1e-2 and (lse - l_ref).abs().max().item() < 1e-2 * l_ref.abs().max().item()
    as_float = [BlockPool(p.operand, p.dense.float(), p.values.float(), p.meta) for p in (k_pool, v_pool)]
    out32, lse32 = hs_kernels.prefill_attention(q.float(), k.float(), v.float(), *as_float, k_index, v_index, 390)
    assert launches == [1]
    o32, l32 = ref.prefill_attention(q.float(), k.float(), v.float(), *as_float, k_index, v_index, 390)
    assert torch.equal(out32, o32) and torch.equal(lse32, l32)


def test_only_short_chunks_are_split():
    cuda = torch.device("cuda")
    assert gpu.prefill_splits(32, 512, cuda) > 1  # 64 queries x 32 heads after 32K: a few programs alone
    assert gpu.prefill_splits(64 * 32, 512, cuda) == 1  # an 8K chunk fills the GPU
    assert gpu.prefill_splits(32, 20, cuda) == 1  # a short prefix: not worth a merge


def test_long_chunks_copy_their_prefix_dense(monkeypatch):
    """By default a chunk whose programs read each prefix block many times copies a 2:4 prefix dense
    first (from ``gpu.TMA_MIN_TOKENS``, TMA, its dense operand too), and a dense prefix too from there (to be read
    as TMA pairs) where it is read often enough (``gpu.DENSIFY_MIN_BLOCK_READS``); a short question's prefix is not
    copied, nor a short prefix."""
    calls = []
    densified = gpu._densified
    monkeypatch.setattr(gpu, "_densified", lambda *a, **kw: calls.append(kw.get("every", False)) or densified(*a, **kw))
    for t, prefix, p, expect in ((1000, 3000, 0.5, [False]), (1100, 3000, 0.5, [True]), (1000, 3000, 0.0, []),
                                 (64, 3000, 0.5, []), (1000, 640, 0.5, []), (1100, 3000, 0.0, []),
                                 (2048, 12000, 0.0, [True])):
        calls.clear()
        k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(32, 8, 128, torch.bfloat16, t, prefix, p, p)
        out, _ = gpu.triton_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix, scale)
        assert calls == expect, (t, prefix, p)
        o_ref, _ = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix, scale)
        assert rel_err(out, o_ref) < 1e-2


@pytest.mark.parametrize("t", [64, 256, 1100])
def test_the_triton_path_does_not_wait_for_the_gpu(t):
    """No host sync on the Triton path (the kernel's variant and the copy's rule from the pools' kinds), whether the
    chunk's programs copy the mixed prefix dense or not."""
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(32, 8, 128, torch.bfloat16, t, 3000, 0.5, 0.5)
    run = lambda: gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 3000, scale,  # noqa: E731
                                        kernel="triton")
    run()  # compiled
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError):  # the mode catches a host sync such as the entries' kinds cost
            torch.zeros(1, device="cuda").tolist()
        out, _ = run()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    o_ref, _ = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 3000, scale)
    assert rel_err(out, o_ref) < 1e-2


def test_misaligned_chunk_keys_take_the_pointer_path():
    """TMA needs 16-byte aligned rows: keys at an odd element offset are read by pointers, correctly; so are
    chunks shorter than ``gpu.TMA_MIN_TOKENS``."""
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(32, 8, 128, torch.bfloat16, 1100, 300, 0.5, 0.5)
    shifted = torch.empty(k.numel() + 1, dtype=k.dtype, device=k.device)[1:].view(k.shape)
    shifted.copy_(k)
    assert gpu.prefill_tma(k, v) and not gpu.prefill_tma(shifted, v)
    assert not gpu.prefill_tma(k[:gpu.TMA_MIN_TOKENS - 1], v[:gpu.TMA_MIN_TOKENS - 1])  # short chunks: pointers
    out, lse = gpu.triton_prefill(q, shifted, v, k_pool, v_pool, k_index, v_index, 300, scale)
    o_ref, l_ref = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 300, scale)
    assert rel_err(out, o_ref) < 1e-2 and (lse - l_ref).abs().max().item() < 1e-2 * l_ref.abs().max().item()
