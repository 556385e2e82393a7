"""write_tokens: new tokens' K and V into paged storage, by slot tables (the reference; ``gpu.write_tokens`` runs
the Triton kernel ``triton_store`` on CUDA).

A token at location ``loc`` lies on page ``loc // 64``, row ``loc % 64``. The i-th of the listed ``heads`` of a
token goes to ``dest[slot, row, e]`` where ``slot = slots[page, i]`` (or ``slots[page, 0]`` for a one-column table:
one slot for all heads) and ``e = i`` (or 0 for a one-wide destination: a slot per head). Block pools (a dense slot
per head and page, through the index map) are ``slots = index [P, n]``, ``dest = dense[:, :, None]``; page-slot
storage (one slot holds a page of every head) is ``slots = page_slot[:, None]``, ``dest [S, 64, n, D]``.
A negative slot (no dense block, no slot) is not written: it sets ``errors[0]`` to 1 when ``errors`` is given, else
raises RuntimeError (on CUDA a device-side assert: no host sync).
"""

from __future__ import annotations

import torch

from .format import BLOCK_SIZE


def check_write(k: torch.Tensor, v: torch.Tensor, locs: torch.Tensor, heads: torch.Tensor, k_slots: torch.Tensor,
                v_slots: torch.Tensor, k_dest: torch.Tensor, v_dest: torch.Tensor) -> None:
    t, _, d = k.shape
    n = heads.shape[0]
    if v.shape != k.shape or locs.shape != (t,) or heads.dim() != 1:
        raise ValueError(f"k, v must be [T, H, D] alike, locs [T], heads [n]; got {list(k.shape)}, {list(v.shape)}, "
                         f"{list(locs.shape)}, {list(heads.shape)}")
    for name, s in (("k_slots", k_slots), ("v_slots", v_slots)):
        if s.dim() != 2 or s.shape[1] not in (1, n) or s.dtype.is_floating_point:
            raise ValueError(f"{name} must be an integer [pages, {n} or 1] table, got {s.dtype} {list(s.shape)}")
    for name, x in (("k_dest", k_dest), ("v_dest", v_dest)):
        if x.dim() != 4 or x.shape[1] != BLOCK_SIZE or x.shape[2] not in (1, n) or x.shape[3] != d:
            raise ValueError(f"{name} must be [slots, {BLOCK_SIZE}, {n} or 1, {d}], got {list(x.shape)}")


def write_tokens(k: torch.Tensor, v: torch.Tensor, locs: torch.Tensor, heads: torch.Tensor, k_slots: torch.Tensor,
                 v_slots: torch.Tensor, k_dest: torch.Tensor, v_dest: torch.Tensor,
                 errors: torch.Tensor | None = None) -> None:
    """See the module docstring. k, v ``[T, H, D]``; locs ``[T]``; heads ``[n]``; slot tables ``[P, n or 1]``;
    destinations ``[S, 64, n or 1, D]``; errors int32 ``[1]`` or None."""
    check_write(k, v, locs, heads, k_slots, v_slots, k_dest, v_dest)
    n = heads.shape[0]
    if locs.numel() == 0 or n == 0:
        return
    pages, rows = locs.long() // BLOCK_SIZE, (locs.long() % BLOCK_SIZE)[:, None]
    heads = heads.long()
    for x, slots, dest in ((k, k_slots, k_dest), (v, v_slots, v_dest)):
        slot = slots[pages].long().expand(-1, n)  # [T, n]
        ok = slot >= 0
        if errors is not None:
            errors.copy_(torch.maximum(errors, (~ok).any().to(errors.dtype)))
        elif ok.is_cuda:
            torch._assert_async(ok.all(), "write_tokens: a token's page has no slot (negative slot table entry)")
        elif not bool(ok.all()):
            raise RuntimeError("write_tokens: a token's page has no slot (negative slot table entry)")
        e = torch.arange(n, device=slot.device) if dest.shape[2] > 1 else torch.zeros(n, dtype=torch.long, device=slot.device)
        values = x[:, heads].to(dest.dtype)
        dest[slot[ok], rows.expand(-1, n)[ok], e.expand_as(slot)[ok]] = values[ok]
