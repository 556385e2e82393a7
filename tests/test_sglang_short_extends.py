"""Short extends as decode rows (``sglang_hs.short_extends``), on CPU: the real backend and pool, the reference
kernels, graphs stood in by ``EagerGraphs`` (CUDA graphs themselves: tests/test_sglang_gpu_short_extends.py).

A question on a cached prefix computes, layer by layer, what the eager extend computes, and leaves the pool as it
does; the graphs of a bucket are captured once and replayed by later extends of other lengths, sequences and
prefixes, and by short new prompts (static inputs refreshed, padding rows reading and writing nothing of theirs);
extends that the rows would read too much for, or whose chunk is pruned in flight, stay eager."""

import pytest
import torch

pytest.importorskip("sglang")

from short_extend_cases import EagerGraphs, cache_prefix, make_backend, open_row, run_extend  # noqa: E402

from sglang_hs.short_extends import MAX_ROW_BLOCKS, MAX_TILE_BLOCKS, ShortExtends, bucket_sizes  # noqa: E402


@pytest.fixture
def backend():
    """Request rows 1 and 2 with cached prefixes of 1000 and 700 tokens (room for 200 more each); row 3 new, with room
    for 100 tokens."""
    b = make_backend()
    gen = torch.Generator().manual_seed(0)
    cache_prefix(b, 1, 1, 1000, 200, gen)
    cache_prefix(b, 2, 40, 700, 200, gen)
    open_row(b, 3, 60, 100)
    assert b.pool.block_counts()["sparse_blocks"] > 0  # the prefixes are read through 2:4 blocks too
    return b


def pool_state(backend) -> list:
    return [x.clone() for s in backend.pool.layers
            for x in (*(getattr(p, a) for p in s.pools.values() for a in ("dense", "values", "meta")), s.stream_k, s.stream_v)]


def both_ways_unchecked(backend, seqs, seed):
    """The extend's layer outputs eagerly, then with the backend's short extends."""
    short, backend.short_extends = backend.short_extends, None
    eager = run_extend(backend, seqs, torch.Generator().manual_seed(seed))
    backend.short_extends = short
    return eager, run_extend(backend, seqs, torch.Generator().manual_seed(seed))


def both_ways(backend, seqs, seed):
    """The extend's layer outputs, eager and as decode rows; the pool the same after either."""
    short, backend.short_extends = backend.short_extends, None
    run_extend(backend, seqs, torch.Generator().manual_seed(seed))
    eager_pool = pool_state(backend)
    backend.short_extends = short
    eager, graphed = both_ways_unchecked(backend, seqs, seed)
    rows = backend._rows
    assert rows is not None and rows.tokens == sum(t for _, _, t in seqs)
    step = rows.step[1]  # padding rows read nothing (no work a graph replays for nothing)
    assert (step.pages[rows.tokens:] == 0).all() and (step.kpos[rows.tokens:] == -1).all()
    if backend.short_extends.tile_rows > 1:  # a request's rows share their reads; padding rows are a group apart
        requests = [row for row, _, t in seqs for _ in range(t)] + [-1] * (rows.size - rows.tokens)
        assert step.groups.tolist() == requests
    else:
        assert step.groups is None
    for a, b in zip(eager_pool, pool_state(backend)):
        assert torch.equal(a, b)
    return eager, graphed


@pytest.mark.parametrize("tile_rows", [1, 4])
def test_questions_compute_what_the_eager_extend_does_and_replay_their_bucket(backend, tile_rows):
    graphs = EagerGraphs()
    backend.short_extends = ShortExtends(backend, 64, capture=graphs, tile_rows=tile_rows)
    cases = [
        [(1, 1000, 40)],                     # a question on a prefix ending inside a block: bucket 64
        [(2, 700, 1), (1, 1040, 33)],        # two sequences, one token and 33 after the first question: 64 again
        [(2, 701, 9)],                       # bucket 16
        [(1, 1073, 3)],                      # bucket 8
        [(2, 710, 12)],                      # bucket 16 again, a shorter question: padding rows
        [(3, 0, 5), (1, 1073, 3)],           # a new prompt (its first row is 1 token long) beside a question
        [(3, 0, 40)],                        # a new prompt alone, bucket 64 again
    ]
    for seed, seqs in enumerate(cases):
        eager, graphed = both_ways(backend, seqs, seed)
        for a, b in zip(eager, graphed):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    layers = len(backend.pool.layers)
    assert graphs.captured == [64] * (1 + layers) + [16] * (1 + layers) + [8] * (1 + layers)


