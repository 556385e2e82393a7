"""GPU: TileLang prefill kernel (Trans-Both, sparse tensor cores; benchmarked, not the serving path) vs the PyTorch reference, mixed dense/sparse prefixes.

Fresh random inputs every run; out and lse are poisoned with NaN before each launch and checked
fully written; the rows past the prefix in its last block are NaN in the pools (they must be
ignored); every compiled mode (dense / sparse / mixed prefix, dense / compressed chunk) and every
shipped tile shape (128 rows x 256 threads; 64 rows; 128 threads; P^T token-major) and both softmax forms
(statistics per column owner, the default; on the GEMM fragment) are covered.
"""

import pytest
import torch
from kv_cases import prefill_inputs, rel_err

from hs_kernels import attention as ref
from hs_kernels import gpu
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.tilelang_available(), reason="needs CUDA and tilelang"),
]


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
    (32, 8, 128, torch.bfloat16, 512, 0, 0.0, 0.0, (1.0, 1.0), {}),           # compressed chunk, all sparse (64 x 128)
    (32, 8, 128, torch.bfloat16, 394, 100, 0.5, 0.5, (0.5, 0.5), {}),         # compressed chunk, mixed
    (32, 8, 128, torch.bfloat16, 384, 0, 0.0, 0.0, (0.0, 1.0), {}),           # chunk V sparse only
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, None, {"rows": 64}),     # 64 rows per program
    (32, 8, 128, torch.bfloat16, 600, 0, 0.0, 0.0, (1.0, 1.0), {"rows": 64}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, None, {"threads": 128}),  # one warpgroup
    (32, 8, 128, torch.bfloat16, 600, 0, 0.0, 0.0, (1.0, 1.0), {"threads": 128}),
    (32, 8, 128, torch.bfloat16, 640, 700, 1.0, 1.0, (1.0, 1.0), {}),       # all-2:4 chunk and prefix: 64 x 128
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, None, {"p_major": "mn"}),  # P^T stored token-major
    (32, 8, 128, torch.bfloat16, 600, 0, 0.0, 0.0, (1.0, 1.0), {"p_major": "mn"}),
    (32, 8, 128, torch.bfloat16, 300, 500, 0.5, 0.5, None, {"softmax": "warp"}),  # statistics on the GEMM fragment
    (32, 8, 128, torch.bfloat16, 600, 0, 0.0, 0.0, (1.0, 1.0), {"softmax": "warp"}),
]


def case_id(c):
    return (f"hq{c[0]}-hkv{c[1]}-d{c[2]}-{str(c[3])[6:]}-t{c[4]}-p{c[5]}-k{c[6]}-v{c[7]}"
            f"-chunk{c[8]}-{'-'.join(f'{a}{b}' for a, b in c[9].items()) or 'default'}")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_prefill_matches_reference(case):
    from hs_kernels import tl_prefill

    h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v, chunk_s, knobs = case
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v)
    chunk = None
    k_ref, v_ref = k, v
    if chunk_s is not None:
        chunk = compress_chunk(k, v, *chunk_s)
        k_ref, v_ref = chunk_as_dense(k, v, chunk)
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
