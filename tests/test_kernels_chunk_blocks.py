"""CPU: ``compress_chunk``'s contract (which tiles become 2:4, where their values live, the maps' entries and modes)
and ``chunk_as_dense`` on its result, against the pruner and compressor applied tile by tile."""

import pytest
import torch

from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk
from hs_kernels.compressor import compress_blocks
from hs_kernels.pruner import block_loss, element_mask


def tiles_of(x: torch.Tensor, h: int, c: int) -> torch.Tensor:
    return x[64 * c:64 * (c + 1), h][None]


@pytest.mark.parametrize("s,tail", [(0.5, 9), (0.75, 0), (1.0, 9)])
def test_the_lowest_loss_tiles_become_sparse(s, tail):
    gen = torch.Generator().manual_seed(int(s * 100) + tail)
    h_kv, nf = 3, 7
    k, v = (torch.randn(64 * nf + tail, h_kv, 64, generator=gen) * torch.rand(64 * nf + tail, h_kv, 1, generator=gen)
            for _ in "kv")
    chunk = compress_chunk(k, v, s, s)
    n_sp = round(s * nf)
    for x, index, vals, meta, mode, operand in ((k, chunk.k_index, chunk.k_vals, chunk.k_meta, chunk.k_mode, "k"),
                                                (v, chunk.v_index, chunk.v_vals, chunk.v_meta, chunk.v_mode, "v")):
        assert index.shape == (h_kv, nf + (tail > 0)) and index.dtype == torch.int32
        assert mode == ("sparse" if n_sp == nf and not tail else "mixed")
        if tail:
            assert (index[:, nf] == 0).all()  # the partial tile stays dense
        for h in range(h_kv):
            losses = torch.cat([block_loss(t, element_mask(t, operand)) for t in (tiles_of(x, h, c) for c in range(nf))])
            sparse = torch.nonzero(index[h, :nf] < 0).flatten()
            assert sorted(sparse.tolist()) == sorted(losses.argsort()[:n_sp].tolist())
            for c in sparse.tolist():
                tile = tiles_of(x, h, c)
                r_vals, r_meta = compress_blocks(tile, element_mask(tile, operand), operand)
                slot = ~int(index[h, c])
                assert torch.equal(vals[slot], r_vals[0]) and torch.equal(meta[slot], r_meta[0])
    k_d, v_d = chunk_as_dense(k, v, chunk)
    for x, x_d, index, operand in ((k, k_d, chunk.k_index, "k"), (v, v_d, chunk.v_index, "v")):
        for h in range(h_kv):
            for c in range(nf):
                tile = tiles_of(x, h, c)
                pruned = torch.where(element_mask(tile, operand), tile, 0) if index[h, c] < 0 else tile
                assert torch.equal(tiles_of(x_d, h, c), pruned)
        assert torch.equal(x_d[64 * nf:], x[64 * nf:])


def test_no_tile_sparse_at_zero():
    k, v = (torch.randn(64 * 3, 2, 64) for _ in "kv")
    chunk = compress_chunk(k, v, 0, 1)
    assert chunk.k_mode == "dense" and (chunk.k_index == 0).all()
    assert chunk.v_mode == "sparse" and (chunk.v_index < 0).all()
