"""Compressor and decompressor: 2:4 element masks to (values, int16 metadata) and back.

See ``hs_kernels.format`` for the layout. All functions are vectorized over every leading
dimension (no Python loops over tokens, groups or blocks) and bit exact: values are copied, never
computed, so ``decompress_blocks(*compress_blocks(x, m, op), op)`` equals ``torch.where(m, x, 0)``
bit for bit in every value dtype.
"""

from __future__ import annotations

import torch

from .format import (
    ELEMS_PER_META,
    GROUP,
    KEEP,
    META_DTYPE,
    check_blocks,
    check_dtype,
    check_head_dim,
    check_operand,
    check_value_dtype,
    from_operand_layout,
    to_operand_layout,
)

_NIBBLES_PER_META = ELEMS_PER_META // GROUP
_NIBBLE_SHIFTS = torch.arange(_NIBBLES_PER_META) * 4  # nibble j at bits 4j..4j+3


def kept_positions(mask: torch.Tensor) -> torch.Tensor:
    """In-group positions ``[..., R // 4, 2]`` (idx0 < idx1, int64) of a 2:4 mask ``[..., R]`` (last dim).

    Raises ValueError unless every group of 4 along the last dim has exactly 2 True entries.
    """
    groups = mask.reshape(*mask.shape[:-1], mask.shape[-1] // GROUP, GROUP)
    counts = groups.sum(-1)
    if not bool((counts == KEEP).all()):
        raise ValueError("mask must keep exactly 2 of every 4 consecutive elements along the 2:4 axis")
    # positions of the kept entries, ascending: sort (not kept, position) and take the first two
    order = torch.argsort((~groups).to(torch.int8), dim=-1, stable=True)
    return order[..., :KEEP]


def pack_meta(positions: torch.Tensor) -> torch.Tensor:
    """Pack in-group positions ``[..., R // 4, 2]`` into int16 metadata ``[..., R // 16]``."""
    nibbles = positions[..., 0] | (positions[..., 1] << 2)  # [..., R//4]
    nibbles = nibbles.reshape(*nibbles.shape[:-1], nibbles.shape[-1] // _NIBBLES_PER_META, _NIBBLES_PER_META)
    words = (nibbles << _NIBBLE_SHIFTS.to(nibbles.device)).sum(-1)  # 0 .. 65535
    words = torch.where(words >= 2**15, words - 2**16, words)  # two's complement wrap
    return words.to(META_DTYPE)


def unpack_meta(meta: torch.Tensor) -> torch.Tensor:
    """Unpack int16 metadata ``[..., R // 16]`` into in-group positions ``[..., R // 4, 2]`` (int64)."""
    words = meta.long() & 0xFFFF
    nibbles = (words.unsqueeze(-1) >> _NIBBLE_SHIFTS.to(meta.device)) & 0xF  # [..., R//16, 4]
    nibbles = nibbles.reshape(*meta.shape[:-1], meta.shape[-1] * _NIBBLES_PER_META)
    return torch.stack((nibbles & 0x3, nibbles >> 2), dim=-1)


def compress_24(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """2:4-compress ``x [..., R]`` along the last dim with ``mask`` (bool, same shape, 2 of every 4).

    Returns ``values [..., R // 2]`` (x's dtype) and ``meta [..., R // 16]`` int16, natural layout.
    """
    check_value_dtype(x, "x")
    check_dtype(mask, torch.bool, "mask")
    if mask.shape != x.shape:
        raise ValueError(f"mask shape {list(mask.shape)} must equal x shape {list(x.shape)}")
    if x.dim() < 1 or x.shape[-1] % ELEMS_PER_META:
        raise ValueError(f"last dim of x must be a multiple of {ELEMS_PER_META}, got shape {list(x.shape)}")
    positions = kept_positions(mask)
    groups = x.reshape(*x.shape[:-1], x.shape[-1] // GROUP, GROUP)
    values = torch.gather(groups, -1, positions).reshape(*x.shape[:-1], x.shape[-1] // 2)
    return values, pack_meta(positions)


def decompress_24(values: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """Inverse of ``compress_24``: ``values [..., R // 2]``, ``meta [..., R // 16]`` -> dense ``[..., R]``."""
    check_value_dtype(values, "values")
    check_dtype(meta, META_DTYPE, "meta")
    if values.shape[:-1] != meta.shape[:-1] or values.shape[-1] != meta.shape[-1] * (ELEMS_PER_META // KEEP):
        raise ValueError(f"values {list(values.shape)} and meta {list(meta.shape)} do not describe the same 2:4 rows")
    positions = unpack_meta(meta)  # [..., R//4, 2]
    out = torch.zeros(*positions.shape[:-1], GROUP, dtype=values.dtype, device=values.device)
    out.scatter_(-1, positions, values.reshape(positions.shape))
    return out.reshape(*values.shape[:-1], values.shape[-1] * 2)


def compress_blocks(blocks: torch.Tensor, mask: torch.Tensor, operand: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Compress token-major blocks ``[N, 64, D]`` of ``operand`` with a token-major 2:4 mask.

    ``mask`` is bool ``[N, 64, D]``; for K it keeps 2 of every 4 channels per token, for V 2 of every
    4 tokens (rows 4g..4g+3) per channel. Returns ``(values, meta)`` with the per-slot shapes of
    ``format.sparse_shapes(operand, D)``: K ``[N, 64, D/2]``, ``[N, 64, D/16]``; V ``[N, D, 32]``,
    ``[N, D, 4]``.
    """
    check_operand(operand)
    check_blocks(blocks, "blocks")
    if mask.shape != blocks.shape:
        raise ValueError(f"mask shape {list(mask.shape)} must equal blocks shape {list(blocks.shape)}")
    return compress_24(to_operand_layout(blocks, operand), to_operand_layout(mask, operand))


def decompress_blocks(values: torch.Tensor, meta: torch.Tensor, operand: str) -> torch.Tensor:
    """Inverse of ``compress_blocks``: token-major dense blocks ``[N, 64, D]`` (pruned entries zero)."""
    check_operand(operand)
    dense = from_operand_layout(decompress_24(values, meta), operand)
    check_head_dim(dense.shape[-1])
    return dense.contiguous() if operand == "v" else dense
