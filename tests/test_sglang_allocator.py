"""HSTokenAllocator.alloc_decode: the next token's slot per sequence, a page from the free list (with
its dense block and stream slots) only for a sequence whose new token opens one."""

import pytest
import torch

pytest.importorskip("sglang")

from sglang_hs.allocator import HSTokenAllocator  # noqa: E402
from sglang_hs.settings import LayerGroups  # noqa: E402
from sglang_hs.testing import small_pool  # noqa: E402


def make(pages=16):
    pool = small_pool(LayerGroups(retrieval=(0, 1), streaming=(2,)), 0.5, 0.5, pages, layers=2)
    return pool, HSTokenAllocator(pages * 64, page_size=64, dtype=torch.float32, device="cpu", kvcache=pool, need_sort=False)


def free_slots(pool):
    return [pool.free_stream_pages()] + [layer.dense_free[op].free for layer in pool.layers for op in ("k", "v")]


def test_a_step_within_pages_takes_nothing_from_the_pool():
    pool, alloc = make()
    seq_lens = torch.tensor([70, 130, 200])  # after this step's token: none opens a page
    last_loc = torch.tensor([64 + 68, 3 * 64 + 0, 5 * 64 + 6])
    before, free_pages = free_slots(pool), alloc.free_pages.clone()
    out = alloc.alloc_decode(seq_lens, seq_lens.clone(), last_loc)
    assert out.tolist() == (last_loc + 1).tolist()
    assert free_slots(pool) == before and torch.equal(alloc.free_pages, free_pages)


def test_a_token_that_opens_a_page_gets_its_first_slot_and_the_page_its_slots():
    pool, alloc = make()
    seq_lens = torch.tensor([65, 130, 129])  # the first and third open a page
    last_loc = torch.tensor([64 + 63, 3 * 64 + 1, 5 * 64 + 63])
    before, first_free = free_slots(pool), alloc.free_pages[:2].tolist()
    out = alloc.alloc_decode(seq_lens, seq_lens.clone(), last_loc)
    assert out.tolist() == [first_free[0] * 64, 3 * 64 + 2, first_free[1] * 64]
    assert free_slots(pool) == [before[0] - 2] + [n - 2 * 2 for n in before[1:]]  # 2 pages x 2 retrieval groups
    for layer in pool.layers:
        for op in ("k", "v"):
            assert (layer.index[op][first_free] >= 0).all()
    assert (pool.stream_index[first_free] >= 0).all()
