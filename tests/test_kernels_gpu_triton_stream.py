"""GPU: the Triton streaming kernel (behind ``hs_kernels.streaming_attention``) vs the reference.

Fresh random inputs every run; out and lse poisoned with NaN before each launch and checked fully
written; the serving shapes (Llama-3.1-8B streaming half: 16 query heads, 4 KV groups, d 128,
sink 128, window 256; an 8K chunk after a 24K prefix; decode at B 8), other head dims, GQA
ratios and row tiles, keys in any order, and queries that see no key.
"""

import pytest
import torch
from kv_cases import rel_err, stream_case

import hs_kernels
from hs_kernels import attention as ref
from hs_kernels import gpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.triton_available(), reason="needs CUDA and triton"),
]

CASES = [
    # layout, batch, t, keys, h_q, h_kv, d, sink, window, dtype, launch options
    ("backend", 1, 8192, 24576, 16, 4, 128, 128, 256, torch.bfloat16, {}),
    ("backend", 1, 8192, 0, 16, 4, 128, 128, 256, torch.bfloat16, {}),
    ("backend", 1, 1000, 3000, 16, 4, 128, 128, 1000, torch.float16, {"block_m": 64}),
    ("decode", 8, 1, 448, 16, 4, 128, 128, 256, torch.bfloat16, {}),
    ("decode", 3, 1, 448, 28, 4, 128, 128, 256, torch.bfloat16, {"num_warps": 8}),
    ("shuffled", 2, 300, 700, 8, 2, 64, 64, 128, torch.bfloat16, {"block_m": 16}),
    ("shuffled", 1, 200, 500, 6, 6, 256, 16, 64, torch.bfloat16, {"block_m": 32}),
    ("unseen", 2, 40, 128, 8, 2, 128, 8, 16, torch.bfloat16, {}),
]


def case_id(c):
    return f"{c[0]}-b{c[1]}-t{c[2]}-n{c[3]}-hq{c[4]}-hkv{c[5]}-d{c[6]}-{str(c[9])[6:]}-" + (
        "-".join(f"{a}{b}" for a, b in c[10].items()) or "default")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_triton_streaming_matches_reference(case):
    layout, b, t, n, h_q, h_kv, d, sink, window, dtype, opts = case
    gen = torch.Generator()
    gen.seed()
    q, q_pos, k, v, k_pos = stream_case(layout, b, t, n, h_q, h_kv, d, sink, window, dtype, gen, "cuda")
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    gpu.triton_streaming(q, q_pos, k, v, k_pos, sink, window, d ** -0.5, **opts, out=out, lse=lse)
    o_ref, l_ref = ref.streaming_attention(q, q_pos, k, v, k_pos, sink, window, d ** -0.5)
    assert not out.isnan().any() and not lse.isnan().any(), "not fully written"
    out2, lse2 = gpu.triton_streaming(q, q_pos, k, v, k_pos, sink, window, d ** -0.5, **opts,
                                      key_blocks=gpu.stream_key_blocks(k_pos.to(torch.int32)))
    assert torch.equal(out, out2) and torch.equal(lse, lse2)  # the key blocks precomputed (a decode step's layers)
    nk = k.shape[1]
    rows = torch.randperm(b * nk + 99, generator=gen)[:b * nk].view(b, nk).cuda()  # the keys at storage rows
    k_st, v_st = (torch.zeros(b * nk + 99, h_kv, d, dtype=dtype, device="cuda").index_copy_(0, rows.flatten(), x.flatten(0, 1))
                  for x in (k, v))
    out3, lse3 = gpu.triton_streaming(q, q_pos, k_st, v_st, k_pos, sink, window, d ** -0.5, **opts, k_rows=rows)
    assert torch.equal(out, out3) and torch.equal(lse, lse3)  # read in place (the serving pool's stream slots)
    for splits in (1, 3):  # the key blocks split among programs, partials merged (decode's default where SMs idle)
        o_s, l_s = gpu.triton_streaming(q, q_pos, k, v, k_pos, sink, window, d ** -0.5, **opts, splits=splits)
        assert torch.equal(torch.isfinite(l_s), torch.isfinite(lse)) and (o_s[~torch.isfinite(lse)] == 0).all()
        assert rel_err(o_s, o_ref) < 1e-2
    seen = torch.isfinite(l_ref)
    assert torch.equal(torch.isfinite(lse), seen)
    assert (out[~seen] == 0).all()
    if layout == "unseen":
        assert not seen.any()
        return
    assert rel_err(out, o_ref) < 1e-2
    assert (lse[seen] - l_ref[seen]).abs().max().item() < 1e-2 * max(1.0, l_ref[seen].abs().max().item())


def test_entry_point_runs_the_kernel_and_falls_back(monkeypatch):
    """``hs_kernels.streaming_attention`` launches the kernel on CUDA bf16, the reference for float32."""
    launches = []
    kernel_entry = gpu.triton_streaming
    monkeypatch.setattr(gpu, "triton_streaming", lambda *a, **kw: launches.append(1) or kernel_entry(*a, **kw))
    gen = torch.Generator().manual_seed(0)
    q, q_pos, k, v, k_pos = stream_case("backend", 1, 300, 500, 8, 2, 128, 64, 128, torch.bfloat16, gen, "cuda")
    out, lse = hs_kernels.streaming_attention(q, q_pos, k, v, k_pos, 64, 128)
    assert launches == [1]
    o_ref, _ = ref.streaming_attention(q, q_pos, k, v, k_pos, 64, 128)
    assert rel_err(out, o_ref) < 1e-2
    out32, lse32 = hs_kernels.streaming_attention(q.float(), q_pos, k.float(), v.float(), k_pos, 64, 128)
    assert launches == [1]
    o32, l32 = ref.streaming_attention(q.float(), q_pos, k.float(), v.float(), k_pos, 64, 128)
    assert torch.equal(out32, o32) and torch.equal(lse32, l32)
