"""A GGUF file as a Hugging Face checkpoint: dequantized once by transformers and cached as safetensors."""
import os
import shutil
import tempfile

from hs_prep.errors import PrepError


def cache_dir(name: str) -> str:
    base = os.environ.get("HS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hs")
    return os.path.join(base, name)


def gguf_checkpoint(gguf: str, target: str, dtype: str = "float32") -> str:
    """``target``, a safetensors checkpoint of the GGUF file's weights in ``dtype``, written (atomically) unless there."""
    if os.path.isfile(os.path.join(target, "config.json")):
        return target
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise PrepError("a GGUF model needs transformers, gguf and accelerate (pip install 'hierasparse-serving[hf]')") from None
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".partial-", dir=os.path.dirname(target))
    try:
        folder, name = os.path.split(os.path.abspath(gguf))
        try:
            AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(tmp)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
        except (ValueError, OSError, KeyError) as e:
            raise PrepError(f"{gguf}: transformers cannot read it as a causal LM ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        model.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not os.path.isfile(os.path.join(target, "config.json")):  # not a concurrent run's result
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
