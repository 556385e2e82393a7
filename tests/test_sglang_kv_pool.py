"""HSKVPool compression: only dense blocks are read, the result is the pruner's.

A sequence compressed as it grows (once per cached chunk, as the radix cache does) ends as one
compression of the whole sequence would leave it: at S = 1 the same sparse blocks holding the same
2:4 data; at S < 1 every KV group has the pruner's count of sparse blocks, blocks once sparse
stay sparse, and the rest of the data is untouched. A short sparse pool keeps the rest dense.
"""

import pytest
import torch

pytest.importorskip("sglang")

import hs_kernels as hk  # noqa: E402
from sglang_hs.kv_pool import head_index  # noqa: E402
from sglang_hs.settings import LayerGroups  # noqa: E402
from sglang_hs.testing import small_pool  # noqa: E402

H_KV, D, SINK, WINDOW = 4, 64, 64, 128


def make_pool(s_k, s_v, pages=64, dense_reserve=0.5, layers=2):
    return small_pool(LayerGroups(retrieval=(0, 1, 2), streaming=(3,)), s_k, s_v, pages, dense_reserve, layers, D, SINK, WINDOW)


def fill(pool, n_tokens, gen):
    """Pages 1.. for one sequence, its K/V written; returns (token locs, K, V per layer)."""
    pages = torch.arange(1, -(-n_tokens // 64) + 1)
    pool.on_alloc_pages(pages)
    locs = (pages[:, None] * 64 + torch.arange(64)).flatten()[:n_tokens]
    kv = []
    for layer in range(len(pool.layers)):
        k, v = (torch.randn(n_tokens, H_KV, D, generator=gen) for _ in range(2))
        pool.write(layer, locs, k, v)
        kv.append((k, v))
    return locs, kv


def stored_blocks(pool, layer, op, locs, n_tokens):
    store = pool.layers[layer]
    index = store.index[op][locs[:n_tokens:64] // 64].t().contiguous()
    return index, store.pools[op].gather(index)


@pytest.mark.parametrize("chunks", [[1000], [300, 400, 300], [64, 64, 512, 360]])
def test_growing_sequence_at_s1_equals_one_compression(chunks):
    gen = torch.Generator().manual_seed(len(chunks))
    n = sum(chunks)
    pool = make_pool(1.0, 1.0)
    locs, kv = fill(pool, n, gen)
    done = 0
    for c in chunks:
        done += c
        pool.compress_sequence(locs, done)
    for layer, (k, v) in enumerate(kv):
        for op, x in (("k", k), ("v", v)):
            index, got = stored_blocks(pool, layer, op, locs, n)
            blocks = hk.to_blocks(x[:, :3])  # retrieval groups
            sparse, mask = hk.prune_blocks(blocks, op, n, 1.0, SINK, WINDOW)
            assert torch.equal(index < 0, sparse)
            assert torch.equal(got[sparse], torch.where(mask, blocks, 0.0)[sparse])
            assert torch.equal(got[~sparse], blocks[~sparse])


def test_growing_sequence_at_half_sparsity_keeps_counts_and_sparse_blocks():
    gen = torch.Generator().manual_seed(7)
    pool = make_pool(0.5, 0.5)
    locs, kv = fill(pool, 1600, gen)
    before = None
    for done in (700, 1100, 1600):
        pool.compress_sequence(locs, done)
        index, _ = stored_blocks(pool, 0, "v", locs, done)
        expected = hk.pruner.num_sparse_blocks(hk.pruner.num_eligible_blocks(done, SINK, WINDOW), 0.5)
        assert (index < 0).sum(dim=1).tolist() == [expected] * 3
        if before is not None:
            assert (index[:, :before.shape[1]] < 0)[before < 0].all()  # once sparse, sparse
        before = index


def test_short_sparse_pool_keeps_the_rest_dense():
    gen = torch.Generator().manual_seed(3)
    pool = make_pool(1.0, 0.0, pages=16, dense_reserve=1.0)
    store = pool.layers[0]
    locs, kv = fill(pool, 16 * 64, gen)
    store.sparse_free["k"].pop(store.sparse_free["k"].free - 5)  # leave 5 sparse slots
    pool.compress_sequence(locs, 16 * 64)
    index, got = stored_blocks(pool, 0, "k", locs, 16 * 64)
    assert int((index < 0).sum()) == 5
    assert torch.equal(got[index >= 0], hk.to_blocks(kv[0][0][:, :3])[index >= 0])


def test_head_index_is_a_slice_when_contiguous():
    assert head_index((2, 3), 4, "cpu") == slice(8, 16)
    assert head_index((), 4, "cpu") == slice(0, 0)
    assert head_index((0, 2), 2, "cpu").tolist() == [0, 1, 4, 5]


def test_layers_with_different_retrieval_groups_compress_each_to_the_pruner():
    """Layers whose retrieval groups differ in number (4, 1, none, 3) are compressed together, each block to its own
    layer's pool and index map (the batched selection slices every layer's share out of one list)."""
    groups = [LayerGroups((0, 1, 2, 3), ()), LayerGroups((2,), (0, 1, 3)), LayerGroups((), (0, 1, 2, 3)),
              LayerGroups((0, 1, 3), (2,))]
    pool = small_pool(groups, 1.0, 1.0, 40, dense_reserve=1.0, head_dim=D, sink=SINK, window=WINDOW)
    gen = torch.Generator().manual_seed(11)
    n = 1500
    locs, kv = fill(pool, n, gen)
    for done in (900, n):
        pool.compress_sequence(locs, done)
    for layer, ((k, v), g) in enumerate(zip(kv, groups)):
        if not g.retrieval:
            continue
        for op, x in (("k", k), ("v", v)):
            index, got = stored_blocks(pool, layer, op, locs, n)
            blocks = hk.to_blocks(x[:, list(g.retrieval)])
            sparse, mask = hk.prune_blocks(blocks, op, n, 1.0, SINK, WINDOW)
            assert torch.equal(index < 0, sparse)
            assert torch.equal(got, torch.where(sparse[..., None, None] & ~mask, 0.0, blocks))


def test_compress_row_compresses_once_per_length_until_forgotten(monkeypatch):
    """A prompt compressed by its first decode step is not compressed again by the radix cache's call at the same
    length (no second selection, no sync); a new length or an extend on the row (forget_row) compresses again."""
    gen = torch.Generator().manual_seed(7)
    pool = make_pool(1.0, 1.0)
    locs, _ = fill(pool, 1000, gen)
    calls = []
    compress = pool.compress_sequence
    monkeypatch.setattr(pool, "compress_sequence", lambda l, n, s=None: calls.append(n) or compress(l, n, s))
    moved = pool.compress_row(3, locs, 1000)
    assert moved > 0 and calls == [1000]
    assert pool.compress_row(3, locs, 1000) == 0 and calls == [1000]
    assert pool.blocks_compressed == moved  # the pool's count, whoever asked
    pool.compress_row(5, locs, 1000)  # another row: its own memo
    pool.forget_row(3)
    pool.compress_row(3, locs, 1000)
    pool.compress_row(3, locs, 999)
    assert calls == [1000, 1000, 1000, 999]
    pool.reset_slots()
    pool.compress_row(5, locs, 1000)
    assert calls[-1] == 1000 and len(calls) == 5
    chunk = hk.SparsityConfig(0.0, 1.0, 128, 256)  # another sparsity at the same length compresses again
    pool.compress_row(5, locs, 1000, chunk)
    assert len(calls) == 6 and pool.compress_row(5, locs, 1000, chunk) == 0 and len(calls) == 6


def test_pages_of_a_formed_batch_keep_their_streaming_kv_until_it_is_launched():
    """A formed batch's windows are registered at formation (the plugin's hook calls ``register_window``): another
    sequence's trim in between (the overlap scheduler processing the previous batch's results) keeps them."""
    from hs_kernels import NO_BLOCK

    gen = torch.Generator().manual_seed(11)
    plain, protected = make_pool(1.0, 1.0), make_pool(1.0, 1.0)
    locs, _ = fill(plain, 1000, gen)
    fill(protected, 1000, gen)
    pages = locs[::64] // 64
    assert plain.trim_stream(0, locs, 1000, running=False) > 2
    dropped = pages[plain.stream_index[pages] == NO_BLOCK]
    assert plain.stream_pages_trimmed == len(dropped)
    kept_by_batch = dropped[:2]
    first, end = int(kept_by_batch[0]) * 64 - 64, int(kept_by_batch[1]) * 64  # a request reading those two pages
    protected.register_window(1, locs, first + WINDOW, end)
    assert (protected.live[kept_by_batch] > 0).all() and int((protected.live[dropped] > 0).sum()) == 2
    assert protected.trim_stream(0, locs, 1000, running=False) == len(dropped) - 2
    assert (protected.stream_index[kept_by_batch] != NO_BLOCK).all()
    assert (protected.stream_index[dropped[2:]] == NO_BLOCK).all()
    protected.release_window(1)  # the batch has run: nothing reads those pages any more
    assert protected.trim_stream(0, locs, 1000, running=False) == 2
    assert torch.equal(protected.stream_index, plain.stream_index)

def test_recomputed_pages_hand_their_streaming_kv_only_to_tree_pages_without_it():
    from hs_kernels import NO_BLOCK

    pool = make_pool(1.0, 1.0)
    pool.on_alloc_pages(torch.arange(1, 9))
    pool._drop_stream(torch.tensor([5, 6]))  # tree pages 5, 6 lost their streaming KV; 7 kept its own
    pool._drop_stream(torch.tensor([4]))  # the request's copy 4 has none to give
    before = pool.stream_index.clone()
    own, tree = torch.tensor([1, 2, 3, 4]), torch.tensor([1, 5, 7, 6])
    pool.adopt_stream(own, tree)
    want = before.clone()
    want[5], want[2] = before[2], NO_BLOCK  # only own 2 -> tree 5 moves
    assert torch.equal(pool.stream_index, want)