def test_which_extends_run_as_rows(backend):
    short = ShortExtends(backend, 512)
    assert bucket_sizes(512) == [8, 16, 32, 64, 128, 256, 512] and bucket_sizes(100) == [8, 16, 32, 64, 100]
    assert bucket_sizes(8) == [8] and bucket_sizes(3) == [3]
    assert short.fits([1000], [64]) and short.fits([700, 1000], [1, 63])
    assert short.fits([0], [64]) and short.fits([1000, 0], [32, 32])  # new prompts too
    assert not short.fits([1000], [513])                # more tokens than graphs are captured for
    assert short.fits([1000], [128])                    # within the window: nothing of the chunk is pruned
    assert not short.fits([1000], [500])                # 2:4 prefill on the chunk's older blocks
    blocks = MAX_ROW_BLOCKS // 64
    assert short.fits([blocks * 64 - 64], [64]) and not short.fits([blocks * 64], [64])  # the rows' reads


def test_rows_of_a_request_share_their_reads_per_tile(backend):
    short = ShortExtends(backend, 512, tile_rows=16)
    assert short.block_reads([1000], [64]) == 4 * 17                # four tiles of one request
    assert short.block_reads([700, 1000], [1, 63]) == 11 + 4 * 17   # the first tile holds rows of both
    assert short.block_reads([700, 1000], [20, 20]) == 2 * 11 + 2 * 17
    blocks = MAX_TILE_BLOCKS // 4  # the tiles' own bound
    assert short.fits([blocks * 64 - 64], [64]) and not short.fits([blocks * 64], [64])


def test_an_extend_that_does_not_fit_stays_eager(backend):
    graphs = EagerGraphs()
    backend.short_extends = ShortExtends(backend, 16, capture=graphs)
    run_extend(backend, [(1, 1000, 40)], torch.Generator().manual_seed(0))
    assert backend._rows is None and graphs.captured == []


def test_a_padded_extend_stays_eager(backend):
    """q, k, v with more rows than the extend's tokens (SGLang's padding): the eager path, which keeps their rows."""
    from short_extend_cases import extend_batch, layer

    graphs = EagerGraphs()
    backend.short_extends = ShortExtends(backend, 64, capture=graphs)
    batch = extend_batch(backend, [(1, 1000, 40)])
    backend.init_forward_metadata(batch)
    assert backend._rows is not None
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(48, h * 64, generator=gen) for h in (8, 4, 4))
    locs = batch.out_cache_loc
    batch.out_cache_loc = torch.cat([locs, torch.zeros(8, dtype=locs.dtype)])  # padding writes to page 0
    out = backend.forward_extend(q, k, v, layer(0), batch)
    assert out.shape == (48, 8 * 64) and graphs.captured == [64]  # the metadata's graph only
    batch.out_cache_loc = locs
    want = backend.forward_extend(q[:40], k[:40], v[:40], layer(0), batch)
    assert graphs.captured == [64, 64]  # the unpadded call: the layer's graph
    assert torch.allclose(out[:40], want, atol=1e-5, rtol=1e-4)


def test_short_extends_are_off_on_the_cpu_without_a_word(caplog):
    """The flag's default (64) on a CPU server: no CUDA graphs there, and nothing to tell the user."""
    with caplog.at_level("INFO", logger="sglang_hs"):
        backend = make_backend(extend_graph_tokens=64)
    assert backend.short_extends is None and "short extends" not in caplog.text


class FailingGraphs(EagerGraphs):
    """``EagerGraphs`` whose capture number ``fail_at`` (from 0) raises, as a capture the CUDA driver refuses."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.fail_at, self.calls = fail_at, 0

    def __call__(self, fn, bucket: int):
        self.calls += 1
        if self.calls - 1 == self.fail_at:
            raise RuntimeError("operation not permitted when stream is capturing")
        return super().__call__(fn, bucket)


@pytest.mark.parametrize("fail_at", [0, 2])  # the metadata's capture; a layer's, mid-forward
def test_a_failed_capture_leaves_the_bucket_eager(backend, caplog, fail_at):
    graphs = FailingGraphs(fail_at)
    backend.short_extends = ShortExtends(backend, 64, capture=graphs)
    with caplog.at_level("WARNING", logger="sglang_hs"):
        eager, graphed = both_ways_unchecked(backend, [(1, 1000, 40)], 0)
    for a, b in zip(eager, graphed):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    assert "capturing their CUDA graph failed (RuntimeError" in caplog.text
    calls = graphs.calls
    run_extend(backend, [(1, 1040, 33)], torch.Generator().manual_seed(1))  # the same bucket: not tried again
    assert backend._rows is None and graphs.calls == calls == fail_at + 1
    run_extend(backend, [(1, 1073, 9)], torch.Generator().manual_seed(2))  # another bucket still captures
    assert backend._rows is not None and graphs.captured[-1] == 16
