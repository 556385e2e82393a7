"""GPU: the CUDA Trans-Both prefill on the sparse tensor cores (cuda/prefill_sp.cu, sm_90: bf16, d 128, GQA ratios
dividing 64) vs the float32 oracle on the decompressed pools, without a mask and causally; the rows that would
underflow recomputed; ``gpu.prefill_compressed_attention`` running it. Fresh random inputs every run, slots shuffled,
outputs poisoned with NaN before each launch and checked fully written."""

import importlib.util
from pathlib import Path

import pytest
import torch
from kv_cases import make_prefix, rel_err

from hs_kernels import attention as ref
from hs_kernels import cuda_prefill, gpu
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk
from hs_kernels.pool import BlockPool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_prefill.available(), reason="needs nvcc and an sm_90 GPU"),
]
D = 128


def _driver():
    path = Path(__file__).parent.parent / "kernels" / "probes" / "trans_both_sp.py"
    spec = importlib.util.spec_from_file_location("trans_both_sp_driver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = [
    # (query tokens, sequence tokens, h_kv, GQA ratio, q_pos0: None = no mask)
    (16, 64, 1, 4, None),
    (40, 192, 1, 4, 152),
    (40, 192, 1, 4, 76),
    (333, 2048, 8, 4, 857),
    (512, 512, 2, 4, 0),  # one shot
    (50, 640, 2, 1, 590),
    (100, 1024, 2, 2, 0),
    (70, 256, 4, 8, 186),
    (20, 512, 1, 16, None),
    (9, 320, 1, 64, 300),
]


def fresh_inputs(t, seq, h_kv, group):
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index = make_prefix(h_kv, D, seq, 1.0, 1.0, torch.bfloat16, gen)
    used = seq // 64
    q = torch.randn(t, h_kv * group, D, generator=gen, device="cuda").to(torch.bfloat16)
    return q, k_pool, v_pool, k_index[:, :used].contiguous(), v_index[:, :used].contiguous()


def attend(q, k_pool, v_pool, k_index, v_index, q_pos0, fallback=True):
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), device="cuda")
    result = cuda_prefill.attend(q, k_pool.values, k_pool.meta, v_pool.values, v_pool.meta, k_index, v_index,
                                 D ** -0.5, q_pos0, out=out, lse=lse, fallback=fallback)
    assert result[0] is out and result[1] is lse
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("case", CASES, ids=lambda c: "t{}-seq{}-hkv{}-g{}-at{}".format(*c))
def test_kernel_matches_the_oracle(case):
    t, seq, h_kv, group, q_pos0 = case
    q, k_pool, v_pool, k_index, v_index = fresh_inputs(t, seq, h_kv, group)
    out, lse = attend(q, k_pool, v_pool, k_index, v_index, q_pos0, fallback=False)
    r_out, r_lse = _driver().reference(q, k_pool, k_index, v_pool, v_index, D ** -0.5, q_pos0)
    assert not out.isnan().any() and not lse.isnan().any(), "not fully written"
    assert rel_err(out.float(), r_out) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-3 * max(1.0, r_lse.abs().max().item())


