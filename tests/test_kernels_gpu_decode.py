"""GPU: the Triton decode kernel and the CUDA one on the sparse tensor cores (cuda/decode_sp.cu: d 64 / 128,
G <= 8) vs the PyTorch reference (mixed dense/sparse blocks via the index map).

Fresh random inputs every run, the maps per sequence or a pool's read through pages; the per-split
outputs are poisoned with NaN before each launch and checked fully written; every compiled variant is
covered: query tiles 16 / 32 / 64 rows, d 64 / 128 / 256, dense-only / sparse-only / mixed pools for K
and V, bf16 and fp16, the launch options the benchmark uses.
"""

import gc
import math
import weakref

import pytest
import torch
from kv_cases import extend_rows, make_case, paged, rel_err

from hs_kernels import attention as ref
from hs_kernels import cuda_decode, gpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.triton_available(), reason="needs CUDA and triton"),
]

CASES = [
    # (batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v)          tile rows, pool kinds
    (3, 32, 8, 128, torch.bfloat16, [1, 700, 2049], 0.5, 0.5),   # 16 (G 4), mixed
    (2, 32, 8, 128, torch.float16, [4096, 130], 1.0, 0.0),       # 16, K sparse only, V dense only
    (2, 32, 8, 128, torch.bfloat16, [333, 1024], 0.0, 1.0),      # 16, K dense only, V sparse only
    (2, 32, 8, 128, torch.bfloat16, [5000, 64], 0.0, 0.0),       # 16, all dense
    (2, 16, 2, 64, torch.bfloat16, [64, 1500], 1.0, 1.0),        # 16 (G 8), all sparse
    (2, 6, 6, 64, torch.float16, [65, 900], 0.3, 0.7),           # 16 (G 1, MHA)
    (2, 40, 2, 128, torch.bfloat16, [257, 3000], 0.5, 0.5),      # 32 (G 20)
    (1, 64, 1, 64, torch.float16, [1234], 0.5, 0.5),             # 64 (G 64)
    (2, 8, 2, 256, torch.bfloat16, [100, 777], 0.5, 0.5),        # 16 (d 256)
]


needs_cuda_kernel = pytest.mark.skipif(not cuda_decode.available(), reason="needs nvcc and sm_80+")


def cuda_case(case):
    return case[3] in (64, 128) and case[1] // case[2] <= 8


def check(case, splits, scale, kernel="triton", paged_maps=False, **launch):
    batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v = case
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index, sl = make_case(batch, h_kv, d, seq_lens, p_k, p_v, dtype, gen, "cuda")
    q = torch.randn(batch, h_q, d, generator=gen, device="cuda").to(dtype)
    parts = (torch.full((batch, h_q, splits, d), float("nan"), device="cuda"),
             torch.full((batch, h_q, splits), float("nan"), device="cuda"))
    maps = paged(k_index, v_index, gen) if paged_maps else (k_index, v_index, None)
    if kernel == "cuda":
        out, lse = gpu.cuda_decode(q, k_pool, v_pool, *maps[:2], sl, scale, splits, parts=parts, pages=maps[2], **launch)
    else:
        out, lse = gpu.triton_decode(q, k_pool, v_pool, *maps[:2], sl, scale, splits, parts=parts, pages=maps[2], **launch)
    torch.cuda.synchronize()
    assert not parts[0].isnan().any() and not parts[1].isnan().any()  # every split wrote its rows
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, scale)
    assert out.dtype == dtype and out.shape == (batch, h_q, d) and lse.shape == (batch, h_q)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert rel_err(out, r_out) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-2


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-hq{c[1]}-hkv{c[2]}-d{c[3]}-{str(c[4])[6:]}-k{c[6]}-v{c[7]}")
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_decode_matches_reference(case, splits):
    check(case, splits, 1.0 / math.sqrt(case[3]) if splits != 3 else 0.07)


