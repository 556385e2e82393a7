"""BlockPool: dense and 2:4-sparse block storage of one operand (K or V) of one layer.

Slots are shared by all KV heads of the layer; a per-sequence index map (``hs_kernels.format``)
says, per (KV head, block), which pool and slot hold the block. Allocation of slots (free lists,
radix-cache sharing) belongs to the serving engine; this class only stores, resolves and counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .compressor import compress_blocks, decompress_blocks
from .format import (
    BLOCK_SIZE,
    INDEX_DTYPE,
    META_DTYPE,
    check_blocks,
    check_dtype,
    check_head_dim,
    check_operand,
    check_shape,
    check_value_dtype,
    encode_sparse,
    is_sparse,
    slot_of,
    sparse_shapes,
)


@dataclass
class BlockPool:
    """Storage of one operand of one layer.

    operand: "k" or "v".
    dense:  ``[num_dense_slots, 64, D]`` value dtype, token-major blocks.
    values: K ``[num_sparse_slots, 64, D // 2]``; V ``[num_sparse_slots, D, 32]``; value dtype.
    meta:   K ``[num_sparse_slots, 64, D // 16]``; V ``[num_sparse_slots, D, 4]``; int16.
    The tensors may be views into larger engine-owned buffers.
    """

    operand: str
    dense: torch.Tensor
    values: torch.Tensor
    meta: torch.Tensor

    def __post_init__(self):
        check_operand(self.operand)
        check_value_dtype(self.dense, "dense")
        if self.dense.dim() != 3 or self.dense.shape[1] != BLOCK_SIZE:
            raise ValueError(f"dense pool must have shape [slots, {BLOCK_SIZE}, head_dim], got {list(self.dense.shape)}")
        check_head_dim(self.dense.shape[-1])
        if self.values.dtype != self.dense.dtype:
            raise TypeError(f"values dtype {self.values.dtype} must equal dense dtype {self.dense.dtype}")
        check_dtype(self.meta, META_DTYPE, "meta")
        values_shape, meta_shape = sparse_shapes(self.operand, self.head_dim)
        check_shape(self.values, (None, *values_shape), "values")
        check_shape(self.meta, (self.values.shape[0], *meta_shape), "meta")

    @classmethod
    def allocate(cls, operand: str, head_dim: int, num_dense_slots: int, num_sparse_slots: int,
                 dtype: torch.dtype = torch.float16, device=None) -> "BlockPool":
        """Zero-filled pool with the given slot counts."""
        check_operand(operand)
        check_head_dim(head_dim)
        if dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise TypeError(f"dtype must be float16, bfloat16 or float32, got {dtype}")
        values_shape, meta_shape = sparse_shapes(operand, head_dim)
        return cls(
            operand,
            torch.zeros(num_dense_slots, BLOCK_SIZE, head_dim, dtype=dtype, device=device),
            torch.zeros(num_sparse_slots, *values_shape, dtype=dtype, device=device),
            torch.zeros(num_sparse_slots, *meta_shape, dtype=META_DTYPE, device=device),
        )

    @classmethod
    def holding(cls, operand: str, blocks: torch.Tensor, sparse: torch.Tensor,
                mask: torch.Tensor) -> tuple["BlockPool", torch.Tensor]:
        """An exactly sized pool holding token-major ``blocks [..., 64, D]``: where ``sparse`` (bool,
        ``blocks.shape[:-2]``) compressed with the 2:4 ``mask``, else dense. Slots follow the blocks'
        row-major order, dense and sparse counted separately from 0. Returns the pool and the index
        entries (int32, ``sparse``'s shape)."""
        n_sparse = int(sparse.sum())
        pool = cls.allocate(operand, blocks.shape[-1], sparse.numel() - n_sparse, n_sparse, blocks.dtype, blocks.device)
        dense_slot = torch.cumsum((~sparse).flatten().long(), 0).reshape(sparse.shape) - 1
        sparse_slot = torch.cumsum(sparse.flatten().long(), 0).reshape(sparse.shape) - 1
        pool.store_dense(dense_slot[~sparse], blocks[~sparse])
        pool.store_sparse(sparse_slot[sparse], blocks[sparse], mask[sparse])
        return pool, torch.where(sparse, encode_sparse(sparse_slot), dense_slot).to(INDEX_DTYPE)

    @property
    def head_dim(self) -> int:
        return self.dense.shape[-1]

    @property
    def dtype(self) -> torch.dtype:
        return self.dense.dtype

    @property
    def num_dense_slots(self) -> int:
        return self.dense.shape[0]

    @property
    def num_sparse_slots(self) -> int:
        return self.values.shape[0]

    def store_dense(self, slots: torch.Tensor, blocks: torch.Tensor) -> None:
        """Write token-major ``blocks [n, 64, D]`` into dense slots ``slots [n]`` (int64)."""
        self._check_blocks(blocks, slots, self.num_dense_slots)
        self.dense[slots] = blocks

    def store_sparse(self, slots: torch.Tensor, blocks: torch.Tensor, mask: torch.Tensor) -> None:
        """Compress token-major ``blocks [n, 64, D]`` with 2:4 ``mask`` (token-major bool) into sparse ``slots [n]``."""
        self._check_blocks(blocks, slots, self.num_sparse_slots)
        values, meta = compress_blocks(blocks, mask, self.operand)
        self.values[slots] = values
        self.meta[slots] = meta

    def gather(self, index: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Resolve index map entries to token-major dense blocks ``[*index.shape, 64, D]``.

        ``index``: int32 index map (any shape). Sparse entries are decompressed (pruned elements are
        zero). Where ``valid`` (bool, index's shape) is False the entry is not read and the block is
        zero. Raises ValueError for entries outside the pool (including ``NO_BLOCK``).
        """
        check_dtype(index, INDEX_DTYPE, "index")
        if valid is None:
            valid = torch.ones(index.shape, dtype=torch.bool, device=index.device)
        elif valid.shape != index.shape:
            raise ValueError(f"valid shape {list(valid.shape)} must equal index shape {list(index.shape)}")
        out = torch.zeros(*index.shape, BLOCK_SIZE, self.head_dim, dtype=self.dtype, device=self.dense.device)
        sparse = is_sparse(index)
        slots = slot_of(index)
        dense_sel, sparse_sel = valid & ~sparse, valid & sparse
        dense_slots, sparse_slots = slots[dense_sel], slots[sparse_sel]
        _check_slots(dense_slots, self.num_dense_slots, "dense")
        _check_slots(sparse_slots, self.num_sparse_slots, "sparse")
        out[dense_sel] = self.dense[dense_slots]
        if sparse_slots.numel():
            out[sparse_sel] = decompress_blocks(self.values[sparse_slots], self.meta[sparse_slots], self.operand)
        return out

    def nbytes(self) -> int:
        """Bytes held by the three pool tensors (all slots, used or not)."""
        return sum(t.numel() * t.element_size() for t in (self.dense, self.values, self.meta))

    def _check_blocks(self, blocks: torch.Tensor, slots: torch.Tensor, capacity: int) -> None:
        check_blocks(blocks, "blocks")
        if blocks.dtype != self.dtype:
            raise TypeError(f"blocks dtype {blocks.dtype} must equal pool dtype {self.dtype}")
        check_shape(blocks, (slots.shape[0] if slots.dim() == 1 else -1, BLOCK_SIZE, self.head_dim), "blocks")
        _check_slots(slots, capacity, "target")


def _check_slots(slots: torch.Tensor, capacity: int, kind: str) -> None:
    if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= capacity):
        raise ValueError(f"{kind} slot out of range [0, {capacity}): min {int(slots.min())}, max {int(slots.max())}")
