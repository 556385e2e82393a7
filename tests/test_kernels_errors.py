"""Bad shapes and dtypes are rejected with a one-line ValueError / TypeError."""

import pytest
import torch

import hs_kernels as hk

F32 = torch.float32
POOL_K = hk.BlockPool.allocate("k", 64, 4, 4, F32)
POOL_V = hk.BlockPool.allocate("v", 64, 4, 4, F32)
IDX = torch.zeros(1, 2, 2, dtype=torch.int32)
Q = torch.zeros(1, 4, 64)
GOOD_MASK = hk.magnitude_mask(torch.randn(2, 64, 64))



def _k_pool_tensors(head_dim):
    pool = hk.BlockPool.allocate("k", head_dim, 1, 1, F32)
    return pool.dense, pool.values, pool.meta


CASES = [
    ("blocks of 32 tokens", ValueError, lambda: hk.compress_blocks(torch.zeros(2, 32, 64), torch.ones(2, 32, 64, dtype=torch.bool), "k")),
    ("head_dim 96", ValueError, lambda: hk.compress_blocks(torch.zeros(2, 64, 96), torch.ones(2, 64, 96, dtype=torch.bool), "k")),
    ("int blocks", TypeError, lambda: hk.compress_blocks(torch.zeros(2, 64, 64, dtype=torch.int32), GOOD_MASK, "k")),
    ("float64 blocks", TypeError, lambda: hk.element_mask(torch.zeros(2, 64, 64, dtype=torch.float64), "k")),
    ("mask keeps 3 of 4", ValueError, lambda: hk.compress_blocks(torch.zeros(2, 64, 64), torch.ones(2, 64, 64, dtype=torch.bool), "k")),
    ("float mask", TypeError, lambda: hk.compress_blocks(torch.zeros(2, 64, 64), GOOD_MASK.float(), "k")),
    ("mask shape", ValueError, lambda: hk.compress_blocks(torch.zeros(2, 64, 64), GOOD_MASK[:1], "k")),
    ("bad operand", ValueError, lambda: hk.compress_blocks(torch.zeros(2, 64, 64), GOOD_MASK, "q")),
    ("int32 meta", TypeError, lambda: hk.decompress_blocks(torch.zeros(2, 64, 32), torch.zeros(2, 64, 4, dtype=torch.int32), "k")),
    ("pool head_dim", ValueError, lambda: hk.BlockPool.allocate("k", 100, 1, 1)),
    ("pool dtype", TypeError, lambda: hk.BlockPool.allocate("k", 64, 1, 1, torch.int8)),
    ("pool sparse shapes of K given as V", ValueError, lambda: hk.BlockPool("v", *_k_pool_tensors(128))),
    ("store wrong dtype", TypeError, lambda: POOL_K.store_dense(torch.tensor([0]), torch.zeros(1, 64, 64, dtype=torch.float16))),
    ("store slot out of range", ValueError, lambda: POOL_K.store_dense(torch.tensor([9]), torch.zeros(1, 64, 64))),
    ("int64 index", TypeError, lambda: POOL_K.gather(torch.zeros(3, dtype=torch.int64))),
    ("decode q 2-D", ValueError, lambda: hk.decode_attention(Q[0], POOL_K, POOL_V, IDX, IDX, torch.tensor([10]))),
    ("decode gqa", ValueError, lambda: hk.decode_attention(torch.zeros(1, 3, 64), POOL_K, POOL_V, IDX, IDX, torch.tensor([10]))),
    ("decode int64 index", TypeError, lambda: hk.decode_attention(Q, POOL_K, POOL_V, IDX.long(), IDX, torch.tensor([10]))),
    ("decode seq_len too long", ValueError, lambda: hk.decode_attention(Q, POOL_K, POOL_V, IDX, IDX, torch.tensor([129]))),
    ("decode seq_lens shape", ValueError, lambda: hk.decode_attention(Q, POOL_K, POOL_V, IDX, IDX, torch.tensor([10, 10]))),
    ("decode pools swapped", ValueError, lambda: hk.decode_attention(Q, POOL_V, POOL_K, IDX, IDX, torch.tensor([10]))),
    ("decode head_dim", ValueError, lambda: hk.decode_attention(torch.zeros(1, 4, 128), POOL_K, POOL_V, IDX, IDX, torch.tensor([10]))),
    ("decode pages 1-D", ValueError, lambda: hk.decode_attention(Q, POOL_K, POOL_V, IDX[0], IDX[0], torch.tensor([10]), pages=torch.zeros(2, dtype=torch.int32))),
    ("decode float pages", ValueError, lambda: hk.decode_attention(Q, POOL_K, POOL_V, IDX[0], IDX[0], torch.tensor([10]), pages=torch.zeros(1, 2))),
    ("decode page past the maps", ValueError, lambda: hk.decode_attention(Q, POOL_K, POOL_V, IDX[0], IDX[0], torch.tensor([10]), pages=torch.tensor([[0, 2]]))),
    ("decode paged maps 3-D", ValueError, lambda: hk.decode_attention(Q, POOL_K, POOL_V, IDX, IDX, torch.tensor([10]), pages=torch.zeros(1, 2, dtype=torch.int32))),
    ("decode int q", TypeError, lambda: hk.decode_attention(Q.long(), POOL_K, POOL_V, IDX, IDX, torch.tensor([10]))),
    ("prefill k shape", ValueError, lambda: hk.prefill_attention(torch.zeros(5, 4, 64), torch.zeros(4, 2, 64), torch.zeros(5, 2, 64), POOL_K, POOL_V, IDX[0], IDX[0], 0)),
    ("prefill prefix too long", ValueError, lambda: hk.prefill_attention(torch.zeros(5, 4, 64), torch.zeros(5, 2, 64), torch.zeros(5, 2, 64), POOL_K, POOL_V, IDX[0], IDX[0], 200)),
    ("streaming float positions", TypeError, lambda: hk.streaming_attention(torch.zeros(1, 1, 4, 64), torch.zeros(1, 1), torch.zeros(1, 3, 2, 64), torch.zeros(1, 3, 2, 64), torch.zeros(1, 3, dtype=torch.long), 4, 8)),
    ("streaming v shape", ValueError, lambda: hk.streaming_attention(torch.zeros(1, 1, 4, 64), torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 3, 2, 64), torch.zeros(1, 2, 2, 64), torch.zeros(1, 3, dtype=torch.long), 4, 8)),
    ("select loss length", ValueError, lambda: hk.select_sparse_blocks(torch.zeros(2, 5), 640, 0.5)),
    ("select sparsity", ValueError, lambda: hk.select_sparse_blocks(torch.zeros(2, 10), 640, 1.5)),
    ("compress_sequence dtype mismatch", TypeError, lambda: hk.compress_sequence(torch.zeros(70, 1, 64), torch.zeros(70, 1, 64, dtype=torch.float16))),
    ("compress_sequence shape", ValueError, lambda: hk.compress_sequence(torch.zeros(70, 64), torch.zeros(70, 64))),
    ("merge shapes", ValueError, lambda: hk.merge_attention(torch.zeros(2, 4), torch.zeros(2), torch.zeros(3, 4), torch.zeros(3))),
    ("bad producer", ValueError, lambda: hk.element_mask(torch.zeros(2, 64, 64), "k", lambda x: torch.ones(3, dtype=torch.bool))),
]


