"""GPU: ``hs_kernels.prefill_attention`` with a cached prefix whose 2:4 blocks go to the CUDA kernel on the sparse
tensor cores (``gpu.cuda_prefix_prefill``: those blocks without a mask, the chunk and the other prefix blocks on the
Triton kernel, merged by log-sum-exp) vs the float32 reference. Fresh random inputs every run (``prefill_inputs``:
slots shuffled, NaN past the prefix in its last block)."""

import pytest
import torch
from kv_cases import prefill_inputs, rel_err

import hs_kernels
from hs_kernels import attention as ref
from hs_kernels import cuda_prefill, gpu
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (cuda_prefill.available() and gpu.triton_available()), reason="needs nvcc, triton, sm_90"),
]

CASES = [
    # (h_q, h_kv, T, prefix_len, p_k, p_v, d): p the chance that a (head, block) of the prefix is 2:4
    (32, 8, 300, 3000, 1.0, 1.0, 128),    # every full block to the kernel, the partial last to Triton
    (32, 8, 1100, 4096, 1.0, 1.0, 128),   # no partial block: Triton sees the chunk alone
    (4, 1, 200, 3000, 0.5, 0.5, 128),     # one KV head: a quarter of the blocks to the kernel, the rest mixed
    (8, 2, 77, 2000, 1.0, 0.5, 128),      # G 4, K all 2:4, V mixed
    (16, 16, 150, 1500, 1.0, 1.0, 128),   # G 1
    (16, 8, 64, 700, 1.0, 1.0, 128),      # G 2
    (64, 8, 40, 900, 1.0, 1.0, 128),      # G 8
    (16, 1, 33, 640, 1.0, 1.0, 128),      # G 16
    (32, 8, 300, 3000, 1.0, 1.0, 64),     # d 64 (Llama-3.2-1B's heads)
    (8, 2, 77, 2000, 1.0, 0.5, 64),       # d 64, V mixed
    (9, 3, 200, 2000, 1.0, 1.0, 64),      # G 3, d 64: SmolLM2's heads
    (28, 4, 150, 3000, 1.0, 1.0, 128),    # G 7 (Qwen2.5-7B's ratio)
]
FP16_CASES = [  # fp16: V rounded to bf16 on its way to the kernel
    (32, 8, 300, 3000, 1.0, 1.0, 128),
    (8, 2, 77, 2000, 1.0, 0.5, 128),
    (16, 16, 150, 1500, 1.0, 1.0, 128),
    (32, 8, 300, 3000, 1.0, 1.0, 64),
    (9, 3, 200, 2000, 1.0, 1.0, 64),
    (28, 4, 150, 3000, 1.0, 1.0, 128),
]


@pytest.mark.parametrize("case, dtype", [(c, torch.bfloat16) for c in CASES] + [(c, torch.float16) for c in FP16_CASES],
                         ids=lambda c: "hq{}-hkv{}-t{}-p{}-k{}-v{}-d{}".format(*c) if isinstance(c, tuple) else str(c)[6:])
def test_cuda_prefix_matches_the_reference(case, dtype, monkeypatch):
    """Also: the Triton part gets its entries' kinds from the call's first sync, so it makes no sync of its own."""
    monkeypatch.setattr(gpu, "_entry_kinds", lambda *a: pytest.fail("a host sync for the entries' kinds"))
    h_q, h_kv, t, prefix_len, p_k, p_v, d = case
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v)
    assert len(gpu.cuda_prefix_blocks(k_pool, v_pool, k_index, v_index, prefix_len)[0]) > 0
    out, lse = gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale, kernel="cuda")
    o_ref, l_ref = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale)
    assert not out.isnan().any() and not lse.isnan().any()
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert rel_err(out, o_ref) < 1e-2
    assert (lse - l_ref).abs().max().item() < 1e-2 * max(1.0, l_ref.abs().max().item())


