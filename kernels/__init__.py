"""HieraSparse KV block format, reference attention and GPU kernels."""
