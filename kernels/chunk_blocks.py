"""The chunk's own full 64-token tiles compressed 2:4 before its prefill (the paper's prefill: attention then runs on
the compressed keys and values): ``compress_chunk`` selects and compresses them, ``chunk_as_dense`` gives the oracle's
inputs for a kernel run on them (``hs_kernels.gpu.prefill_compressed_attention``)."""

import torch

from .format import BLOCK_SIZE, META_DTYPE, sparse_shapes


class ChunkBlocks:
    """The chunk's own full 64-token tiles, some compressed 2:4 (``compress_chunk``)."""

    def __init__(self, k_index, v_index, k_vals, k_meta, v_vals, v_meta, k_mode, v_mode):
        self.k_index, self.v_index = k_index, v_index
        self.k_vals, self.k_meta, self.v_vals, self.v_meta = k_vals, k_meta, v_vals, v_meta
        self.k_mode, self.v_mode = k_mode, v_mode


def compress_chunk(k: torch.Tensor, v: torch.Tensor, s_k: float, s_v: float) -> ChunkBlocks:
    """Compress the chunk's full tiles (magnitude 2:4, ``hs_kernels.gpu.compress_tiles``: on the GPU one fused
    launch per operand, reading them in place): per KV head the ``round(S * full tiles)`` lowest-loss tiles become
    sparse (all of them at S = 1; no sink/window exemption here: that is the caller's policy).
    The partial last tile stays dense. Entry ``h, c`` of the chunk index maps: ``~(h * nf + c)``
    (2:4 slot) or 0 (dense, read from k/v)."""
    from . import gpu

    t, h_kv, d = k.shape
    nf = t // BLOCK_SIZE
    nbc = max(1, -(-t // BLOCK_SIZE))
    res = []
    for x, s, operand in ((k, s_k, "k"), (v, s_v, "v")):
        n_sp = int(round(s * nf))
        if nf == 0 or n_sp == 0:
            (vs, ms) = sparse_shapes(operand, d)
            res.append((torch.zeros((h_kv, nbc), dtype=torch.int32, device=k.device),
                        torch.zeros((1, *vs), dtype=x.dtype, device=x.device),
                        torch.zeros((1, *ms), dtype=META_DTYPE, device=x.device), "dense"))
            continue
        vals, meta, loss = gpu.compress_tiles(x, operand, nf)
        index = torch.arange(-1, -1 - h_kv * nf, -1, dtype=torch.int32, device=x.device).view(h_kv, nf)  # ~slot
        if n_sp < nf:  # the highest-loss tiles stay dense
            index.scatter_(1, loss.argsort(dim=1)[:, n_sp:], 0)
        if nbc > nf:
            index = torch.nn.functional.pad(index, (0, 1))
        mode = "sparse" if (n_sp == nf and nbc == nf) else "mixed"
        res.append((index, vals, meta, mode))
    (ki, kvals, kmeta, km), (vi, vvals, vmeta, vm) = res
    return ChunkBlocks(ki, vi, kvals, kmeta, vvals, vmeta, km, vm)


def chunk_as_dense(k: torch.Tensor, v: torch.Tensor, chunk: ChunkBlocks) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's k, v with the compressed tiles decompressed (pruned elements zero): the oracle's
    inputs for a kernel run on ``chunk``."""
    from .compressor import decompress_blocks

    outs = []
    for x, index, vals, meta, operand in ((k, chunk.k_index, chunk.k_vals, chunk.k_meta, "k"),
                                          (v, chunk.v_index, chunk.v_vals, chunk.v_meta, "v")):
        x = x.clone()
        t, h_kv, d = x.shape
        nf = t // BLOCK_SIZE
        sp = index[:, :nf] < 0
        if nf and bool(sp.any()):
            hh, cc = torch.nonzero(sp, as_tuple=True)
            slots = (~index[hh, cc]).long()
            dec = decompress_blocks(vals[slots], meta[slots], operand)  # [n, 64, D]
            tok = cc[:, None] * BLOCK_SIZE + torch.arange(BLOCK_SIZE, device=x.device)[None]
            x[tok, hh[:, None]] = dec
        outs.append(x)
    return outs[0], outs[1]
