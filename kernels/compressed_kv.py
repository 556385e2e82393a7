"""CompressedKV: one sequence's K and V of one layer in HieraSparse blocks (pools + index maps).

``compress_sequence`` is the whole pipeline in one call (block, prune, select, compress, index):
what a serving engine does after prefill, here into freshly allocated, exactly sized pools. Engines
with their own slot allocation use ``pruner.prune_blocks`` and ``BlockPool.store_*`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .format import (
    BLOCK_SIZE,
    check_head_dim,
    check_shape,
    check_value_dtype,
    num_blocks,
)
from .pool import BlockPool
from .pruner import MaskProducer, SparsityConfig, magnitude_mask, prune_blocks


@dataclass
class CompressedKV:
    """K and V of one sequence (one layer): pools and int32 index maps ``[H_kv, num_blocks]``."""

    k_pool: BlockPool
    v_pool: BlockPool
    k_index: torch.Tensor
    v_index: torch.Tensor
    num_tokens: int

    def nbytes(self) -> int:
        """Bytes of all pool tensors plus both index maps."""
        index_bytes = sum(t.numel() * t.element_size() for t in (self.k_index, self.v_index))
        return self.k_pool.nbytes() + self.v_pool.nbytes() + index_bytes

    def dense_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The tensors attention actually sees, ``[num_tokens, H_kv, D]`` each (pruned elements zero)."""
        k = self.k_pool.gather(self.k_index).flatten(1, 2)[:, : self.num_tokens].transpose(0, 1)
        v = self.v_pool.gather(self.v_index).flatten(1, 2)[:, : self.num_tokens].transpose(0, 1)
        return k, v


def to_blocks(x: torch.Tensor) -> torch.Tensor:
    """``[T, H_kv, D]`` -> token-major blocks ``[H_kv, ceil(T / 64), 64, D]`` (zero padded)."""
    t, h, d = x.shape
    nb = num_blocks(t)
    padded = x.new_zeros(nb * BLOCK_SIZE, h, d)
    padded[:t] = x
    return padded.reshape(nb, BLOCK_SIZE, h, d).permute(2, 0, 1, 3)


def compress_sequence(k: torch.Tensor, v: torch.Tensor, config: SparsityConfig = SparsityConfig(),
                      producer: MaskProducer = magnitude_mask) -> CompressedKV:
    """Compress one sequence's ``k, v [T, H_kv, D]`` (one layer) per ``config``.

    Slots are assigned in (head, block) order; dense and sparse slots count separately from 0
    (``BlockPool.holding``).
    """
    check_value_dtype(k, "k")
    check_value_dtype(v, "v")
    if k.dim() != 3 or k.shape[0] < 1:
        raise ValueError(f"k must have shape [tokens >= 1, H_kv, head_dim], got {list(k.shape)}")
    check_shape(v, tuple(k.shape), "v")
    if v.dtype != k.dtype:
        raise TypeError(f"v dtype {v.dtype} must equal k dtype {k.dtype}")
    check_head_dim(k.shape[-1])
    pools, indices = [], []
    for operand, x in (("k", k), ("v", v)):
        blocks = to_blocks(x)  # [H, nb, 64, D]
        sparse, mask = prune_blocks(blocks, operand, k.shape[0], config.sparsity(operand),
                                    config.sink_tokens, config.window_tokens, producer)
        pool, index = BlockPool.holding(operand, blocks, sparse, mask)
        pools.append(pool)
        indices.append(index)
    return CompressedKV(pools[0], pools[1], indices[0], indices[1], k.shape[0])
