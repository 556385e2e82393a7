"""SGLang extension serving AoH-prepared models with a HieraSparse KV cache."""