@needs_cuda_kernel
@pytest.mark.parametrize("case", [c for c in CASES if cuda_case(c)] + [
    (2, 12, 4, 64, torch.bfloat16, [3000, 190], 1.0, 1.0),   # G 3 (SmolLM2's ratio): padded columns
    (1, 16, 2, 128, torch.float16, [9000], 0.9, 0.8)],
    ids=lambda c: f"b{c[0]}-hq{c[1]}-hkv{c[2]}-d{c[3]}-{str(c[4])[6:]}-k{c[6]}-v{c[7]}")
@pytest.mark.parametrize("splits", [1, 3, 16])
@pytest.mark.parametrize("slots", cuda_decode.SLOTS)
def test_cuda_decode_matches_reference(case, splits, slots):
    check(case, splits, 1.0 / math.sqrt(case[3]) if splits != 3 else 0.07, kernel="cuda", slots=slots)


@needs_cuda_kernel
@pytest.mark.parametrize("case", [
    (3, 32, 8, 128, torch.bfloat16, [1, 700, 2049], 0.5, 0.5),
    (4, 12, 4, 64, torch.float16, [64, 9000, 130, 4097], 1.0, 1.0),
    (2, 32, 8, 128, torch.bfloat16, [20000, 333], 0.0, 1.0)],
    ids=lambda c: f"b{c[0]}-hq{c[1]}-hkv{c[2]}-d{c[3]}-{str(c[4])[6:]}-k{c[6]}-v{c[7]}")
@pytest.mark.parametrize("splits", [2, 8, 33])
def test_cuda_decode_balanced_splits_leave_their_counters_at_zero(case, splits):
    """Balanced splits (the default: half of a row's blocks taken by whichever split is ready) match the reference
    call after call, since each call puts its counters back to zero (checked after each of five); fixed ranges
    (``balance=False``) give bitwise the same result twice."""
    for _ in range(5):
        check(case, splits, 0.07, kernel="cuda")
        counters = cuda_decode.balance_counters(torch.cuda.current_stream(), case[0] * case[2])
        assert counters.any().item() is False
    gen = torch.Generator(device="cuda")
    gen.seed()
    batch, h_q, h_kv, d, dtype, seq_lens, p_k, p_v = case
    k_pool, v_pool, k_index, v_index, sl = make_case(batch, h_kv, d, seq_lens, p_k, p_v, dtype, gen, "cuda")
    q = torch.randn(batch, h_q, d, generator=gen, device="cuda").to(dtype)
    fixed = [gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, 0.07, splits, balance=False) for _ in range(2)]
    assert torch.equal(fixed[0][0], fixed[1][0]) and torch.equal(fixed[0][1], fixed[1][1])
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, 0.07)
    assert rel_err(fixed[0][0], r_out) < 1e-2 and (fixed[0][1] - r_lse).abs().max().item() < 1e-2


