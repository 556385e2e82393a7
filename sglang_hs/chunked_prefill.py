"""SGLang's chunked prefill as hs reads it from ``ServerArgs``: the plugin sizes the pool's dense reserve and its
warning by it, the ``hs_prefill`` warm-up its prompt (a module of its own, so that ``plugin`` and ``warmup`` need not
import each other)."""

from __future__ import annotations


def prefill_chunk(server_args) -> int | None:
    """SGLang's prefill chunk in tokens; None when chunked prefill is off."""
    chunk = server_args.chunked_prefill_size
    return chunk if chunk and chunk > 0 else None