@pytest.mark.parametrize("name, error, call", CASES, ids=[c[0] for c in CASES])
def test_rejected_with_one_line_message(name, error, call):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert message and "\n" not in message


def test_valid_calls_next_to_the_rejected_ones_pass():
    out, lse = hk.decode_attention(Q, POOL_K, POOL_V, IDX, IDX, torch.tensor([10]))
    assert out.shape == (1, 4, 64) and lse.shape == (1, 4)
    values, meta = hk.compress_blocks(torch.randn(2, 64, 64), GOOD_MASK, "k")
    assert values.shape == (2, 64, 32) and meta.shape == (2, 64, 4)


def test_cuda_decode_kernel_builds_for_hopper(tmp_path):
    """The CUDA decode source compiles for sm_90 with the machine's nvcc (no GPU needed), once: a second
    build finds the cached library."""
    from hs_kernels import cuda_decode, nvcc

    if nvcc.find() is None:
        pytest.skip("no nvcc on this machine")
    so = cuda_decode.build("sm_90", tmp_path)
    assert so.exists() and so.stat().st_size > 0 and list(tmp_path.iterdir()) == [so]
    assert cuda_decode.build("sm_90", tmp_path) == so


def test_decode_attention_rejects_an_unknown_kernel():
    from hs_kernels import gpu

    q = torch.zeros(1, 4, 64)
    with pytest.raises(ValueError, match="kernel"):
        gpu.decode_attention(q, None, None, torch.zeros(1, 1, 1, dtype=torch.int32), None, None, kernel="tilelang")


def test_cuda_decode_that_does_not_build_is_skipped_with_a_warning(monkeypatch):
    """kernel="auto" falls back to Triton when nvcc is there but the build fails; the failure is reported."""
    from hs_kernels import cuda_decode

    def failing_build():
        raise RuntimeError("nvcc failed building decode_sp.cu: unsupported gpu architecture")

    monkeypatch.setattr(cuda_decode, "available", lambda: True)
    monkeypatch.setattr(cuda_decode, "library", failing_build)
    cuda_decode.built.cache_clear()
    try:
        with pytest.warns(UserWarning, match="does not build here.*unsupported gpu architecture"):
            assert cuda_decode.built() is False
        monkeypatch.setattr(cuda_decode, "library", lambda: object())
        cuda_decode.built.cache_clear()
        assert cuda_decode.built() is True
    finally:
        cuda_decode.built.cache_clear()