@needs_cuda_kernel
def test_a_graph_keeps_its_counters_when_more_rows_outgrow_them():
    """A CUDA graph captured with the stream's counters replays correctly after an eager call with more rows than they
    hold replaced them: the outgrown buffer stays allocated (were it freed, its memory could be reused while the
    graph's programs still count in it)."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    small = make_case(2, 8, 128, [20000, 9000], 1.0, 1.0, torch.bfloat16, gen, "cuda")
    q = torch.randn(2, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run = lambda: gpu.cuda_decode(q, *small[:4], small[4], 0.09, 16)  # noqa: E731
        run()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out, lse = run()
        captured = weakref.ref(cuda_decode.balance_counters(stream, 16))
        many = 4097 // 8 + 1  # sequences: more (sequence, KV head) rows than the first buffer holds
        big = make_case(many, 8, 128, [64] * many, 1.0, 1.0, torch.bfloat16, gen, "cuda")
        gpu.cuda_decode(torch.randn(many, 32, 128, device="cuda").to(torch.bfloat16), *big[:4], big[4], 0.09, 2)
        assert cuda_decode.balance_counters(stream, 16) is not captured()
        del big
        gc.collect()
        assert captured() is not None
        q.copy_(torch.randn(2, 32, 128, generator=gen, device="cuda"))
        graph.replay()
    torch.cuda.synchronize()
    r_out, r_lse = ref.decode_attention(q, *small[:4], small[4], 0.09)
    assert rel_err(out, r_out) < 1e-2 and (lse - r_lse).abs().max().item() < 1e-2
    assert captured().any().item() is False


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-hq{c[1]}-hkv{c[2]}-d{c[3]}-{str(c[4])[6:]}-k{c[6]}-v{c[7]}")
@pytest.mark.parametrize("kernel", ["triton", "cuda 3", "cuda 4"])
@pytest.mark.parametrize("splits", [1, 3])
def test_decode_through_pages_matches_reference(case, kernel, splits):
    """A serving pool's maps [num_pages, H_kv] read in place through each sequence's pages (shuffled; the spare
    pages hold wrong but real slots). One split walks up to 79 blocks: the CUDA kernel's pages, read 32 blocks at
    a time, cross two chunks; "cuda N": N operand slots."""
    if kernel != "triton" and not (cuda_decode.available() and cuda_case(case)):
        pytest.skip("the CUDA kernel: nvcc, sm_80+, d 64 / 128, G <= 8")
    launch = {"kernel": "cuda", "slots": int(kernel[-1])} if kernel != "triton" else {}
    check(case, splits, 0.07, paged_maps=True, **launch)


@pytest.mark.parametrize("seqs, padding, h_q, h_kv, d, dtype, p_k, p_v", [
    ([(4096, 64)], 0, 32, 8, 128, torch.bfloat16, 1.0, 1.0),                   # Llama-3.1-8B: 4 tiles of 16 rows
    ([(700, 1), (1040, 33), (90, 20)], 10, 32, 8, 128, torch.float16, 0.5, 0.5),  # tiles straddling requests
    ([(2000, 40)], 8, 9, 3, 64, torch.bfloat16, 0.0, 1.0),                    # SmolLM2: 16 rows of 3 heads
    ([(1500, 24)], 0, 8, 2, 256, torch.bfloat16, 0.5, 0.5),                   # d 256: 8 rows
    ([(3000, 16)], 0, 64, 1, 64, torch.bfloat16, 0.5, 0.5),                   # G 64: a row a program
])
@pytest.mark.parametrize("kernel", ["auto", "cuda"])
def test_grouped_rows_match_reference(seqs, padding, h_q, h_kv, d, dtype, p_k, p_v, kernel):
    """An extend's rows (``groups``): under "auto" the Triton decode reads a request's blocks once a tile of rows;
    "cuda" reads each row's (the hint changes no result). Three draws of pools, pages and queries: one draw of a
    shuffled pool once hid a fixture whose padding rows read NO_BLOCK in 2 runs of 5."""
    if kernel == "cuda" and not (cuda_decode.available() and cuda_case((1, h_q, h_kv, d))):
        pytest.skip("the CUDA kernel: nvcc, sm_80+, d 64 / 128, G <= 8")
    gen = torch.Generator(device="cuda")
    gen.seed()
    for _ in range(3):
        k_pool, v_pool, k_index, v_index, _ = make_case(len(seqs), h_kv, d, [p + t for p, t in seqs], p_k, p_v,
                                                        dtype, gen, "cuda")
        k_map, v_map, seq_pages = paged(k_index, v_index, gen)
        pages, groups, sl = extend_rows(seqs, padding, seq_pages)
        q = torch.randn(len(sl), h_q, d, generator=gen, device="cuda").to(dtype)
        out, lse = gpu.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, 0.09, kernel=kernel, pages=pages,
                                        groups=groups)
        r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, 0.09, pages=pages)
        assert out.dtype == dtype and torch.isfinite(out).all() and torch.isfinite(lse).all()
        assert rel_err(out, r_out) < 1e-2
        assert (lse - r_lse).abs().max().item() < 1e-2


@needs_cuda_kernel
def test_cuda_decode_through_the_entry_point():
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index, sl = make_case(2, 8, 128, [32768, 20000], 0.9, 0.9, torch.bfloat16, gen, "cuda")
    q = torch.randn(2, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    assert gpu.cuda_decode_supported(q, k_index)
    out, lse = gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, kernel="cuda")
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl)
    assert rel_err(out, r_out) < 1e-2 and (lse - r_lse).abs().max().item() < 1e-2
    k_map, v_map, pages = paged(k_index, v_index, gen)
    assert gpu.decode_supported(q, k_pool, v_pool, k_map, pages) and gpu.cuda_decode_supported(q, k_map)
    out, lse = gpu.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, kernel="cuda", pages=pages)
    assert rel_err(out, r_out) < 1e-2 and (lse - r_lse).abs().max().item() < 1e-2


@needs_cuda_kernel
@pytest.mark.parametrize("dependent", [False, True])
def test_cuda_decode_combine_launch(dependent):
    """The combine launched plainly or as a programmatic dependent of the decode (sm_90), eagerly and replayed
    from a CUDA graph with new queries."""
    if dependent and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90")
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index, sl = make_case(4, 8, 128, [9000, 64, 3000, 20000], 0.5, 0.8, torch.bfloat16,
                                                     gen, "cuda")
    q = torch.randn(4, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    run = lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, 0.09, 16, dependent=dependent)  # noqa: E731
    out, lse = run()
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, 0.09)
    assert rel_err(out, r_out) < 1e-2 and (lse - r_lse).abs().max().item() < 1e-2
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = run()
    q.copy_(torch.randn(4, 32, 128, generator=gen, device="cuda").to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, 0.09)
    assert rel_err(out, r_out) < 1e-2 and (lse - r_lse).abs().max().item() < 1e-2


@pytest.mark.parametrize("num_warps,num_stages", [(4, 2), (2, 3), (8, 2), (2, 1)])
def test_decode_launch_options(num_warps, num_stages):
    check(CASES[0], 5, 0.09, num_warps=num_warps, num_stages=num_stages)


@needs_cuda_kernel
def test_cuda_decode_split_choice():
    """The occupancy query behind the CUDA decode's default splits answers for every instantiation."""
    for d in cuda_decode.HEAD_DIMS:
        for dtype in (torch.bfloat16, torch.float16):
            for slots in cuda_decode.SLOTS:
                assert 1 <= cuda_decode.resident_per_sm(d, dtype, slots) <= 32
    q = torch.zeros(8, 32, 128, dtype=torch.bfloat16, device="cuda")
    assert 1 <= gpu.cuda_decode_splits(8, 8, 512, q) <= 512


