"""Hierarchical cache pruner (paper eq. 2): element-level 2:4 masks, per-block loss, block selection.

Mask producer (pluggable)
    ``MaskProducer = Callable[[Tensor], Tensor]``: takes a tensor in *operand layout* (the last dim
    is the 2:4 axis: ``[..., 64, D]`` for K, ``[..., D, 64]`` for V) and returns a bool mask of the
    same shape keeping exactly 2 of every 4 consecutive elements along the last dim. The default is
    ``magnitude_mask``; a channel-mask method (ThinK, LeanK, ...) is just another producer. The
    compressor never sees the producer, only the mask.

Block selection
    Per (layer, KV head): blocks that touch a sink token (``t < sink_tokens``) or the local window
    (``t >= num_tokens - window_tokens``), and a partial last block, stay dense; they are not
    *eligible*. Of the ``n`` eligible blocks, exactly ``round_half_up(S * n)`` with the lowest loss
    become sparse; equal losses are broken by block index (lower index first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .format import (
    BLOCK_SIZE,
    DEFAULT_SINK_TOKENS,
    DEFAULT_WINDOW_TOKENS,
    GROUP,
    KEEP,
    check_blocks,
    check_dtype,
    check_operand,
    from_operand_layout,
    num_blocks,
    to_operand_layout,
)

MaskProducer = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SparsityConfig:
    """Target block sparsity for K and V and the dense sink / local window, in tokens.

    ``s_k``/``s_v`` in [0, 1] are fractions of the *eligible* blocks (outside sink and window) that
    become sparse. Prefill and decode may use different configs.
    """

    s_k: float = 0.0
    s_v: float = 0.0
    sink_tokens: int = DEFAULT_SINK_TOKENS
    window_tokens: int = DEFAULT_WINDOW_TOKENS

    def __post_init__(self):
        for name in ("s_k", "s_v"):
            s = getattr(self, name)
            if not isinstance(s, (int, float)) or not 0.0 <= s <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {s!r}")
        for name in ("sink_tokens", "window_tokens"):
            n = getattr(self, name)
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"{name} must be an int >= 0, got {n!r}")

    def sparsity(self, operand: str) -> float:
        check_operand(operand)
        return self.s_k if operand == "k" else self.s_v


def magnitude_mask(x: torch.Tensor) -> torch.Tensor:
    """Keep the 2 largest-magnitude elements of every 4 along the last dim (paper eq. 2a-2b).

    Ties are broken by position (the lower index is kept); NaN counts as the largest magnitude, tied
    with +-inf (integer bit patterns clamped at inf, as the GPU kernels compare them).
    Returns a bool tensor of x's shape.
    """
    if x.dim() < 1 or x.shape[-1] % GROUP:
        raise ValueError(f"last dim must be a multiple of {GROUP}, got shape {list(x.shape)}")
    a = x.reshape(*x.shape[:-1], x.shape[-1] // GROUP, GROUP).abs().nan_to_num(nan=float("inf"), posinf=float("inf"))
    a0, a1, a2, a3 = a.unbind(-1)
    # i beats j (i < j) when |x_i| >= |x_j|: ties go to the lower index; rank = number of elements beating it
    b01, b02, b03, b12, b13, b23 = a0 >= a1, a0 >= a2, a0 >= a3, a1 >= a2, a1 >= a3, a2 >= a3
    rank = torch.stack((
        3 - (b01.byte() + b02.byte() + b03.byte()),
        b01.byte() + 2 - (b12.byte() + b13.byte()),
        b02.byte() + b12.byte() + 1 - b23.byte(),
        b03.byte() + b13.byte() + b23.byte(),
    ), dim=-1)
    return (rank < KEEP).reshape(x.shape)


def element_mask(blocks: torch.Tensor, operand: str, producer: MaskProducer = magnitude_mask) -> torch.Tensor:
    """2:4 element mask for token-major blocks ``[..., 64, D]`` of ``operand``; token-major bool result."""
    check_operand(operand)
    check_blocks(blocks, "blocks")
    mask = producer(to_operand_layout(blocks, operand))
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError("mask producer must return a bool tensor")
    mask = from_operand_layout(mask, operand)
    if mask.shape != blocks.shape:
        raise ValueError(f"mask producer returned shape {list(mask.shape)}, expected {list(blocks.shape)}")
    return mask


def block_loss(blocks: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-block L1 norm of the pruned elements (paper eq. 2c), float32: ``[..., 64, D]`` -> ``[...]``."""
    check_blocks(blocks, "blocks")
    check_dtype(mask, torch.bool, "mask")
    if mask.shape != blocks.shape:
        raise ValueError(f"mask shape {list(mask.shape)} must equal blocks shape {list(blocks.shape)}")
    pruned = torch.where(mask, torch.zeros((), dtype=blocks.dtype, device=blocks.device), blocks)
    return pruned.float().abs().sum(dim=(-1, -2))


