"""HSKVPool.slot_problems (the stats' ``slot_problems``, published after every request): none while the pool's
bookkeeping is sound, whatever pages were opened, compressed and freed; each kind of broken accounting named by its
layer, operand and slot kind; and the same work for any number of layers (it ran a few host syncs per layer and
operand, after every request, in the way of the next one)."""

import pytest
import torch

pytest.importorskip("sglang")

from hs_kernels import BLOCK_SIZE, NO_BLOCK  # noqa: E402
from sglang_hs.kv_pool import HSKVPool  # noqa: E402
from benchmarks.serving.probe_host import OpCount  # noqa: E402
from sglang_hs.settings import LayerGroups  # noqa: E402
from sglang_hs.testing import small_pool  # noqa: E402

H_KV, D = 4, 64
# retrieval counts 4, 1, none, 3 and 1 again: two layers share the one-group tables, at rows 0 and 1
MIXED = [LayerGroups((0, 1, 2, 3), ()), LayerGroups((2,), (0, 1, 3)), LayerGroups((), (0, 1, 2, 3)),
         LayerGroups((0, 1, 3), (2,)), LayerGroups((1,), (0, 2, 3))]


def mixed_pool(layers=MIXED, pages=40) -> HSKVPool:
    return small_pool(list(layers), 1.0, 1.0, pages, dense_reserve=1.0, head_dim=D)


def used_pool(layers=MIXED) -> tuple[HSKVPool, torch.Tensor]:
    """Pages 1-20 opened and written, compressed, pages 3-5 freed: dense and 2:4 slots and stream slots in use."""
    pool = mixed_pool(layers)
    gen = torch.Generator().manual_seed(0)
    pages = torch.arange(1, 21)
    pool.on_alloc_pages(pages)
    locs = (pages[:, None] * BLOCK_SIZE + torch.arange(BLOCK_SIZE)).flatten()
    for layer in range(len(layers)):
        pool.write(layer, locs, *(torch.randn(len(locs), H_KV, D, generator=gen) for _ in range(2)))
    assert pool.compress_sequence(locs, len(locs)) > 0
    pool.on_free_pages(torch.tensor([3, 4, 5]))
    return pool, pages


def test_sound_bookkeeping_has_no_problems():
    pool = mixed_pool()
    assert pool.slot_problems() == []
    pool, _ = used_pool()
    assert pool.slot_problems() == []


def test_a_lost_entry_is_named_by_layer_operand_and_kind():
    pool, _ = used_pool()
    index = pool.layers[4].index["v"]  # the one-group tables' second row
    sparse_entry = (index < 0) & (index != NO_BLOCK)
    page = int(sparse_entry[:, 0].nonzero()[0])
    index[page, 0] = NO_BLOCK
    used = pool.layers[4].sparse_free["v"].used
    assert pool.slot_problems() == [f"layer 4 v sparse: {used - 1} referenced, {used} used"]


def test_a_slot_referenced_twice_is_named():
    pool, pages = used_pool()
    index = pool.layers[3].index["k"]  # three groups: two entries of one page
    dense = int(pages[-1])  # the last page is in the window: dense
    assert (index[dense] >= 0).all()
    index[dense, 1] = index[dense, 0]
    assert pool.slot_problems() == ["layer 3 k dense: a slot is referenced twice"]  # as many entries as slots used


def test_stream_slots_are_checked():
    pool, pages = used_pool()
    pool.stream_index[int(pages[0])] = pool.stream_index[int(pages[1])]
    assert pool.slot_problems() == ["stream: a slot is referenced twice"]
    pool.stream_index[int(pages[0])] = NO_BLOCK
    used = pool.stream_free.used
    assert pool.slot_problems() == [f"stream: {used - 1} referenced, {used} used"]


def test_the_check_costs_the_same_for_any_number_of_layers():
    ops = []
    for layers in (1, 8):
        pool, _ = used_pool([LayerGroups((0, 1), (2, 3))] * layers)
        with OpCount() as count:
            assert pool.slot_problems() == []
        ops.append(count.ops)
    assert ops[0] == ops[1]
