"""GPU: the CUDA Trans-Both prefill on the sparse tensor cores (cuda/prefill_sp.cu, sm_90: bf16 / fp16, d 64 / 128, GQA
ratios 1 to 64, those not dividing 64 with unused rows) vs the float32 oracle on the decompressed pools, without a mask and causally; the rows that would
underflow recomputed; ``gpu.prefill_compressed_attention`` running it. Fresh random inputs every run, slots shuffled,
outputs poisoned with NaN before each launch and checked fully written."""

import pytest
import torch
from kv_cases import make_prefix, rel_err, trans_both_driver

from hs_kernels import attention as ref
from hs_kernels import cuda_prefill, gpu
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk
from hs_kernels.pool import BlockPool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_prefill.available(), reason="needs nvcc and an sm_90 GPU"),
]
D = 128


CASES = [
    # (query tokens, sequence tokens, h_kv, GQA ratio, q_pos0: None = no mask, K: "sparse" blocks or "dense" keys, d)
    (16, 64, 1, 4, None, "sparse", 128),
    (40, 192, 1, 4, 152, "sparse", 128),
    (40, 192, 1, 4, 76, "sparse", 128),
    (333, 2048, 8, 4, 857, "sparse", 128),
    (512, 512, 2, 4, 0, "sparse", 128),  # one shot
    (50, 640, 2, 1, 590, "sparse", 128),
    (100, 1024, 2, 2, 0, "sparse", 128),
    (70, 256, 4, 8, 186, "sparse", 128),
    (20, 512, 1, 16, None, "sparse", 128),
    (9, 320, 1, 64, 300, "sparse", 128),
    (16, 64, 1, 4, None, "dense", 128),
    (333, 2048, 8, 4, 857, "dense", 128),
    (512, 512, 2, 4, 0, "dense", 128),
    (50, 640, 2, 1, 590, "dense", 128),
    (70, 256, 4, 8, None, "dense", 128),
    # d 64: one 64-byte swizzle atom per 2:4 key row, one 64-element atom of Q^T and of dense keys, one m-tile of O^T
    (16, 64, 1, 4, None, "sparse", 64),
    (333, 2048, 8, 4, 857, "sparse", 64),
    (512, 512, 2, 4, 0, "sparse", 64),
    (50, 640, 2, 1, 590, "sparse", 64),
    (9, 320, 1, 64, 300, "sparse", 64),
    (20, 512, 1, 16, None, "sparse", 64),
    (333, 2048, 8, 4, 857, "dense", 64),
    (70, 256, 4, 8, None, "dense", 64),
    # GQA ratios not dividing 64: 64 // G tokens per consumer, the last 64 % G rows unused; odd ratios test each row
    (100, 640, 3, 3, 540, "sparse", 64),   # SmolLM2's ratio and head_dim
    (333, 2048, 2, 3, 857, "sparse", 128),
    (64, 512, 2, 3, None, "sparse", 128),
    (130, 1024, 2, 5, 0, "sparse", 128),
    (200, 1024, 2, 6, 824, "sparse", 128),  # even, not dividing 8: a row pair's token computed whole
    (77, 512, 4, 7, 435, "sparse", 128),
    (150, 640, 3, 3, 490, "dense", 64),
    (90, 512, 2, 6, None, "dense", 128),
    (40, 256, 1, 48, 216, "sparse", 128),   # one token per consumer, 16 rows unused
]
# fp16 (S an fp16 GEMM, V rounded to bf16 as staged): each K kind and head_dim, masked or not, GQA 1 to 64
FP16_CASES = [
    (333, 2048, 8, 4, 857, "sparse", 128),
    (512, 512, 2, 4, 0, "sparse", 128),
    (50, 640, 2, 1, 590, "sparse", 128),
    (20, 512, 1, 16, None, "sparse", 128),
    (9, 320, 1, 64, 300, "sparse", 128),
    (333, 2048, 8, 4, 857, "dense", 128),
    (70, 256, 4, 8, None, "dense", 128),
    (512, 512, 2, 4, 0, "sparse", 64),
    (100, 640, 3, 3, 540, "sparse", 64),
    (200, 1024, 2, 6, 824, "sparse", 128),
    (150, 640, 3, 3, 490, "dense", 64),
]