def test_rows_that_would_underflow_are_recomputed():
    """One key far longer than the rest sets its head's offsets; queries orthogonal to it score far below them, so the
    kernel alone loses their rows (this test fails if it does not), and the fallback recomputes exactly those."""
    t, h_kv, group = 256, 2, 4
    gen = torch.Generator(device="cuda")
    gen.seed()
    q, k, v = (torch.randn(t, h, D, generator=gen, device="cuda").to(torch.bfloat16)
               for h in (h_kv * group, h_kv, h_kv))
    k[70, 0] = 0
    k[70, 0, 0] = 3000.0
    q[:, :group, 0] = 0  # KV head 0's queries: orthogonal to the long key
    chunk = compress_chunk(k, v, 1, 1)
    args = (chunk.k_vals, chunk.k_meta, chunk.v_vals, chunk.v_meta, chunk.k_index, chunk.v_index, D ** -0.5, 0)
    pools = [BlockPool.allocate(op, D, 0, 0, q.dtype, "cuda") for op in ("k", "v")]
    empty = torch.zeros(h_kv, 1, dtype=torch.int32, device="cuda")
    r_out, r_lse = ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0)

    alone, alone_lse = cuda_prefill.attend(q, *args, fallback=False)
    lost = alone_lse.isnan()  # the kernel's mark
    assert lost[:, :group].all() and not lost[:, group:].any()
    assert not torch.allclose(alone[:, :group].float(), r_out[:, :group].float(), atol=0.1, equal_nan=False)
    out, lse = cuda_prefill.attend(q, *args)
    assert not out.isnan().any() and rel_err(out.float(), r_out.float()) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-2 * max(1.0, r_lse.abs().max().item())


@pytest.mark.parametrize("t, group", [(64, 4), (2048, 4), (640, 1)])
def test_compressed_prefill_runs_the_kernel(t, group, monkeypatch):
    h_kv = 2
    gen = torch.Generator(device="cuda")
    gen.seed()
    q, k, v = (torch.randn(t, h, D, generator=gen, device="cuda").to(torch.bfloat16)
               for h in (h_kv * group, h_kv, h_kv))
    chunk = compress_chunk(k, v, 1, 1)
    calls = []
    kernel = cuda_prefill.attend
    monkeypatch.setattr(cuda_prefill, "attend", lambda *a, **kw: calls.append(1) or kernel(*a, **kw))
    out, lse = gpu.prefill_compressed_attention(q, k, v, chunk)
    assert calls == [1]
    pools = [BlockPool.allocate(op, D, 0, 0, q.dtype, "cuda") for op in ("k", "v")]
    empty = torch.zeros(h_kv, 1, dtype=torch.int32, device="cuda")
    r_out, r_lse = ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0)
    assert out.dtype == q.dtype and rel_err(out.float(), r_out.float()) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-3 * max(1.0, r_lse.abs().max().item())


def test_longest_keys_of_the_blocks_read():
    """The library's first kernel finds each KV head's longest key among the blocks of its index map (the static
    offsets' factor: Cauchy-Schwarz needs it at least every key's norm, and a query along that key meets it)."""
    q, k_pool, v_pool, k_index, v_index = fresh_inputs(64, 640, 2, 4)
    norms = k_pool.gather(k_index).float().norm(dim=-1)  # [h_kv, nb, 64], the decompressed keys
    for used in (10, 5):  # all blocks, then the first five: the maps say which count
        work = torch.full((3,), -1, dtype=torch.int32, device="cuda")
        out, lse = torch.empty_like(q), torch.empty(q.shape[:2], device="cuda")
        cuda_prefill.launch(q, k_pool.values, k_pool.meta, v_pool.values, v_pool.meta, k_index[:, :used].contiguous(),
                            v_index[:, :used].contiguous(), work, D ** -0.5, None, out, lse)
        torch.cuda.synchronize()
        assert work[2].item() == 0
        assert torch.allclose(work[:2].view(torch.float32), norms[:, :used].amax(dim=(1, 2)), rtol=1e-5)


def test_entries_that_are_not_2_4_slots_are_refused():
    q, k_pool, v_pool, k_index, v_index = fresh_inputs(16, 128, 1, 4)
    for bad in (torch.zeros_like(k_index), ~torch.full_like(k_index, k_pool.values.shape[0])):
        with pytest.raises(ValueError, match="2:4 slot"):
            cuda_prefill.attend(q, k_pool.values, k_pool.meta, v_pool.values, v_pool.meta, bad, v_index, D ** -0.5)
    with pytest.raises(ValueError, match="do not fit"):
        cuda_prefill.attend(q, k_pool.values, k_pool.meta, v_pool.values, v_pool.meta, k_index, v_index, D ** -0.5,
                            q_pos0=120)
