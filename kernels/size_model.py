"""Size and speedup model of the paper (eq. 3-6, 10, 11) and the byte count of real pools.

All sizes are bytes. The model is generic over the numeric type: pass ``fractions.Fraction``
sparsities to get exact results. ``S_K``/``S_V`` here are fractions of *all* blocks that are
sparse (with sinks and window dense, that is below the configured target: use
``measured_sparsity``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .format import BLOCK_SIZE, INDEX_DTYPE, is_sparse, slot_of
from .pool import BlockPool

INDEX_BYTES = torch.empty((), dtype=INDEX_DTYPE).element_size()  # 4


@dataclass(frozen=True)
class SizeBreakdown:
    """Bytes per component (paper eq. 5): index maps, dense blocks, non-zero values, metadata."""

    idx: object
    den: object
    nnz: object
    e: object

    @property
    def total(self):
        return self.idx + self.den + self.nnz + self.e


def baseline_bytes(num_tokens, head_dim, num_kv_heads=1, value_bytes=2):
    """Dense K + V (paper eq. 4): ``2 * L * D`` elements per KV head."""
    return 2 * num_tokens * head_dim * num_kv_heads * value_bytes


def model_bytes(num_tokens, head_dim, s_k, s_v, num_kv_heads=1, value_bytes=2,
                index_bytes=INDEX_BYTES, block_size=BLOCK_SIZE) -> SizeBreakdown:
    """Paper eq. 5 in bytes for ``L = num_tokens`` (a multiple of the block size) per KV head.

    idx = 2 * L/B index entries; den = L*D*(2 - S_K - S_V) elements; nnz = L*D*(S_K + S_V)/2
    elements; e = 4 bits per group of 4 = L*D*(S_K + S_V)/8 bytes (1/16 of the dense size in fp16).
    """
    ld = num_tokens * head_dim * num_kv_heads
    s = s_k + s_v
    return SizeBreakdown(
        idx=2 * (num_tokens // block_size) * num_kv_heads * index_bytes,
        den=ld * (2 - s) * value_bytes,
        nnz=ld * s * value_bytes / 2,
        e=ld * s / 8,
    )


def compression_ratio(s_k, s_v, head_dim=None, value_bytes=2, index_bytes=INDEX_BYTES, block_size=BLOCK_SIZE):
    """r_comp (paper eq. 3/6). Without ``head_dim``: the approximation ``1 / (1 - 0.21875 (S_K + S_V))``
    (fp16 values, index maps neglected). With ``head_dim``: exact,
    ``1 / (1 - (S_K + S_V)(1/4 - 1/(16 e)) + i / (B D e))`` for e-byte values and i-byte index entries.
    """
    if head_dim is None:
        return 1 / (1 - 0.21875 * (s_k + s_v))
    b = model_bytes(block_size, head_dim, s_k, s_v, 1, value_bytes, index_bytes, block_size)
    return baseline_bytes(block_size, head_dim, 1, value_bytes) / b.total


def prefill_speedup(s_k, s_v):
    """Ideal prefill attention speedup (paper eq. 10): ``4 / (4 - (S_K + S_V))``."""
    return 4 / (4 - (s_k + s_v))


def decode_speedup(s_k, s_v):
    """Ideal (memory-bound) decode attention speedup (paper eq. 11) = approximate r_comp."""
    return compression_ratio(s_k, s_v)


def measured_sparsity(index: torch.Tensor) -> float:
    """Fraction of index map entries that are sparse."""
    return float(is_sparse(index).float().mean()) if index.numel() else 0.0


def measured_bytes(k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor,
                   v_index: torch.Tensor) -> SizeBreakdown:
    """Bytes really used by the blocks the index maps reference (each distinct slot once) + the maps."""
    idx = sum(t.numel() * t.element_size() for t in (k_index, v_index))
    den = nnz = e = 0
    for pool, index in ((k_pool, k_index), (v_pool, v_index)):
        sparse = is_sparse(index)
        slots = slot_of(index)
        n_dense = torch.unique(slots[~sparse]).numel()
        n_sparse = torch.unique(slots[sparse]).numel()
        den += n_dense * _slot_bytes(pool.dense)
        nnz += n_sparse * _slot_bytes(pool.values)
        e += n_sparse * _slot_bytes(pool.meta)
    return SizeBreakdown(idx=idx, den=den, nnz=nnz, e=e)


def _slot_bytes(pool_tensor: torch.Tensor) -> int:
    return pool_tensor.shape[1:].numel() * pool_tensor.element_size()