def test_auto_takes_the_kernel_from_enough_keys_and_pairs(monkeypatch):
    """"auto": the CUDA path for a chunk after a 2:4 prefix of ``gpu.CUDA_PREFIX_MIN_KEYS`` keys and
    ``gpu.CUDA_PREFIX_MIN_PAIRS`` query x key pairs, or of ``CUDA_PREFIX_LONG_KEYS`` keys and
    ``CUDA_PREFIX_LONG_MIN_PAIRS`` pairs (``CUDA_PREFIX_GIVEN_PAIRS`` and ``CUDA_PREFIX_GIVEN_MIN_PAIRS`` with the split
    given); the Triton kernel alone for a shorter prefix, a shorter chunk or a dense prefix; float16 as bfloat16."""
    calls = []
    split = gpu.cuda_prefix_prefill
    monkeypatch.setattr(gpu, "cuda_prefix_prefill", lambda *a, **kw: calls.append(1) or split(*a, **kw))
    prefix = 64 * -(-gpu.CUDA_PREFIX_MIN_KEYS // 64)
    t = -(-gpu.CUDA_PREFIX_MIN_PAIRS // prefix)
    long_prefix = 64 * -(-gpu.CUDA_PREFIX_LONG_KEYS // 64)
    long_t = -(-gpu.CUDA_PREFIX_LONG_MIN_PAIRS // long_prefix)
    given_t = -(-gpu.CUDA_PREFIX_GIVEN_MIN_PAIRS // long_prefix)
    given_short_t = -(-gpu.CUDA_PREFIX_GIVEN_PAIRS // prefix)
    assert given_t < long_t < t and given_short_t < t
    bf16 = torch.bfloat16
    for t_, p_, s, dtype, given, expect in (
            (t, prefix, 1.0, bf16, False, [1]), (t - 1, prefix, 1.0, bf16, False, []),
            (t + 64, prefix - 64, 1.0, bf16, False, []), (t, prefix, 0.0, bf16, False, []),
            (t, prefix, 1.0, torch.float16, False, [1]), (t - 1, prefix, 1.0, torch.float16, False, []),
            (long_t, long_prefix, 1.0, bf16, False, [1]), (long_t - 1, long_prefix, 1.0, bf16, False, []),
            (long_t, long_prefix - 64, 1.0, bf16, False, []),
            (given_t, long_prefix, 1.0, bf16, True, [1]), (given_t - 1, long_prefix, 1.0, bf16, True, []),
            (given_t, long_prefix, 1.0, bf16, False, []), (given_t, long_prefix - 64, 1.0, bf16, True, []),
            (given_short_t, prefix, 1.0, bf16, True, [1]), (given_short_t - 1, prefix, 1.0, bf16, True, []),
            (given_short_t, prefix, 1.0, bf16, False, [])):
        calls.clear()
        k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(32, 8, 128, dtype, t_, p_, s, s)
        found = gpu.prefix_splits([(k_pool, v_pool, k_index, v_index)], p_)[0] if given else None
        out, _ = hs_kernels.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, p_, scale, split=found)
        assert calls == expect, (t_, p_, s, dtype, given)
        o_ref, _ = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, p_, scale)
        assert rel_err(out, o_ref) < 1e-2


def test_splits_found_for_all_layers_at_once_make_the_calls_sync_free():
    """``gpu.prefix_splits`` over layers of different KV heads and kinds (one host sync) gives each layer's
    ``cuda_prefix_blocks``; ``prefill_attention(kernel="cuda")`` with a layer's split makes no host sync and matches
    the reference; a split of another prefix is refused."""
    prefix_len = 64 * 40 + 7
    layers = [prefill_inputs(h_q, h_kv, 128, torch.bfloat16, 96, prefix_len, p_k, p_v)
              for h_q, h_kv, p_k, p_v in ((32, 8, 1.0, 1.0), (8, 2, 0.7, 1.0), (16, 4, 1.0, 0.9))]
    splits = gpu.prefix_splits([inputs[:4] for inputs in layers], prefix_len)
    for inputs, split in zip(layers, splits):
        alone = gpu.cuda_prefix_blocks(*inputs[:4], prefix_len)
        assert torch.equal(split.sparse, alone.sparse) and torch.equal(split.rest, alone.rest)
        assert split.kinds == alone.kinds and len(split.sparse) > 0
        k_index, v_index = inputs[2:4]
        for got, maps, blocks in ((split.k_sparse, k_index, split.sparse), (split.v_sparse, v_index, split.sparse),
                                  (split.k_rest, k_index, split.rest), (split.v_rest, v_index, split.rest)):
            assert got.is_contiguous() and torch.equal(got, maps[:, blocks.long()])
    for inputs, split in zip(layers, splits):
        k_pool, v_pool, k_index, v_index, q, k, v, scale = inputs
        run = lambda: gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale,  # noqa: E731
                                            kernel="cuda", split=split)
        run()  # compiled
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out, lse = run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        o_ref, l_ref = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale)
        assert rel_err(out, o_ref) < 1e-2
        assert (lse - l_ref).abs().max().item() < 1e-2 * max(1.0, l_ref.abs().max().item())
    inputs = layers[0]
    with pytest.raises(ValueError, match="split"):
        gpu.prefill_attention(*inputs[4:7], *inputs[:4], prefix_len - 64, inputs[7], split=splits[0])


def test_short_chunks_split_the_prefix_long_ones_do_not():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    slots = sms * cuda_prefill.resident(4)
    long_t = 48 * -(-gpu.CUDA_PREFIX_MIN_WAVES * slots // 8)  # 48 tokens of 4 heads per CTA, 8 KV heads
    assert gpu.cuda_prefix_splits(long_t, 32, 8, 512, torch.device("cuda")) == 1
    assert 1 < gpu.cuda_prefix_splits(256, 32, 8, 512, torch.device("cuda")) <= 512
    assert gpu.cuda_prefix_splits(256, 32, 8, 3, torch.device("cuda")) <= 3


def split_prefix_matches_the_reference(inputs, prefix_len, splits, dense_keys=False):
    k_pool, v_pool, k_index, v_index, q, k, v, scale = inputs
    out, lse = gpu.cuda_prefix_prefill(q, k, v, k_pool, v_pool, prefix_len, scale,
                                       gpu.cuda_prefix_blocks(k_pool, v_pool, k_index, v_index, prefix_len),
                                       splits=splits, dense_keys=dense_keys)
    o_ref, l_ref = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale)
    assert not out.isnan().any() and rel_err(out, o_ref) < 1e-2
    assert (lse - l_ref).abs().max().item() < 1e-2 * max(1.0, l_ref.abs().max().item())


def recording_rescues(monkeypatch) -> list:
    """The rows that each call of ``cuda_prefill.rescue`` recomputes (its ``count``), as it is called."""
    counts, rescue = [], cuda_prefill.rescue

    def counting(q, *args, **kwargs):
        counts.append(torch.zeros(1, dtype=torch.int32, device=q.device))
        rescue(q, *args, count=counts[-1], **kwargs)

    monkeypatch.setattr(cuda_prefill, "rescue", counting)
    return counts


@pytest.mark.parametrize("splits", [1, 2, 3, 7])
def test_split_prefix_matches_the_reference(splits, monkeypatch):
    """The 2:4 blocks in ``splits`` parts (uneven where the count does not divide them), merged with the Triton part;
    no row is recomputed on ordinary inputs."""
    counts = recording_rescues(monkeypatch)
    split_prefix_matches_the_reference(prefill_inputs(32, 8, 128, torch.bfloat16, 200, 3000, 1.0, 1.0), 3000, splits)
    assert [c.item() for c in counts] == [0]


@pytest.mark.parametrize("case, dtype", [((32, 8, 300, 3000, 1.0, 1.0, 128), torch.bfloat16),
                                         ((8, 2, 77, 2000, 1.0, 0.5, 128), torch.bfloat16),
                                         ((9, 3, 200, 2000, 1.0, 1.0, 64), torch.bfloat16),
                                         ((28, 4, 150, 3000, 1.0, 1.0, 128), torch.float16)])
def test_dense_keys_match_the_reference(case, dtype, monkeypatch):
    """``dense_keys``: the 2:4 blocks' keys read from a dense copy (``gpu.prefix_keys``), in one part; no row is
    recomputed on ordinary inputs; more parts are refused."""
    counts = recording_rescues(monkeypatch)
    h_q, h_kv, t, prefix_len, p_k, p_v, d = case
    inputs = prefill_inputs(h_q, h_kv, d, dtype, t, prefix_len, p_k, p_v)
    split_prefix_matches_the_reference(inputs, prefix_len, None, dense_keys=True)
    assert [c.item() for c in counts] == [0]
    with pytest.raises(ValueError, match="one part"):
        split_prefix_matches_the_reference(inputs, prefix_len, 2, dense_keys=True)


@pytest.mark.parametrize("splits, dense_keys", [(1, False), (3, False), (1, True)])
def test_rows_whose_exponentials_underflow_are_recomputed(splits, dense_keys, monkeypatch):
    """A key a thousand times longer than the others, orthogonal to KV head 0's queries, sets their static offset
    some 1400 (log2) above every score: the kernel's exponentials all flush to zero there, and those rows (and only
    those) get their CUDA part again, on the GPU, with no host sync."""
    counts = recording_rescues(monkeypatch)
    inputs = prefill_inputs(32, 8, 128, torch.bfloat16, 100, 2048, 1.0, 1.0)
    k_pool, k_index, q = inputs[0], inputs[2], inputs[4]
    slot = ~k_index[0, 5].item()
    k_pool.values[slot, 7] = 0
    k_pool.values[slot, 7, 0] = 1000.0  # one of d 0 .. 3, as the metadata says
    q[:, :4, :4] = 0  # KV head 0's query heads
    blocks = gpu.cuda_prefix_blocks(*inputs[:4], 2048)  # the call's one host sync
    run = lambda: gpu.cuda_prefix_prefill(*inputs[4:7], *inputs[:2], 2048, inputs[7], blocks,  # noqa: E731
                                          splits=splits, dense_keys=dense_keys)
    split_prefix_matches_the_reference(inputs, 2048, splits, dense_keys)  # compiled, and right
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = run()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert [c.item() for c in counts] == [100 * 4] * 2
    assert torch.equal(again[0], run()[0])


def test_entries_past_the_pool_make_every_row_nan():
    """``cuda_prefix_blocks`` raises on such an entry; given one anyway, the kernel computes nothing and every row of
    the result is NaN, not stale memory."""
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(32, 8, 128, torch.bfloat16, 64, 1000, 1.0, 1.0)
    split = gpu.cuda_prefix_blocks(k_pool, v_pool, k_index, v_index, 1000)
    past = ~torch.tensor(v_pool.values.shape[0], dtype=torch.int32)
    v_index[5, split.sparse[2]] = past
    with pytest.raises(ValueError, match="2:4 slot"):
        gpu.cuda_prefix_blocks(k_pool, v_pool, k_index, v_index, 1000)
    split.v_sparse[5, 2] = past  # the split's own copy of that entry, given to the kernel anyway
    out, lse = gpu.cuda_prefix_prefill(q, k, v, k_pool, v_pool, 1000, scale, split)
    assert out.isnan().all() and lse.isnan().all()


def test_cuda_refuses_what_it_cannot_run():
    blocks = torch.randn(8, 16, 64, 128, device="cuda").to(torch.bfloat16)
    sparse = torch.ones(8, 16, dtype=torch.bool, device="cuda")
    k_pool, k_index = BlockPool.holding("k", blocks, sparse.logical_and(torch.arange(8, device="cuda")[:, None] > 0),
                                        element_mask(blocks, "k"))  # KV head 0's keys dense
    v_pool, v_index = BlockPool.holding("v", blocks, sparse, element_mask(blocks, "v"))
    q, k, v = (torch.randn(2048, h, 128, device="cuda").to(torch.bfloat16) for h in (32, 8, 8))
    with pytest.raises(ValueError, match="no prefix block"):
        gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 1024, kernel="cuda")
    out, _ = gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 1024)  # "auto": the Triton kernel
    o_ref, _ = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 1024)
    assert rel_err(out, o_ref) < 1e-2
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(32, 8, 256, torch.bfloat16, 64, 1000, 1.0, 1.0)
    with pytest.raises(ValueError, match="head_dim 64 or 128"):
        gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 1000, scale, kernel="cuda")
    k_pool, v_pool, k_index, v_index, q, k, v, scale = prefill_inputs(32, 8, 128, torch.bfloat16, 64, 1000, 1.0, 1.0)
    k_index[3, 2] = ~torch.tensor(k_pool.values.shape[0], dtype=torch.int32)  # a 2:4 slot past the pool
    with pytest.raises(ValueError, match="2:4 slot"):
        gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 1000, scale, kernel="cuda")
    with pytest.raises(ValueError, match="kernel must be"):
        gpu.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, 1000, scale, kernel="tilelang")
