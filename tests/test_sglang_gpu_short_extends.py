"""GPU: short extends replayed from real CUDA graphs (``short_extends.CudaGraphs``) compute what the eager extend
computes (the prefill kernels), layer by layer, in bfloat16 at head_dim 64 and 128, each row reading its blocks or
a request's rows sharing them (the Triton decode's tiles); a bucket's graphs are captured
once and replayed by later questions of other lengths, sequences and prefixes, and by new prompts; the pool holds
what the eager extend leaves."""

import pytest
import torch

pytest.importorskip("sglang")

from hs_kernels import gpu  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu.triton_available(), reason="needs CUDA and triton")]


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("tile_rows", [1, 4, None])  # each row alone; tiles straddling requests; the default's
def test_questions_replayed_from_graphs_match_the_eager_extend(head_dim, tile_rows):
    from kv_cases import rel_err
    from short_extend_cases import GROUP, cache_prefix, make_backend, open_row, run_extend

    from sglang_hs.short_extends import CudaGraphs, ShortExtends

    backend = make_backend("cuda", torch.bfloat16, head_dim)
    gen = torch.Generator().manual_seed(0)
    cache_prefix(backend, 1, 1, 1000, 200, gen)
    cache_prefix(backend, 2, 40, 700, 200, gen)
    open_row(backend, 3, 60, 100)
    graphs = CudaGraphs()
    short = ShortExtends(backend, 64, capture=graphs, tile_rows=tile_rows or gpu.decode_tile_rows(GROUP, head_dim))
    cases = [[(1, 1000, 40)], [(2, 700, 1), (1, 1040, 33)], [(2, 701, 9)], [(2, 710, 12)], [(1, 1073, 64)],
             [(3, 0, 5), (1, 1137, 3)], [(3, 0, 40)]]  # the last two: a new prompt, beside a question and alone
    for seed, seqs in enumerate(cases):
        backend.short_extends = None
        eager = run_extend(backend, seqs, torch.Generator().manual_seed(seed))
        backend.short_extends = short
        graphed = run_extend(backend, seqs, torch.Generator().manual_seed(seed))
        assert backend._rows is not None
        for a, b in zip(graphed, eager):
            assert a.shape == b.shape and torch.isfinite(a).all()
            assert rel_err(a, b) < 1e-2, (seqs, rel_err(a, b))
    torch.cuda.synchronize()
    assert sorted(graphs.pools) == [8, 16, 64]
    assert sorted(size for size, bucket in short.buckets.items() if bucket) == [8, 16, 64]
    assert all(len(bucket.layers) == len(backend.pool.layers) for bucket in short.buckets.values() if bucket)