def fresh_inputs(t, seq, h_kv, group, k_kind="sparse", d=D, dtype=torch.bfloat16):
    """q, then K (2:4 blocks, slots shuffled, or dense keys [seq, h_kv, d]) and V (2:4 blocks), and both dense
    [h_kv, seq, d] for the oracle."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index = make_prefix(h_kv, d, seq, 1.0, 1.0, dtype, gen)
    used = seq // 64
    k_index, v_index = k_index[:, :used].contiguous(), v_index[:, :used].contiguous()
    q = torch.randn(t, h_kv * group, d, generator=gen, device="cuda").to(dtype)
    v = cuda_prefill.SparseBlocks(v_pool.values, v_pool.meta, v_index)
    if k_kind == "dense":
        keys = torch.randn(seq, h_kv, d, generator=gen, device="cuda").to(dtype)
        return q, keys, v, keys.transpose(0, 1), trans_both_driver().dense(v_pool, v_index)
    k = cuda_prefill.SparseBlocks(k_pool.values, k_pool.meta, k_index)
    return q, k, v, trans_both_driver().dense(k_pool, k_index), trans_both_driver().dense(v_pool, v_index)


def attend(q, k, v, q_pos0, fallback=True):
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"), device="cuda")
    result = cuda_prefill.attend(q, k, v, q.shape[-1] ** -0.5, q_pos0, out=out, lse=lse, fallback=fallback)
    assert result[0] is out and result[1] is lse
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("case, dtype", [(c, torch.bfloat16) for c in CASES] + [(c, torch.float16) for c in FP16_CASES],
                         ids=lambda c: "t{}-seq{}-hkv{}-g{}-at{}-k{}-d{}".format(*c) if isinstance(c, tuple) else str(c)[6:])
def test_kernel_matches_the_oracle(case, dtype):
    t, seq, h_kv, group, q_pos0, k_kind, d = case
    q, k, v, k_dense, v_dense = fresh_inputs(t, seq, h_kv, group, k_kind, d, dtype)
    out, lse = attend(q, k, v, q_pos0, fallback=False)
    assert out.dtype == dtype
    r_out, r_lse = trans_both_driver().reference(q, k_dense, v_dense, d ** -0.5, q_pos0)
    assert not out.isnan().any() and not lse.isnan().any(), "not fully written"
    assert rel_err(out.float(), r_out) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-3 * max(1.0, r_lse.abs().max().item())


def _attend_inputs(t: int, h_kv: int, group: int, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda")
    gen.seed()
    q, k, v = (torch.randn(t, h, D, generator=gen, device="cuda").to(dtype) for h in (h_kv * group, h_kv, h_kv))
    return q, k, v, gen


def _long_key_inputs(length: float, group: int = 4, dtype=torch.bfloat16):
    """256 tokens, 2 KV heads: KV head 0's key 70 of ``length`` along d 0, its queries orthogonal to it."""
    q, k, v, _ = _attend_inputs(256, 2, group, dtype)
    k[70, 0] = 0
    k[70, 0, 0] = length
    q[:, :group, 0] = 0
    return q, k, v