@pytest.mark.parametrize("h_q, d, kernel, launched", [
    (32, 128, "auto", "cuda"), (32, 128, "triton", "triton"), (32, 128, "cuda", "cuda"),
    (128, 128, "auto", "triton"), (16, 256, "auto", "triton")])
def test_decode_default_splits_and_dispatch(monkeypatch, h_q, d, kernel, launched):
    """The entry point's kernel choice (``auto``: CUDA where it applies, else Triton) and default split count,
    combine kernel included, on 32K-context batches."""
    if launched == "cuda" and not cuda_decode.available():
        pytest.skip("needs nvcc and sm_80+")
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index, sl = make_case(2, 8, d, [32768, 20000], 0.9, 0.9, torch.bfloat16, gen, "cuda")
    q = torch.randn(2, h_q, d, generator=gen, device="cuda").to(torch.bfloat16)
    assert gpu.decode_supported(q, k_pool, v_pool, k_index)
    calls = []
    for name in ("cuda_decode", "triton_decode"):
        real = getattr(gpu, name)
        monkeypatch.setattr(gpu, name, lambda *a, _real=real, _name=name, **kw: calls.append(_name) or _real(*a, **kw))
    out, lse = gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, kernel=kernel)
    assert calls == [f"{launched}_decode"]
    r_out, r_lse = ref.decode_attention(q, k_pool, v_pool, k_index, v_index, sl)
    assert torch.isfinite(out).all()
    assert rel_err(out, r_out) < 1e-2
    assert (lse - r_lse).abs().max().item() < 1e-2


def test_cuda_decode_refuses_what_it_cannot_run():
    gen = torch.Generator(device="cuda")
    gen.seed()
    k_pool, v_pool, k_index, v_index, sl = make_case(1, 2, 128, [640], 0.5, 0.5, torch.bfloat16, gen, "cuda")
    q = torch.randn(1, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)  # 16 query heads per KV head
    with pytest.raises(ValueError, match="kernel='cuda' needs"):
        gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, kernel="cuda")
