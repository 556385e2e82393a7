"""Pruner: top-2-of-4 masks and ties, block loss, block selection (sinks, window, exact fraction, ties)."""

import pytest
import torch

import hs_kernels as hk


@pytest.mark.parametrize("group, kept", [
    ([1.0, -5.0, 3.0, 2.0], [1, 2]),
    ([1.0, 1.0, 1.0, 1.0], [0, 1]),  # all tied: lowest indices
    ([2.0, 3.0, -3.0, 3.0], [1, 2]),  # tie on |3|: lower index wins
    ([0.0, 0.0, 0.0, 0.0], [0, 1]),
    ([0.0, -0.0, 7.0, 0.0], [0, 2]),
    ([float("nan"), 1.0, 2.0, 0.0], [0, 2]),
    ([float("inf"), float("inf"), float("nan"), 1.0], [0, 1]),  # NaN ties with inf
    ([1.0, float("nan"), -float("inf"), float("nan")], [1, 2]),
    ([65504.0, float("inf"), 1.0, 0.0], [0, 1]),  # inf beats the largest finite half
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_magnitude_mask_cases(group, kept, dtype):
    mask = hk.magnitude_mask(torch.tensor(group, dtype=dtype))
    assert torch.nonzero(mask).flatten().tolist() == kept


def test_magnitude_mask_exactly_two_with_many_ties_and_is_top2():
    torch.manual_seed(0)
    x = torch.randint(-2, 3, (64, 256)).float()  # heavy ties
    mask = hk.magnitude_mask(x)
    groups, mgroups = x.abs().view(64, 64, 4), mask.view(64, 64, 4)
    assert (mgroups.sum(-1) == 2).all()
    kept_min = torch.where(mgroups, groups, torch.inf).amin(-1)
    dropped_max = torch.where(mgroups, -torch.inf, groups).amax(-1)
    assert (kept_min >= dropped_max).all()
    # deterministic across calls and dtypes that represent the values exactly
    assert torch.equal(mask, hk.magnitude_mask(x.to(torch.bfloat16)))


def test_block_loss_is_l1_of_pruned_elements_fp32():
    torch.manual_seed(1)
    blocks = torch.randn(3, 64, 64, dtype=torch.float16)
    for operand in ("k", "v"):
        mask = hk.element_mask(blocks, operand)
        loss = hk.block_loss(blocks, mask)
        assert loss.dtype == torch.float32 and loss.shape == (3,)
        ref = (blocks.double().abs() * (~mask).double()).sum(dim=(1, 2))
        torch.testing.assert_close(loss.double(), ref, rtol=1e-6, atol=0)
        # V groups run along tokens: the mask keeps 2 of each 4 tokens per channel
        if operand == "v":
            assert (mask.view(3, 16, 4, 64).sum(2) == 2).all()


def test_eligible_blocks_sink_window_partial():
    # 20 full blocks, sink 64 -> block 0 dense, window 256 -> blocks 16..19 dense
    assert torch.nonzero(hk.eligible_blocks(1280, 64, 256)).flatten().tolist() == list(range(1, 16))
    # sink of 100 tokens touches blocks 0 and 1; partial last block stays dense even without a window
    assert torch.nonzero(hk.eligible_blocks(1300, 100, 0)).flatten().tolist() == list(range(2, 20))
    # window boundary inside a block keeps that block dense
    assert torch.nonzero(hk.eligible_blocks(1000, 64, 256)).flatten().tolist() == list(range(1, 11))
    assert not hk.eligible_blocks(300, 64, 256).any()


def test_num_eligible_blocks_and_eligible_range_match_eligible_blocks():
    from hs_kernels.pruner import num_eligible_blocks

    for n in (0, 1, 63, 64, 65, 300, 1000, 1280, 1300, 4097):
        for sink in (0, 1, 64, 100, 128):
            for window in (0, 1, 64, 100, 256):
                eligible = hk.eligible_blocks(n, sink, window)
                assert num_eligible_blocks(n, sink, window) == int(eligible.sum()), (n, sink, window)
                first, stop = hk.eligible_range(n, sink, window)
                j = torch.arange(eligible.numel())
                assert torch.equal(eligible, (j >= first) & (j < stop))


@pytest.mark.parametrize("sparsity, expected", [(0.0, 0), (0.5, 8), (0.2, 3), (1 / 3, 5), (1.0, 15)])
def test_select_exact_fraction_lowest_loss_never_sink_or_window(sparsity, expected):
    torch.manual_seed(2)
    loss = torch.rand(4, 20)
    loss[:, 0] = loss[:, 16:] = 0.0  # the cheapest blocks are sink/window: must not be chosen
    chosen = hk.select_sparse_blocks(loss, 1280, sparsity, 64, 256)
    assert chosen.shape == (4, 20) and (chosen.sum(-1) == expected).all()
    assert not chosen[:, 0].any() and not chosen[:, 16:].any()
    for h in range(4):
        eligible = loss[h, 1:16]
        threshold = eligible.sort().values[expected - 1] if expected else -1.0
        assert torch.equal(chosen[h, 1:16], eligible <= threshold)


@pytest.mark.parametrize("num_tokens", [1280, 1300, 100, 0])
def test_loss_free_selection_is_the_selection_at_s0_and_s1(num_tokens):
    loss = torch.rand(3, -(-num_tokens // 64))
    for s in (0.0, 1.0):
        free = hk.loss_free_selection(num_tokens, s, 64, 256)
        assert torch.equal(free.expand_as(loss), hk.select_sparse_blocks(loss, num_tokens, s, 64, 256))
    assert hk.loss_free_selection(num_tokens, 0.5, 64, 256) is None  # the loss decides


def test_select_ties_go_to_lower_block_index():
    loss = torch.ones(2, 12)
    loss[1, 5] = 0.5
    chosen = hk.select_sparse_blocks(loss, 12 * 64, 0.5, 64, 0)  # 11 eligible -> round(5.5) = 6
    assert torch.nonzero(chosen[0]).flatten().tolist() == [1, 2, 3, 4, 5, 6]
    assert torch.nonzero(chosen[1]).flatten().tolist() == [1, 2, 3, 4, 5, 6]
    loss[1, 9] = 0.25
    chosen = hk.select_sparse_blocks(loss, 12 * 64, 0.5, 64, 0)
    assert torch.nonzero(chosen[1]).flatten().tolist() == [1, 2, 3, 4, 5, 9]


def test_per_head_decisions_independent():
    loss = torch.stack([torch.arange(10.0), torch.arange(10.0).flip(0)])
    chosen = hk.select_sparse_blocks(loss, 640, 0.5, 0, 0)
    assert torch.nonzero(chosen[0]).flatten().tolist() == [0, 1, 2, 3, 4]
    assert torch.nonzero(chosen[1]).flatten().tolist() == [5, 6, 7, 8, 9]


def test_pluggable_mask_producer_reaches_the_compressor():
    def first_two_channels(x):  # a "channel mask" method: keep positions 0, 1 of each group
        return torch.tensor([True, True, False, False], device=x.device).repeat(x.shape[-1] // 4).expand(x.shape)

    torch.manual_seed(3)
    k, v = torch.randn(2, 640, 2, 64).unbind(0)
    c = hk.compress_sequence(k, v, hk.SparsityConfig(1.0, 0.0, 64, 64), producer=first_two_channels)
    kd, vd = c.dense_kv()
    sparse_tokens = slice(64, 576)
    assert torch.equal(kd[sparse_tokens, :, 0::4], k[sparse_tokens, :, 0::4])
    assert (kd[sparse_tokens, :, 2::4] == 0).all() and (kd[sparse_tokens, :, 3::4] == 0).all()
    assert torch.equal(kd[:64], k[:64]) and torch.equal(vd, v)


def test_sparsity_config_validates():
    assert hk.SparsityConfig().sink_tokens == 64 and hk.SparsityConfig().window_tokens == 256
    with pytest.raises(ValueError, match="s_k"):
        hk.SparsityConfig(s_k=1.5)
    with pytest.raises(ValueError, match="window_tokens"):
        hk.SparsityConfig(window_tokens=-1)


def test_compress_magnitude_off_cuda_is_the_reference_and_writes_only_given_slots():
    gen = torch.Generator().manual_seed(3)
    blocks = torch.randn(6, 64, 64, generator=gen).to(torch.bfloat16)
    values = torch.full((8, 64, 32), 7.0, dtype=torch.bfloat16)
    meta = torch.full((8, 64, 4), -7, dtype=torch.int16)
    slots = torch.tensor([5, -1, 0, -1, 2, 7], dtype=torch.int32)
    _, _, loss = hk.compress_magnitude(blocks, "k", values, meta, slots)
    mask = hk.element_mask(blocks, "k")
    r_vals, r_meta = hk.compress_blocks(blocks, mask, "k")
    assert torch.equal(loss, hk.block_loss(blocks, mask))
    keep = slots >= 0
    assert torch.equal(values[slots[keep].long()], r_vals[keep]) and torch.equal(meta[slots[keep].long()], r_meta[keep])
    assert (values[[1, 3, 4, 6]] == 7.0).all() and (meta[[1, 3, 4, 6]] == -7).all()
    _, _, loss_only = hk.compress_magnitude(blocks, "k", values, meta, torch.full((6,), -1, dtype=torch.int32))
    assert torch.equal(loss_only, loss)
    with pytest.raises(ValueError, match="values"):
        hk.compress_magnitude(blocks, "k", values[:, :, :16], meta, slots)
