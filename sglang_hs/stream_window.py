"""Checkpointed windows: which pages of a sequence keep streaming-group KV, and how far a match reuses.

Streaming groups attend to sink + the last W tokens only, so a page's streaming KV is worth keeping
only if some future query can see it:
  * sink pages (positions < sink), pinned;
  * the window before every checkpoint c = k * P (P = --hs-stream-checkpoint), so that a later
    request matching the prefix at any m can resume exactly at the largest stored c <= m;
  * the window before the sequence's end (its running window while it runs, and the window before
    its page-aligned end once cached, so an exact continuation reuses everything);
  * the window before a point where a match was cut back (requests branch there), and before each
    prompt's last page (HSKVPool.pin_window, from the radix cache).
Positions are token positions in the sequence; page j holds positions [64 j, 64 j + 64).
"""

from __future__ import annotations

import torch
from hs_kernels import BLOCK_SIZE


def keep_mask(num_tokens: int, sink: int, window: int, checkpoint: int) -> torch.Tensor:
    """bool ``[num_pages]``: pages (of a sequence of ``num_tokens``) whose streaming KV is kept."""
    num_pages = -(-num_tokens // BLOCK_SIZE)
    start = torch.arange(num_pages) * BLOCK_SIZE
    end = start + BLOCK_SIZE
    keep = start < sink
    cps = torch.tensor(range(checkpoint, num_tokens + 1, checkpoint), dtype=torch.long)
    if cps.numel():  # page overlaps [c - W, c) for some checkpoint c
        keep |= ((start[:, None] < cps[None]) & (end[:, None] > cps[None] - window)).any(1)
    aligned_end = num_tokens // BLOCK_SIZE * BLOCK_SIZE
    keep |= end > aligned_end - window  # window before the page-aligned end, and the tail
    return keep


def live_pages(first_query: int, num_tokens: int, window: int) -> slice:
    """Page range a sequence running queries from ``first_query`` to ``num_tokens`` reads (besides sinks)."""
    return slice(max(0, first_query - window) // BLOCK_SIZE, -(-num_tokens // BLOCK_SIZE))


def reusable_pages(stored: torch.Tensor, sink: int, window: int) -> int:
    """Largest c (in pages, <= len(stored)) such that sink pages and the window before c are stored.

    ``stored`` is a bool ``[m]`` per matched page. Resuming prefill at c is exact: the streaming
    groups of the recomputed queries see sink + [c - W, c) + the recomputed tokens.
    """
    m = stored.numel()
    if m == 0:
        return 0
    sink_pages = -(-sink // BLOCK_SIZE)
    window_pages = -(-window // BLOCK_SIZE)
    missing = torch.cat((torch.zeros(1, dtype=torch.long), torch.cumsum(~stored, 0)))
    c = torch.arange(1, m + 1)
    ok = (missing[c] - missing[(c - window_pages).clamp(min=0)]) == 0
    ok &= missing[c.clamp(max=sink_pages)] == 0
    hits = torch.nonzero(ok).flatten()
    return int(hits[-1]) + 1 if hits.numel() else 0
