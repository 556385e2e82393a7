"""CPU: the v3 decode kernel's block order (``gpu.decode_order``), pure torch."""

import torch

from hs_kernels import gpu
from hs_kernels.format import NO_BLOCK


def test_decode_order_groups_blocks_by_category():
    gen = torch.Generator().manual_seed(1234)
    batch, h_kv, mb = 3, 4, 37
    seq_lens = torch.tensor([1, 64 * 20 + 5, 64 * 37], dtype=torch.int32)
    k_index = torch.randint(0, 1000, (batch, h_kv, mb), generator=gen, dtype=torch.int32)
    v_index = torch.randint(0, 1000, (batch, h_kv, mb), generator=gen, dtype=torch.int32)
    k_index[torch.rand(batch, h_kv, mb, generator=gen) < 0.4] *= -1
    v_index[torch.rand(batch, h_kv, mb, generator=gen) < 0.6] *= -1
    k_index[k_index == 0] = 1
    k_index[0, :, 1:] = NO_BLOCK  # past the sequence: must come last, whatever the entry
    order, cat_end = gpu.decode_order(k_index, v_index, seq_lens)
    assert order.dtype == torch.int32 and cat_end.dtype == torch.int32
    assert order.shape == (batch, h_kv, mb) and cat_end.shape == (batch, h_kv, 4)
    for b in range(batch):
        n = -(-int(seq_lens[b]) // 64)
        for h in range(h_kv):
            o = order[b, h].tolist()
            assert sorted(o) == list(range(mb))
            assert sorted(o[:n]) == list(range(n))  # the sequence's blocks first
            cats = [2 * int(k_index[b, h, j] < 0) + int(v_index[b, h, j] < 0) for j in o[:n]]
            assert cats == sorted(cats)
            ends = [sum(c <= i for c in cats) for i in range(4)]
            assert cat_end[b, h].tolist() == ends
            for i in range(4):  # stable: positions increase within a category
                part = [j for j, c in zip(o[:n], cats) if c == i]
                assert part == sorted(part)
