"""The CUDA Trans-Both prefill's host side on the CPU: the exact recomputation of flagged rows, the entry point's fallback off sm_90, and the source building for sm_90a (nvcc)."""

import pytest
import torch

from hs_kernels import attention as ref
from hs_kernels import cuda_prefill, gpu, nvcc
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk
from hs_kernels.pool import BlockPool

D = 128


def compressed(t: int, h_kv: int, group: int, seed: int, s_k: float = 1):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(t, h, D, generator=gen).to(torch.bfloat16) for h in (h_kv * group, h_kv, h_kv))
    return q, k, v, compress_chunk(k, v, s_k, 1)


def oracle(q, k, v, chunk):
    pools = [BlockPool.allocate(op, D, 0, 0, q.dtype) for op in ("k", "v")]
    empty = torch.zeros(k.shape[1], 1, dtype=torch.int32)
    return ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0)


@pytest.mark.parametrize("q_pos0, s_k", [(None, 1), (0, 1), (0, 0)])
def test_exact_rows_match_the_oracle_and_touch_nothing_else(q_pos0, s_k):
    q, k, v, chunk = compressed(192, 2, 2, 5, s_k)
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"))
    rows = torch.tensor([[0, 0], [63, 3], [191, 1], [100, 2]])
    keys = k if s_k == 0 else cuda_prefill.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)
    cuda_prefill.exact_rows(q, rows, keys, cuda_prefill.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index),
                            D ** -0.5, q_pos0, out, lse)
    if q_pos0 == 0:
        r_out, r_lse = oracle(q, k, v, chunk)
    else:  # every query sees every key
        k_d, v_d = (x.float().repeat_interleave(2, 1) for x in chunk_as_dense(k, v, chunk))
        s = torch.einsum("thd,khd->thk", q.float(), k_d) * D ** -0.5
        r_out, r_lse = torch.einsum("thk,khd->thd", s.softmax(-1), v_d).to(q.dtype), s.logsumexp(-1)
    t, h = rows.T
    assert torch.allclose(out[t, h].float(), r_out[t, h].float(), atol=2e-2)
    assert torch.allclose(lse[t, h], r_lse[t, h], atol=1e-4)
    written = torch.zeros(q.shape[:2], dtype=torch.bool)
    written[t, h] = True
    assert lse[~written].isnan().all() and out[~written].isnan().all()


def test_lost_rows_lie_past_the_headroom_and_the_gap():
    """A row is lost where its log-sum-exp (log2) lies more than OFFSET_HEADROOM + UNDERFLOW_GAP below its
    Cauchy-Schwarz bound |q| x longest key x scale, and only there."""
    q = torch.zeros(1, 4, D)
    q[0, :, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    work = torch.tensor([2.0, 0.0]).view(torch.int32)  # KV head 0's longest key 2.0; work[-1]: the status
    scale = 0.5
    bound = q[0, :, 0] * 2.0 * scale * cuda_prefill.LOG2E
    edge = bound - cuda_prefill.OFFSET_HEADROOM - cuda_prefill.UNDERFLOW_GAP
    lse = (edge + torch.tensor([-1.0, 1.0, -0.01, 0.01])) / cuda_prefill.LOG2E
    assert cuda_prefill.lost_rows(q, work, scale, lse[None]).tolist() == [[True, False, True, False]]


def test_compressed_prefill_off_cuda_is_the_oracle():
    q, k, v, chunk = compressed(130, 2, 4, 7)  # a partial last tile: K and V "mixed"
    assert chunk.k_mode == "mixed" and not cuda_prefill.supports(q, 2)
    out, lse = gpu.prefill_compressed_attention(q, k, v, chunk)
    r_out, r_lse = oracle(q, k, v, chunk)
    assert torch.equal(out, r_out) and torch.equal(lse, r_lse)


def test_compressed_prefill_rejects_mismatched_chunk_keys():
    q, k, v, chunk = compressed(64, 2, 4, 9)
    with pytest.raises(ValueError):
        gpu.prefill_compressed_attention(q, k[:32], v, chunk)


@pytest.mark.parametrize("group", [1, 4, 16])
def test_kernel_builds_for_hopper(group, tmp_path):
    """The source compiles for sm_90a at these GQA ratios with the machine's nvcc (no GPU needed), once."""
    if nvcc.find() is None:
        pytest.skip("no nvcc on this machine")
    so = nvcc.library(cuda_prefill.SOURCE, "sm_90a", (f"HS_G={group}",), tmp_path)
    assert so.exists() and so.stat().st_size > 0 and list(tmp_path.iterdir()) == [so]
    assert nvcc.library(cuda_prefill.SOURCE, "sm_90a", (f"HS_G={group}",), tmp_path) == so


def test_prefix_blocks_split_by_kind():
    """The full prefix blocks 2:4 in K and V for every KV head go to the kernel; the others, the partial last block
    among them, stay in order for the Triton kernel, with their entries' kinds."""
    k_index = ~torch.arange(14, dtype=torch.int32).view(2, 7)
    v_index = ~torch.arange(14, dtype=torch.int32).view(2, 7)
    k_index[1, 2] = 0  # a dense entry in one head
    v_index[0, 4] = 3

    def split(prefix_len):
        sparse, rest, kinds = gpu.cuda_prefix_blocks(k_index, v_index, prefix_len)
        return sparse.tolist(), rest.tolist(), kinds

    assert split(64 * 6 + 5) == ([0, 1, 3, 5], [2, 4, 6], (3, 3))
    assert split(64 * 6) == ([0, 1, 3, 5], [2, 4], (3, 3))
    assert split(64 * 5) == ([0, 1, 3], [2, 4], (3, 3))
    assert split(64 * 4) == ([0, 1, 3], [2], (3, 2))
    assert split(64 * 2) == ([0, 1], [], (1, 1))
    assert split(63) == ([], [0], (2, 2))
    k_index[:, 0], v_index[:, 0] = 5, 6  # a dense block in every head
    assert split(64 * 2) == ([1], [0], (1, 1))


def test_builds_exist_for_head_dim_128_and_gqa_ratios_dividing_64():
    assert all(cuda_prefill.fits(128, g) for g in (1, 2, 4, 8, 16, 32, 64))
    assert not any(cuda_prefill.fits(128, g) for g in (0, 3, 7, 128)) and not cuda_prefill.fits(64, 4)


def test_ctas_per_launch():
    assert cuda_prefill.ctas(8192, 32, 8) == 171 * 8  # 48 tokens of 4 heads per CTA
    assert cuda_prefill.ctas(1, 16, 16) == 16
    assert cuda_prefill.ctas(193, 64, 1) == 65  # G 64: one token per consumer, three per CTA


def test_prefill_attention_checks_its_kernel_everywhere():
    """An unknown ``kernel`` is refused on any machine; off CUDA every kernel choice answers with the reference."""
    from kv_cases import make_prefix

    gen = torch.Generator().manual_seed(9)
    pools_and_maps = make_prefix(2, D, 200, 1.0, 1.0, torch.float32, gen, "cpu")
    q, k, v = (torch.randn(30, h, D, generator=gen) for h in (8, 2, 2))
    with pytest.raises(ValueError, match="kernel must be"):
        gpu.prefill_attention(q, k, v, *pools_and_maps, 200, kernel="tilelang")
    want = ref.prefill_attention(q, k, v, *pools_and_maps, 200)
    for kernel in ("auto", "triton", "cuda"):
        got = gpu.prefill_attention(q, k, v, *pools_and_maps, 200, kernel=kernel)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
