"""Decode CUDA-graph metadata on CPU: the real backend and pool, SGLang's ForwardMode.

What a captured decode graph reads must be what the eager path computes, in static buffers: the
same block pages and streaming keys for the real rows (pages padded to the fixed width), page 0
and no streaming keys for padding rows, and the same storage at every replay (a graph reads
addresses). Capture skips the step's bookkeeping; replay runs it, as eager decode does.
"""

from types import SimpleNamespace as NS

import pytest
import torch

pytest.importorskip("sglang")

from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

from sglang_hs.backend import HSAttnBackend  # noqa: E402
from hs_kernels import SparsityConfig  # noqa: E402
from sglang_hs.settings import HSSettings, LayerGroups  # noqa: E402
from sglang_hs.testing import small_pool  # noqa: E402

SINK, WINDOW, PAGES, WIDTH = 64, 128, 40, 1024  # WIDTH: req_to_token columns (the context length)


@pytest.fixture
def backend():
    pool = small_pool(LayerGroups((0,), (1,)), 1.0, 1.0, PAGES, sink=SINK, window=WINDOW)
    req_to_token = torch.zeros(4, WIDTH, dtype=torch.int32)
    runner = NS(device="cpu", req_to_token_pool=NS(req_to_token=req_to_token), token_to_kv_pool=pool)
    b = HSAttnBackend(runner)
    # two sequences: row 1 with 700 tokens on pages 1..11, row 2 with 300 tokens on pages 20..24
    for row, n, first_page in ((1, 700, 1), (2, 300, 20)):
        pages = torch.arange(first_page, first_page + -(-n // 64))
        pool.on_alloc_pages(pages)
        req_to_token[row, :n] = (pages[:, None] * 64 + torch.arange(64)).flatten()[:n].int()
    return b


def decode_batch(rows, lens, padding=0):
    rows, lens = rows + [0] * padding, lens + [1] * padding  # padding rows: SGLang's fill values
    return NS(forward_mode=ForwardMode.DECODE, batch_size=len(rows), num_padding=padding,
              req_pool_indices=torch.tensor(rows), seq_lens=torch.tensor(lens), seq_lens_cpu=torch.tensor(lens))


def metadata(backend, batch, width=None):
    """The step's metadata as ``forward_decode`` computes it: eager, as wide as the longest row."""
    width = width or -(-int(batch.seq_lens_cpu.max()) // 64)
    return backend.step_metadata(batch.req_pool_indices, batch.seq_lens, width)


def test_graph_metadata_equals_eager_for_real_rows(backend):
    """What a captured graph computes (fixed width, padded batch) is the eager metadata for the real rows."""
    backend.init_cuda_graph_state(max_bs=8, max_num_tokens=8)
    e = metadata(backend, decode_batch([1, 2], [700, 300]))

    padded = decode_batch([1, 2], [700, 300], padding=2)
    backend.init_forward_metadata_out_graph(padded)
    g = metadata(backend, padded, backend._width)
    assert g.pages.shape == (4, WIDTH // 64) and e.pages.shape == (2, 11)
    assert torch.equal(g.pages[:2, :e.pages.shape[1]], e.pages)
    for name in ("seq_lens", "stream_rows", "kpos", "block_lo", "block_hi", "qpos"):
        assert torch.equal(getattr(g, name)[:2], getattr(e, name)), name
    assert e.seq_lens.tolist() == [700, 300] and e.qpos.flatten().tolist() == [699, 299]
    assert (g.pages[2:] == 0).all() and (g.kpos[2:] == -1).all()
    assert (g.block_hi[2:] == -1).all() and (g.block_lo[2:] == torch.iinfo(torch.int32).max).all()  # nothing to read
    assert torch.equal(g.stream_rows[2:], backend.pool.stream_rows(torch.zeros_like(g.stream_rows[2:])))  # page 0's slot


def test_padding_rows_read_nothing_whatever_their_stale_row(backend):
    """A graph's padding rows may carry a stale request row from an earlier replay: seq_len 1 still reads page 0."""
    backend.init_cuda_graph_state(max_bs=4, max_num_tokens=4)
    batch = decode_batch([2], [300], padding=2)
    batch.req_pool_indices[1:] = 1  # row 1 holds a live 700-token sequence
    backend.init_forward_metadata_out_graph(batch)
    g = metadata(backend, batch, backend._width)
    assert (g.pages[1:] == 0).all() and (g.kpos[1:] == -1).all() and (g.block_hi[1:] == -1).all()
    assert torch.equal(g.kpos[0], metadata(backend, decode_batch([2], [300])).kpos[0])


def test_capture_skips_bookkeeping_replay_runs_it(backend):
    backend.init_cuda_graph_state(max_bs=4, max_num_tokens=4)
    step = decode_batch([1], [641])  # 640 tokens stored: a page just filled, blocks left the window
    backend.init_forward_metadata_out_graph(step, in_capture=True)
    assert backend.pool.block_counts()["sparse_blocks"] == 0
    backend.init_forward_metadata_out_graph(step)
    # compressed before the replay: blocks 1..7 of K and V (block 0 is the sink, 8..9 the window)
    assert backend.pool.block_counts()["sparse_blocks"] == 2 * 7


def test_prefix_maps_are_each_layers_index_maps_at_the_pages():
    """An extend's prefix maps for all layers at once (layers of 2, 1 and no retrieval groups): each retrieval layer's
    ``index[pages]`` transposed to ``[groups, blocks]``, contiguous, as the prefill kernels take them."""
    from sglang_hs.kv_pool import HSKVPool

    groups = [LayerGroups((0, 1), (2,)), LayerGroups((1,), (0, 2)), LayerGroups((), (0, 1, 2)), LayerGroups((0, 2), (1,))]
    cfg = SparsityConfig(1.0, 1.0, 64, 128)
    settings = HSSettings(prefill=cfg, decode=cfg, sink_tokens=64, window_tokens=128, dense_reserve=1.0, recipe="test",
                          stream_checkpoint=256, layers=groups, num_kv_heads=3, auto_reserve_pages=0)
    pool = HSKVPool(40 * 64, 64, torch.float32, 3, 64, len(groups), "cpu", settings)
    gen = torch.Generator().manual_seed(3)
    for layer in pool.layers:
        for op in ("k", "v"):
            layer.index[op].copy_(torch.randint(-2 ** 31, 2 ** 31 - 1, layer.index[op].shape, generator=gen))
    pages = torch.randint(0, 40, (11,), generator=gen)
    maps = pool.prefix_maps(pages)
    assert sorted(maps) == [0, 1, 3]
    for i, (k_map, v_map) in maps.items():
        for op, got in (("k", k_map), ("v", v_map)):
            assert got.is_contiguous() and torch.equal(got, pool.layers[i].index[op][pages].t())


def extend_batch(rows, prefixes, lens):
    return NS(forward_mode=ForwardMode.EXTEND, req_pool_indices=torch.tensor(rows), extend_prefix_lens_cpu=prefixes,
              extend_seq_lens_cpu=lens)


def test_prefill_graph_capture_leaves_the_pool_alone(backend):
    """SGLang's breakable prefill graphs run the attention of dummy requests at capture (rows from 0, SGLang's
    padding page): they get their reads but register no window and leave no prompt to compress; real extends do."""
    from sglang_hs import plugin

    pool = backend.pool
    live = pool.live.clone()
    seen = []

    def capture(runner):
        assert backend.capturing_prefill
        backend.init_forward_metadata(extend_batch([0, 3], [0, 0], [128, 64]))
        seen.append([(s.prefix, s.length) for s in backend._extend])
        raise RuntimeError("capture failed")

    with pytest.raises(RuntimeError, match="capture failed"):
        plugin._prefill_graph_capture(capture, NS(model_runner=NS(attn_backend=backend)))
    assert not backend.capturing_prefill  # reset however the capture ends
    assert seen == [[(0, 128), (0, 64)]] and torch.equal(pool.live, live) and backend._prefilled == {}

    backend.init_forward_metadata(extend_batch([1], [640], [60]))
    assert backend._prefilled == {1: 700} and not torch.equal(pool.live, live)


def test_prefill_graph_capture_hook_passes_other_backends_through():
    from sglang_hs import plugin

    runner = NS(model_runner=NS(attn_backend=object()))
    assert plugin._prefill_graph_capture(lambda r, *a: (r, a), runner, 1) == (runner, (1,))
