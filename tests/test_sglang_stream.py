"""Checkpointed streaming windows: which pages keep streaming KV, how far a match is reused, pool sizing."""

import pytest
import torch

pytest.importorskip("sglang")

from sglang_hs.settings import HSSettings, LayerGroups  # noqa: E402
from sglang_hs.stream_window import keep_mask, live_pages, reusable_pages  # noqa: E402
from hs_kernels import SparsityConfig  # noqa: E402


def expected_pages(num_tokens, sink, window, checkpoint):
    """Pages that must hold streaming KV, straight from the definition."""
    end = num_tokens // 64 * 64
    spans = [(0, sink), (end - window, num_tokens)]
    spans += [(c - window, c) for c in range(checkpoint, num_tokens + 1, checkpoint)]
    return {j for j in range(-(-num_tokens // 64)) for a, b in spans if 64 * j < b and 64 * j + 64 > a}


@pytest.mark.parametrize("n, sink, window, checkpoint", [
    (1085, 64, 128, 256), (4096, 128, 256, 2048), (5000, 128, 256, 2048), (100, 128, 256, 256), (2047, 0, 200, 256),
])
def test_keep_mask_matches_definition(n, sink, window, checkpoint):
    keep = keep_mask(n, sink, window, checkpoint)
    assert set(torch.nonzero(keep).flatten().tolist()) == expected_pages(n, sink, window, checkpoint)


def test_long_sequence_keeps_about_window_over_checkpoint():
    n, sink, window, checkpoint = 128 * 1024, 128, 256, 2048
    kept = int(keep_mask(n, sink, window, checkpoint).sum())
    assert kept == 2 + (n // checkpoint) * 4 + 0  # sink pages + 4 window pages per checkpoint (the end is one)
    assert kept / (n // 64) == pytest.approx(window / checkpoint, abs=0.01)


def test_reuse_is_cut_back_to_the_last_stored_window():
    stored = keep_mask(1085, 64, 128, 256)[:10]  # a later request matched 640 tokens of this sequence
    assert reusable_pages(stored, 64, 128) == 8  # window [384, 512) is stored, [512, 640) is not
    assert reusable_pages(keep_mask(1085, 64, 128, 256)[:16], 64, 128) == 16  # up to the cached end
    assert reusable_pages(torch.tensor([False, True, True]), 64, 128) == 0  # sink missing
    assert reusable_pages(torch.tensor([True, False, False, True]), 64, 64) == 4
    assert reusable_pages(torch.zeros(0, dtype=torch.bool), 64, 64) == 0
    assert live_pages(512, 1085, 128) == slice(6, 17)


def test_bytes_per_token_counts_streaming_at_window_over_checkpoint():
    from sglang_hs.kv_pool import bytes_per_token

    cfg = SparsityConfig(0.0, 0.0, 128, 256)
    s = HSSettings(prefill=cfg, decode=cfg, sink_tokens=128, window_tokens=256, dense_reserve=0.0, recipe="t",
                   layers=[LayerGroups((), (0, 1))], num_kv_heads=2, stream_checkpoint=2048)
    assert s.stream_fraction == 256 / 2048
    assert bytes_per_token(s, 64, 2) == 2 * 2 * 64 * 2 * 256 / 2048
