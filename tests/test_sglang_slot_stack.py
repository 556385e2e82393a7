"""SlotStacks: free lists of every layer in one table, taken from and given back to at once, exactly as each layer's
own SlotStack would be; and the pool's page bookkeeping, which uses them, costs the same work for any number of
layers."""

import collections

import pytest
import torch

from sglang_hs.slot_stack import SlotStack, SlotStacks


def test_stacks_pop_and_push_as_each_list_alone():
    gen = torch.Generator().manual_seed(0)
    count, capacity = 5, 40
    stacks, alone = SlotStacks(count, capacity), [SlotStack(capacity) for _ in range(count)]
    for step in range(60):
        if step % 3 == 0 or min(s.free for s in alone) < 4:  # give back a random part of random slots in use
            used = [s.slots[s.top:].clone() for s in alone]
            m = min(len(u) for u in used)
            if m == 0:
                continue
            slots = torch.stack([u[torch.randperm(len(u), generator=gen)[:m]] for u in used])
            keep = torch.rand(count, m, generator=gen) < 0.6
            stacks.push(slots, keep)
            for s, row, k in zip(alone, slots, keep):
                s.push(row[k])
        elif step % 3 == 1:
            n = int(torch.randint(1, 4, (1,), generator=gen))
            got = stacks.pop(n)
            assert got.tolist() == [s.pop(n).tolist() for s in alone]
        else:  # a different count from each list, and back to some
            counts = torch.randint(0, 4, (count,), generator=gen).tolist()
            got = stacks.pop_counts(counts)
            assert got.tolist() == [slot for s, n in zip(alone, counts) for slot in s.pop(n).tolist()]
            back = [n // 2 for n in counts]
            given = torch.cat([part[:b] for part, b in zip(got.split(counts), back)])
            stacks.push_counts(given, back)
            for s, part, b in zip(alone, got.split(counts), back):
                s.push(part[:b])
        assert [s.top for s in stacks.stacks] == [s.top for s in alone]
        assert all(torch.equal(a.slots[:a.top], b.slots[:b.top]) for a, b in zip(stacks.stacks, alone))


def test_stacks_refuse_to_overdraw_or_overfill_and_change_nothing():
    stacks = SlotStacks(2, 4)
    stacks.stacks[1].pop(3)
    with pytest.raises(RuntimeError, match="exhausted: need 2, 1 free"):
        stacks.pop(2)
    with pytest.raises(RuntimeError, match="over-freed"):
        stacks.push(torch.zeros(2, 1, dtype=torch.int64), torch.ones(2, 1, dtype=torch.bool))
    assert [s.top for s in stacks.stacks] == [4, 1]
    stacks.reset()
    assert [s.top for s in stacks.stacks] == [4, 4] and stacks.table.tolist() == [[0, 1, 2, 3]] * 2


def bookkeeping_ops(layers: int) -> tuple[collections.Counter, collections.Counter]:
    from benchmarks.serving.probe_host import OpCount
    from sglang_hs.settings import LayerGroups
    from sglang_hs.testing import small_pool

    pool = small_pool(LayerGroups((0, 1), (2,)), 0.5, 0.5, 32, layers=layers)
    pages = torch.tensor([3, 7])
    used = [layer.dense_free[op].used for layer in pool.layers for op in ("k", "v")]
    with OpCount() as alloc:
        pool.on_alloc_pages(pages)
    assert all((layer.index[op][pages] >= 0).all() for layer in pool.layers for op in ("k", "v"))
    with OpCount() as free:
        pool.on_free_pages(pages)
    assert all((layer.index[op][pages] < -2**30).all() for layer in pool.layers for op in ("k", "v"))
    assert [layer.dense_free[op].used for layer in pool.layers for op in ("k", "v")] == used
    return alloc.count, free.count


def test_page_bookkeeping_costs_the_same_for_any_number_of_layers():
    pytest.importorskip("sglang")
    assert bookkeeping_ops(2) == bookkeeping_ops(16)


def compression_ops(layers: int, s: float) -> collections.Counter:
    from benchmarks.serving.probe_host import OpCount
    from sglang_hs.settings import LayerGroups
    from sglang_hs.testing import small_pool

    pool = small_pool(LayerGroups((0, 1), (2,)), s, s, 32, layers=layers)
    pages = torch.arange(1, 17)
    pool.on_alloc_pages(pages)
    locs = (pages[:, None] * 64 + torch.arange(64)).flatten()
    gen = torch.Generator().manual_seed(0)
    for layer in range(layers):
        pool.write(layer, locs, *(torch.randn(len(locs), 3, 64, generator=gen) for _ in range(2)))
    pool.compress_sequence(locs, 600)
    with OpCount() as ops:
        moved = pool.compress_sequence(locs, len(locs))
    assert moved > 0
    return ops.count


@pytest.mark.parametrize("s", [1.0, 0.5])
def test_compression_costs_the_same_for_any_number_of_layers(s):
    """The selection (with a loss pass below S = 1) and the compression of every layer at once."""
    pytest.importorskip("sglang")
    assert compression_ops(2, s) == compression_ops(16, s)
