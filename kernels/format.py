"""The HieraSparse KV block format: the one written spec (shapes and dtypes are named here once).

Everything below is per layer. ``D`` is head_dim (64, 128 or 256), ``H_kv`` the number of KV
groups (KV heads), ``H_q`` the number of query heads (a multiple of H_kv), ``B = BLOCK_SIZE``.

Blocks
    A block is ``BLOCK_SIZE = 64`` consecutive tokens of one KV head (one SGLang page).
    Token ``t`` of a sequence lives in block ``t // 64`` at row ``t % 64``. Public block tensors are
    always *token-major*: ``[..., 64, D]`` (the way K and V come out of the projection).

Dense blocks
    stored as they are: pool tensor ``dense`` of shape ``[num_dense_slots, 64, D]``, value dtype.

Sparse blocks (2:4, "natural" metadata layout)
    The sparse operand of each GEMM is compressed 2:4 along its reduction axis:
      * K is the sparse operand of S^T = K Q^T: 2:4 along head_dim, per token.
        Operand layout = the block itself ``[64, D]``; groups of 4 are 4 consecutive channels.
      * V^T is the sparse operand of O^T = V^T P^T: 2:4 along tokens, per channel.
        Operand layout = the transposed block ``[D, 64]``; groups of 4 are 4 consecutive tokens.
    For an operand row of length ``R`` (R = D for K, R = 64 for V) with 2 kept elements per group:
      * values: ``[R // 2]``, the kept elements of group g at positions 2g (lower index) and
        2g + 1 (higher index), in the value dtype;
      * metadata: ``[R // 16]`` int16. Group g has nibble ``idx0 | (idx1 << 2)`` with
        ``0 <= idx0 < idx1 <= 3`` the in-group positions of the kept elements. Four nibbles per
        int16, little-endian: bits ``4j .. 4j+3`` of metadata element ``m`` hold the nibble of group
        ``4m + j`` (so one int16 covers 16 consecutive operand elements). Values that do not fit a
        signed int16 wrap (bit pattern is what matters).
    Pool tensors for sparse blocks:
      K: ``values [num_sparse_slots, 64, D // 2]``, ``meta [num_sparse_slots, 64, D // 16]``
      V: ``values [num_sparse_slots, D, 32]``,    ``meta [num_sparse_slots, D, 4]``
    This is the layout of TileLang's ``compress``/``torch_compress`` and of mma.sp / wgmma.sp
    metadata in global memory (no CUTLASS re-layout).

Index map
    signed int32, one entry per (KV head, block) of a sequence: ``[H_kv, num_blocks]`` (or
    ``[batch, H_kv, max_blocks]``). K and V have separate index maps (their dense/sparse decisions
    are independent).
      * entry ``e >= 0``: dense block in dense pool slot ``e``;
      * entry ``e < 0``:  sparse block in sparse pool slot ``~e == -e - 1``.
    So dense slot 0 is ``0`` and sparse slot 0 is ``-1``: no value means both, and a zero-filled map
    never points at a sparse slot. ``NO_BLOCK`` (int32 min, i.e. sparse slot 2**31 - 1, beyond any
    pool) marks an unallocated entry; resolving it raises.
    Pool slots are shared by all KV heads of a layer: any slot may hold any head's block.

Values and dtypes
    value dtype: float16, bfloat16 or float32 (the same 2:4 format for all three; float32 is for
    reference and tests). Metadata int16, index map int32. Attention accumulates in float32.
"""

from __future__ import annotations

import torch

BLOCK_SIZE = 64
"""Tokens per block (= SGLang page size)."""
GROUP = 4
"""2:4 group size along the reduction axis."""
KEEP = 2
"""Kept elements per group."""
ELEMS_PER_META = 16
"""Operand elements covered by one int16 metadata element (4 groups x 4)."""
META_DTYPE = torch.int16
INDEX_DTYPE = torch.int32
VALUE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (64, 128, 256)
NO_BLOCK = -(2**31)
"""Index map entry of an unallocated block (never a valid slot)."""

DEFAULT_SINK_TOKENS = 64
DEFAULT_WINDOW_TOKENS = 256

OPERANDS = ("k", "v")


def encode_dense(slot: torch.Tensor | int):
    """Index map entry for dense pool slot ``slot`` (>= 0): the slot itself."""
    return slot


def encode_sparse(slot: torch.Tensor | int):
    """Index map entry for sparse pool slot ``slot`` (>= 0): ``~slot`` (= -slot - 1, always < 0)."""
    return ~slot


def is_sparse(index: torch.Tensor) -> torch.Tensor:
    """Bool tensor: which index map entries point into the sparse pool."""
    return index < 0


def slot_of(index: torch.Tensor) -> torch.Tensor:
    """Pool slot of each index map entry (dense or sparse, see ``is_sparse``), int64."""
    index = index.long()
    return torch.where(index < 0, ~index, index)


def new_index_map(*shape: int, device=None) -> torch.Tensor:
    """An index map of ``shape`` (e.g. ``(H_kv, num_blocks)``) with every entry ``NO_BLOCK``."""
    return torch.full(shape, NO_BLOCK, dtype=INDEX_DTYPE, device=device)


def num_blocks(num_tokens: int) -> int:
    """Blocks needed for ``num_tokens`` tokens (the last one may be partial)."""
    return -(-num_tokens // BLOCK_SIZE)


def sparse_shapes(operand: str, head_dim: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Per-slot shapes ``(values_shape, meta_shape)`` of a sparse block of ``operand`` ("k"/"v")."""
    check_operand(operand)
    check_head_dim(head_dim)
    rows, row_len = (BLOCK_SIZE, head_dim) if operand == "k" else (head_dim, BLOCK_SIZE)
    return (rows, row_len // KEEP), (rows, row_len // ELEMS_PER_META)


def to_operand_layout(blocks: torch.Tensor, operand: str) -> torch.Tensor:
    """Token-major blocks ``[..., 64, D]`` to operand layout: K unchanged, V transposed to ``[..., D, 64]``."""
    check_operand(operand)
    return blocks if operand == "k" else blocks.transpose(-1, -2)


def from_operand_layout(x: torch.Tensor, operand: str) -> torch.Tensor:
    """Inverse of ``to_operand_layout``."""
    return to_operand_layout(x, operand)


# ---- validation (one-line messages; ValueError for shapes/values, TypeError for dtypes) ----

def check_operand(operand: str) -> None:
    if operand not in OPERANDS:
        raise ValueError(f"operand must be 'k' or 'v', got {operand!r}")


def check_head_dim(head_dim: int) -> None:
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim}")


def check_value_dtype(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in VALUE_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got {x.dtype}")


def check_dtype(x: torch.Tensor, dtype: torch.dtype, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {x.dtype}")


def check_blocks(blocks: torch.Tensor, name: str) -> int:
    """Check token-major blocks ``[..., 64, D]`` of a value dtype; return D."""
    check_value_dtype(blocks, name)
    if blocks.dim() < 2 or blocks.shape[-2] != BLOCK_SIZE:
        raise ValueError(f"{name} must have shape [..., {BLOCK_SIZE}, head_dim], got {tuple(blocks.shape)}")
    check_head_dim(blocks.shape[-1])
    return blocks.shape[-1]


def check_shape(x: torch.Tensor, shape: tuple, name: str) -> None:
    """``shape`` may hold None for a free dimension."""
    if x.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, x.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {want}, got {list(x.shape)}")