def _attend_both(q, k, v, s_k: float):
    """The kernel alone (no fallback), with the fallback, and the oracle, causally from position 0."""
    h_kv = k.shape[1]
    chunk = compress_chunk(k, v, s_k, 1)
    keys = k if s_k == 0 else cuda_prefill.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)
    args = (keys, cuda_prefill.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index), D ** -0.5, 0)
    pools = [BlockPool.allocate(op, D, 0, 0, q.dtype, "cuda") for op in ("k", "v")]
    empty = torch.zeros(h_kv, 1, dtype=torch.int32, device="cuda")
    return (cuda_prefill.attend(q, *args, fallback=False), cuda_prefill.attend(q, *args),
            ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("s_k", [1, 0])
def test_rows_that_would_underflow_are_recomputed(s_k, dtype):
    """One key far longer than the rest sets its head's offsets; queries orthogonal to it score far below them, so the
    kernel alone loses their rows (this test fails if it does not), and the fallback recomputes exactly those."""
    group = 4
    q, k, v = _long_key_inputs(3000.0, group, dtype)
    (alone, alone_lse), (out, lse), (r_out, r_lse) = _attend_both(q, k, v, s_k)
    lost = alone_lse.isnan()  # the kernel's mark
    assert lost[:, :group].all() and not lost[:, group:].any()
    assert not torch.allclose(alone[:, :group].float(), r_out[:, :group].float(), atol=0.1, equal_nan=False)
    assert not out.isnan().any() and rel_err(out.float(), r_out.float()) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-2 * max(1.0, r_lse.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("s_k", [1, 0])
def test_rows_far_below_the_bound_are_kept_by_the_headroom(s_k, dtype):
    """One long key puts KV head 0's bound some 130 (log2) above the scores of its queries (orthogonal to it), as real
    activations do (up to ~170): past UNDERFLOW_GAP, within OFFSET_HEADROOM + UNDERFLOW_GAP, so the kernel alone keeps
    every row, exactly."""
    group = 4
    q, k, v = _long_key_inputs(80.0, group, dtype)
    # random norms reach past the headroom now and then (148.6 once on the H200): each query of KV head 0 set to the
    # norm whose bound is 130
    rows = q[:, :group].float()
    q[:, :group] = (rows * (130.0 / (80.0 * D ** -0.5 * cuda_prefill.LOG2E) / rows.norm(dim=-1, keepdim=True))).to(q.dtype)
    bound = q[:, :group].float().norm(dim=-1) * 80.0 * D ** -0.5 * cuda_prefill.LOG2E  # the scores lie near 0
    assert cuda_prefill.UNDERFLOW_GAP + 10 < bound.min().item()
    assert bound.max().item() < cuda_prefill.UNDERFLOW_GAP + cuda_prefill.OFFSET_HEADROOM - 10
    (alone, alone_lse), _, (r_out, r_lse) = _attend_both(q, k, v, s_k)
    assert not alone_lse.isnan().any() and rel_err(alone.float(), r_out.float()) < 1e-2
    assert (alone_lse - r_lse).abs().max().item() < 1e-2 * max(1.0, r_lse.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("s_k", [1, 0])
def test_scores_at_the_bound_stay_finite(s_k, dtype):
    """Every query parallel to every key, all keys the longest: each score is its row's bound, each exponential
    2^OFFSET_HEADROOM, over 2048 keys and values up to 2^12: nothing overflows."""
    t, h_kv, group = 2048, 2, 4
    q, k, v, gen = _attend_inputs(t, h_kv, group, dtype)
    u = torch.zeros(D, device="cuda")
    u[0::4], u[1::4] = 1.0, -1.0  # 2:4 along d already: pruning keeps it
    k[:] = (u * 4.0).to(dtype)
    q[:] = (u * torch.rand(t, h_kv * group, 1, generator=gen, device="cuda") * 4.0).to(dtype)
    v *= 1000.0
    (alone, alone_lse), _, (r_out, r_lse) = _attend_both(q, k, v, s_k)
    assert alone.isfinite().all() and alone_lse.isfinite().all()
    assert rel_err(alone.float(), r_out.float()) < 1e-2
    assert (alone_lse - r_lse).abs().max().item() < 1e-2 * max(1.0, r_lse.abs().max().item())


@pytest.mark.parametrize("t, group, s_k, d, dtype", [
    (64, 4, 1, 128, torch.bfloat16), (2048, 4, 1, 128, torch.bfloat16), (640, 1, 1, 128, torch.bfloat16),
    (2048, 4, 0, 128, torch.bfloat16), (64, 2, 0, 128, torch.bfloat16), (2048, 4, 1, 64, torch.bfloat16),
    (640, 2, 0, 64, torch.bfloat16), (2048, 4, 1, 128, torch.float16), (640, 3, 0, 64, torch.float16)])
def test_compressed_prefill_runs_the_kernel(t, group, s_k, d, dtype, monkeypatch):
    h_kv = 2
    gen = torch.Generator(device="cuda")
    gen.seed()
    q, k, v = (torch.randn(t, h, d, generator=gen, device="cuda").to(dtype)
               for h in (h_kv * group, h_kv, h_kv))
    chunk = compress_chunk(k, v, s_k, 1)
    calls = []
    kernel = cuda_prefill.attend
    monkeypatch.setattr(cuda_prefill, "attend", lambda *a, **kw: calls.append(1) or kernel(*a, **kw))
    out, lse = gpu.prefill_compressed_attention(q, k, v, chunk)
    assert calls == [1]
    pools = [BlockPool.allocate(op, d, 0, 0, q.dtype, "cuda") for op in ("k", "v")]
    empty = torch.zeros(h_kv, 1, dtype=torch.int32, device="cuda")
    r_out, r_lse = ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0)
    assert out.dtype == q.dtype and rel_err(out.float(), r_out.float()) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-3 * max(1.0, r_lse.abs().max().item())


@pytest.mark.parametrize("t, group, d, dtype", [(2048, 4, 128, torch.bfloat16), (640, 3, 64, torch.float16)])
def test_compressed_prefill_with_dense_keys(t, group, d, dtype, monkeypatch):
    """A chunk's 2:4 keys given to the kernel decompressed and stored dense (``gpu.compressed_dense_keys``, here for
    any length): the same result as the oracle on the compressed chunk."""
    monkeypatch.setattr(gpu, "COMPRESSED_DENSE_KEYS_MIN_ROWS", 0)
    copied = []
    chunk_keys = gpu.chunk_keys
    monkeypatch.setattr(gpu, "chunk_keys", lambda c: copied.append(1) or chunk_keys(c))
    gen = torch.Generator(device="cuda")
    gen.seed()
    q, k, v = (torch.randn(t, h, d, generator=gen, device="cuda").to(dtype) for h in (2 * group, 2, 2))
    chunk = compress_chunk(k, v, 1, 1)
    out, lse = gpu.prefill_compressed_attention(q, k, v, chunk)
    assert copied == [1]
    pools = [BlockPool.allocate(op, d, 0, 0, q.dtype, "cuda") for op in ("k", "v")]
    empty = torch.zeros(2, 1, dtype=torch.int32, device="cuda")
    r_out, r_lse = ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0)
    assert rel_err(out.float(), r_out.float()) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-3 * max(1.0, r_lse.abs().max().item())


@pytest.mark.parametrize("d, dtype", [(128, torch.bfloat16), (64, torch.float16)])
def test_chunk_keys_are_the_compressed_chunks(d, dtype):
    """The compressed prefill reads a chunk's 2:4 keys as ``gpu.chunk_keys`` gives them: bit for bit the decompressed
    chunk (ties and signed zeros included)."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    k, v = (torch.randn(640, 2, d, generator=gen, device="cuda").to(dtype) for _ in range(2))
    k[:64, 0, :8] = 0.5  # ties within groups of four
    k[64:128, 1, :4] = -0.0
    chunk = compress_chunk(k, v, 1, 1)
    assert torch.equal(gpu.chunk_keys(chunk).view(torch.int16), chunk_as_dense(k, v, chunk)[0].view(torch.int16))


@pytest.mark.parametrize("k_kind", ["sparse", "dense"])
def test_longest_keys_of_the_blocks_read(k_kind):
    """The library's first kernel finds each KV head's longest key among the blocks it reads (the static offsets'
    factor: Cauchy-Schwarz needs it at least every key's norm, and a query along that key meets it)."""
    q, k, v, k_dense, _ = fresh_inputs(64, 640, 2, 4, k_kind)
    norms = k_dense.float().norm(dim=-1)  # [h_kv, 640], the decompressed keys
    for used in (10, 5):  # all blocks, then the first five: the maps say which count
        k_used = k[:64 * used] if k_kind == "dense" else k._replace(index=k.index[:, :used].contiguous())
        out, lse = torch.empty_like(q), torch.empty(q.shape[:2], device="cuda")
        work = cuda_prefill.launch(q, k_used, v._replace(index=v.index[:, :used].contiguous()), D ** -0.5, None, out, lse)
        torch.cuda.synchronize()
        assert work[2].item() == 0
        assert torch.allclose(work[:2].view(torch.float32), norms[:, :64 * used].amax(1), rtol=1e-5)


def test_entries_that_are_not_2_4_slots_are_refused():
    q, k, v, _, _ = fresh_inputs(16, 128, 1, 4)
    for bad in (torch.zeros_like(k.index), ~torch.full_like(k.index, k.values.shape[0])):
        with pytest.raises(ValueError, match="2:4 slot"):
            cuda_prefill.attend(q, k._replace(index=bad), v, D ** -0.5)
        with pytest.raises(ValueError, match="2:4 slot"):
            cuda_prefill.attend(q, torch.zeros(128, 1, D, dtype=q.dtype, device="cuda"), v._replace(index=bad), D ** -0.5)
    with pytest.raises(ValueError, match="do not fit"):
        cuda_prefill.attend(q, k, v, D ** -0.5, q_pos0=120)
    with pytest.raises(ValueError, match="dense keys"):
        cuda_prefill.attend(q, torch.zeros(64, 1, D, dtype=q.dtype, device="cuda"), v, D ** -0.5)
