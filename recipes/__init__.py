"""Serving settings as JSON data (retrieval ratio, S_K/S_V for prefill and decode, sink/window): conservative.json is
what an uncalibrated checkpoint is served with (measured: docs/quality.md)."""
