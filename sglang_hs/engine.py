"""``sglang_hs.engine.create(model_path, hs_args=..., **sglang_kwargs)``: an in-process sglang.Engine with hs active."""

from __future__ import annotations

import json
import os

from .settings import ENV_ARGS


def create(model_path: str, hs_args: dict | None = None, **kwargs):
    """sglang.Engine with attention backend, radix cache and page size set for hs (overridable)."""
    os.environ[ENV_ARGS] = json.dumps(hs_args or {})
    from .launch_server import load_and_verify_plugin

    load_and_verify_plugin()
    import sglang

    kwargs.setdefault("attention_backend", "hs")
    kwargs.setdefault("page_size", 64)
    return sglang.Engine(model_path=model_path, **kwargs)
