"""Per-model-family serving defaults (JSON data): retrieval ratio, S_K/S_V for prefill and decode, sink/window."""
