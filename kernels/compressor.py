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


def _lookup_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """code (bit i set = element i of the group kept) <-> nibble ``idx0 | idx1 << 2``; -1 / 0 if invalid."""
    code_to_nibble = torch.full((16,), -1, dtype=torch.int64)
    nibble_to_code = torch.zeros(16, dtype=torch.int64)
    for idx0 in range(GROUP):
        for idx1 in range(idx0 + 1, GROUP):
            code, nibble = (1 << idx0) | (1 << idx1), idx0 | (idx1 << 2)
            code_to_nibble[code] = nibble
            nibble_to_code[nibble] = code
    return code_to_nibble, nibble_to_code


_CODE_TO_NIBBLE, _NIBBLE_TO_CODE = _lookup_tables()


def mask_to_nibbles(mask: torch.Tensor) -> torch.Tensor:
    """2:4 mask ``[..., R]`` (bool, along the last dim) -> nibbles ``idx0 | idx1 << 2``, ``[..., R // 4]`` int64.

    Raises ValueError unless every group of 4 along the last dim has exactly 2 True entries.
    """
    u = mask.reshape(*mask.shape[:-1], mask.shape[-1] // GROUP, GROUP).to(torch.uint8)
    code = u[..., 0] | (u[..., 1] << 1) | (u[..., 2] << 2) | (u[..., 3] << 3)
    nibbles = _CODE_TO_NIBBLE.to(mask.device)[code.long()]
    if nibbles.numel() and int(nibbles.min()) < 0:
        raise ValueError("mask must keep exactly 2 of every 4 consecutive elements along the 2:4 axis")
    return nibbles


def nibbles_to_mask(nibbles: torch.Tensor) -> torch.Tensor:
    """Inverse of ``mask_to_nibbles``: ``[..., G]`` nibbles -> bool ``[..., 4 G]``; ValueError if idx0 >= idx1."""
    code = _NIBBLE_TO_CODE.to(nibbles.device)[nibbles.long()]
    if code.numel() and int(code.min()) == 0:
        raise ValueError("corrupt 2:4 metadata: a nibble has idx0 >= idx1")
    bits = (code.unsqueeze(-1) >> torch.arange(GROUP, device=code.device)) & 1
    return bits.bool().reshape(*nibbles.shape[:-1], nibbles.shape[-1] * GROUP)


def pack_nibbles(nibbles: torch.Tensor) -> torch.Tensor:
    """Nibbles ``[..., R // 4]`` -> int16 metadata ``[..., R // 16]``: nibble j of a word at bits 4j..4j+3."""
    n = nibbles.reshape(*nibbles.shape[:-1], nibbles.shape[-1] // _NIBBLES_PER_META, _NIBBLES_PER_META).int()
    words = n[..., 0] | (n[..., 1] << 4) | (n[..., 2] << 8) | (n[..., 3] << 12)  # 0 .. 65535
    return torch.where(words >= 2**15, words - 2**16, words).to(META_DTYPE)  # two's complement wrap


def unpack_nibbles(meta: torch.Tensor) -> torch.Tensor:
    """Int16 metadata ``[..., R // 16]`` -> nibbles ``[..., R // 4]`` (int64)."""
    words = meta.long() & 0xFFFF
    nibbles = (words.unsqueeze(-1) >> (torch.arange(_NIBBLES_PER_META, device=meta.device) * 4)) & 0xF
    return nibbles.reshape(*meta.shape[:-1], meta.shape[-1] * _NIBBLES_PER_META)


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
    meta = pack_nibbles(mask_to_nibbles(mask))
    # kept elements in row-major order = (group, idx0), (group, idx1), ...: exactly the values layout
    values = torch.masked_select(x, mask).reshape(*x.shape[:-1], x.shape[-1] // KEEP)
    return values, meta


def decompress_24(values: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """Inverse of ``compress_24``: ``values [..., R // 2]``, ``meta [..., R // 16]`` -> dense ``[..., R]``."""
    check_value_dtype(values, "values")
    check_dtype(meta, META_DTYPE, "meta")
    if values.shape[:-1] != meta.shape[:-1] or values.shape[-1] != meta.shape[-1] * (ELEMS_PER_META // KEEP):
        raise ValueError(f"values {list(values.shape)} and meta {list(meta.shape)} do not describe the same 2:4 rows")
    mask = nibbles_to_mask(unpack_nibbles(meta))
    out = torch.zeros(mask.shape, dtype=values.dtype, device=values.device)
    return out.masked_scatter_(mask, values)


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
