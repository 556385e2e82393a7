"""The backend's prefill pruning of a chunk's own K/V reads only the chunk, and equals its definition:
the pruner's block selection over the whole sequence (zeros for the cached prefix, which is never a
candidate), applied to the blocks wholly inside the chunk."""

import math
from types import SimpleNamespace as NS

import pytest
import torch

pytest.importorskip("sglang")

import hs_kernels as hk  # noqa: E402
from sglang_hs.backend import HSAttnBackend  # noqa: E402


def defined(x, op, prefix_len, cfg):
    seq_len = prefix_len + x.shape[0]
    full = torch.cat((x.new_zeros(prefix_len, *x.shape[1:]), x))
    blocks = hk.to_blocks(full)
    mask = hk.element_mask(blocks, op)
    candidate = torch.arange(blocks.shape[1]) * hk.BLOCK_SIZE >= prefix_len
    loss = torch.where(candidate, hk.block_loss(blocks, mask), torch.full((), math.inf))
    sparse = hk.select_sparse_blocks(loss, seq_len, cfg.sparsity(op), cfg.sink_tokens, cfg.window_tokens) & candidate
    pruned = torch.where(sparse[..., None, None] & ~mask, 0.0, blocks)
    return pruned.permute(1, 2, 0, 3).reshape(-1, *x.shape[1:])[prefix_len:seq_len]


@pytest.mark.parametrize("s", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("prefix, t", [(0, 1000), (100, 1000), (64, 700), (1000, 50), (1000, 20), (30, 10), (0, 63), (500, 2000)])
def test_prune_chunk_equals_its_definition(s, prefix, t):
    backend = HSAttnBackend.__new__(HSAttnBackend)  # only the settings are read
    backend.settings = NS(prefill=hk.SparsityConfig(s, s, 64, 128))
    gen = torch.Generator().manual_seed(prefix + t)
    for op in ("k", "v"):
        x = torch.randn(t, 3, 64, generator=gen)
        got = backend._prune_chunk(x, op, prefix, prefix + t)
        assert torch.equal(got, defined(x, op, prefix, backend.settings.prefill))


def test_a_chunk_without_candidate_blocks_is_returned_as_is(monkeypatch):
    """A question inside the window (or a chunk whose blocks are all sink / window) has nothing to prune: the
    chunk comes back untouched, without the per-block work (no mask is computed)."""
    backend = HSAttnBackend.__new__(HSAttnBackend)
    backend.settings = NS(prefill=hk.SparsityConfig(1.0, 1.0, 64, 256))
    masks = []
    monkeypatch.setattr("hs_kernels.gpu.element_mask", lambda *a: masks.append(1) or hk.element_mask(*a))
    x = torch.randn(64, 3, 64)
    assert backend._prune_chunk(x, "v", 4096, 4096 + 64) is x and masks == []  # a question after 4K
    assert backend._prune_chunk(x, "v", 0, 64) is x and masks == []  # the sink block alone
    long = torch.randn(640, 3, 64)  # its first 6 blocks are candidates: pruned
    assert not torch.equal(backend._prune_chunk(long, "v", 4096, 4096 + 640), long) and masks == [1]