def eligible_range(num_tokens: int, sink_tokens: int, window_tokens: int) -> tuple[int, int]:
    """``(first, stop)``: the blocks that may become sparse (outside sink and window, full) are ``first <= j <
    stop`` (none when ``stop <= first``), on the host (no device sync)."""
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    return -(-sink_tokens // BLOCK_SIZE), min((num_tokens - window_tokens) // BLOCK_SIZE, num_tokens // BLOCK_SIZE)


def eligible_blocks(num_tokens: int, sink_tokens: int, window_tokens: int, device=None) -> torch.Tensor:
    """Bool ``[num_blocks(num_tokens)]``: ``eligible_range`` as a mask."""
    first, stop = eligible_range(num_tokens, sink_tokens, window_tokens)
    j = torch.arange(num_blocks(num_tokens), device=device)
    return (j >= first) & (j < stop)


def num_eligible_blocks(num_tokens: int, sink_tokens: int, window_tokens: int) -> int:
    """``int(eligible_blocks(...).sum())`` computed on the host (no device sync)."""
    first, stop = eligible_range(num_tokens, sink_tokens, window_tokens)
    return max(0, stop - first)


def num_sparse_blocks(num_eligible: int, sparsity: float) -> int:
    """How many of ``num_eligible`` blocks become sparse at ``sparsity``: round half up of S * n."""
    return min(num_eligible, math.floor(sparsity * num_eligible + 0.5))


def select_sparse_blocks(loss: torch.Tensor, num_tokens: int, sparsity: float,
                         sink_tokens: int = DEFAULT_SINK_TOKENS,
                         window_tokens: int = DEFAULT_WINDOW_TOKENS) -> torch.Tensor:
    """Block-level mask (paper eq. 2d): True where a block becomes sparse.

    ``loss``: float ``[..., num_blocks]`` (e.g. ``[H_kv, nb]``), one row per KV head, with
    ``nb == num_blocks(num_tokens)``. Every row gets exactly ``num_sparse_blocks(n_eligible, S)``
    sparse blocks, the lowest-loss eligible ones, ties to the lower block index.
    """
    if loss.dim() < 1 or loss.shape[-1] != num_blocks(num_tokens):
        raise ValueError(f"loss must have shape [..., {num_blocks(num_tokens)}] for {num_tokens} tokens, got {list(loss.shape)}")
    if not 0.0 <= sparsity <= 1.0:
        raise ValueError(f"sparsity must be in [0, 1], got {sparsity}")
    eligible = eligible_blocks(num_tokens, sink_tokens, window_tokens, loss.device)
    k = num_sparse_blocks(num_eligible_blocks(num_tokens, sink_tokens, window_tokens), sparsity)
    # order by (not eligible, loss, index): stable sorts, least significant key first
    order = torch.argsort(loss.float(), dim=-1, stable=True)
    order = torch.gather(order, -1, torch.argsort((~eligible)[order].to(torch.int8), dim=-1, stable=True))
    chosen = torch.zeros(loss.shape, dtype=torch.bool, device=loss.device)
    chosen.scatter_(-1, order[..., :k], True)
    return chosen


def loss_free_selection(num_tokens: int, sparsity: float, sink_tokens: int = DEFAULT_SINK_TOKENS,
                        window_tokens: int = DEFAULT_WINDOW_TOKENS, device=None) -> torch.Tensor | None:
    """``select_sparse_blocks``' result for every row, bool ``[num_blocks(num_tokens)]``, where it does not
    depend on the loss (S = 0: no block; S = 1: every eligible one), so callers can skip computing the
    loss; else None."""
    if sparsity == 0.0:
        return torch.zeros(num_blocks(num_tokens), dtype=torch.bool, device=device)
    if sparsity == 1.0:
        return eligible_blocks(num_tokens, sink_tokens, window_tokens, device)
    return None


def prune_blocks(blocks: torch.Tensor, operand: str, num_tokens: int, sparsity: float,
                 sink_tokens: int = DEFAULT_SINK_TOKENS, window_tokens: int = DEFAULT_WINDOW_TOKENS,
                 producer: MaskProducer = magnitude_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Both levels of the hierarchical pruner for one operand of one sequence and layer.

    blocks: token-major ``[H_kv, nb, 64, D]`` with ``nb == num_blocks(num_tokens)`` (rows past
    ``num_tokens`` in the last block are ignored: that block is never sparse).
    Returns ``(sparse [H_kv, nb] bool, mask [H_kv, nb, 64, D] bool)``: which blocks become sparse, and
    the 2:4 element mask to compress them with (``BlockPool.store_sparse(slots, blocks[sparse],
    mask[sparse])``).
    """
    check_blocks(blocks, "blocks")
    if blocks.dim() != 4:
        raise ValueError(f"blocks must have shape [H_kv, num_blocks, {BLOCK_SIZE}, head_dim], got {list(blocks.shape)}")
    mask = element_mask(blocks, operand, producer)
    loss = block_loss(blocks, mask)
    return select_sparse_blocks(loss, num_tokens, sparsity, sink_tokens, window_tokens), mask
