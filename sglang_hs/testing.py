"""Tiny real checkpoints for tests and benchmarks: a random Llama with a byte-level tokenizer,
prepared by the real ``hs-prep convert``; and the environment a CPU SGLang run needs."""

from __future__ import annotations

import os
import subprocess
import sys

from .cpu_placeholder import PATH as PLACEHOLDER_PATH


def cpu_env(placeholder_log: str | None = None, **extra) -> dict:
    """Environment for SGLang on CPU with the sgl_kernel placeholder first on the path."""
    env = dict(os.environ)
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PLACEHOLDER_PATH, env.get("PYTHONPATH")) if p)
    if placeholder_log:
        env["SGLANG_HS_PLACEHOLDER_LOG"] = placeholder_log
    env.update(extra)
    return env


def use_cpu_placeholder(placeholder_log: str | None = None) -> None:
    """The same, for this process (its spawned SGLang workers inherit it)."""
    os.environ.update({k: v for k, v in cpu_env(placeholder_log).items() if k in ("SGLANG_USE_CPU_ENGINE", "PYTHONPATH", "SGLANG_HS_PLACEHOLDER_LOG")})
    if PLACEHOLDER_PATH not in sys.path:
        sys.path.insert(0, PLACEHOLDER_PATH)


def byte_tokenizer():
    """A byte-level BPE tokenizer without merges: one token per byte (256 + <s>, </s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_vocab = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<s>": 0, "</s>": 1, **{ch: i + 2 for i, ch in enumerate(sorted(byte_vocab))}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def tiny_model(out_dir: str, model_type: str = "llama", layers: int = 2, kv_heads: int = 4, heads: int = 8,
               hidden: int = 256, seed: int = 0, **config) -> str:
    """Random causal LM of ``model_type`` (a Hugging Face config name: llama, mistral, qwen2, qwen3, ...; head_dim 64,
    vocab 512, ``config`` extra) + byte tokenizer, saved as safetensors."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
                                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                                  head_dim=64, max_position_embeddings=8192, bos_token_id=0, eos_token_id=1,
                                  tie_word_embeddings=False, **config)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # larger random weights: logits far from ties, so greedy tokens are stable
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(2.0)
    model.save_pretrained(out_dir)
    byte_tokenizer().save_pretrained(out_dir)
    return out_dir


def prepare(src: str, out_dir: str, retrieval_ratio: float) -> str:
    """Run the real converter: ``hs-prep convert SRC --output OUT --retrieval-ratio R``."""
    return _convert([src], out_dir, retrieval_ratio)  # it copies the tokenizer files too


def prepare_embedded(out_dir: str, retrieval_ratio: float) -> str:
    """``hs-prep convert --output OUT --retrieval-ratio R`` on the embedded SmolLM2-135M-Instruct."""
    return _convert([], out_dir, retrieval_ratio)


def _convert(source: list[str], out_dir: str, retrieval_ratio: float) -> str:
    cmd = [sys.executable, "-c", "from hs_prep.cli import main; main()", "convert", *source, "--output", out_dir,
           "--retrieval-ratio", str(retrieval_ratio), "--overwrite"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:  # the converter's own message (a full disk, say) is what a failed setup must show
        raise RuntimeError(f"hs-prep convert exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return out_dir


ENGINE_DEFAULTS = dict(device="cpu", dtype="float32", mem_fraction_static=0.3, disable_cuda_graph=True,
                       log_level="error", sampling_backend="pytorch", grammar_backend="none")
# pass max_total_tokens: it caps the pool; the static fraction (0.05 failed SGLang's memory profile on a shared
# machine: "Loaded weights leave no ... memory for the KV cache") only bounds it from above


def cpu_engine(model: str, hs_args: dict | None = None, **kwargs):
    """sglang.Engine on CPU (ENGINE_DEFAULTS, overridable): stock SGLang if ``hs_args`` is None, else hs."""
    common = {**ENGINE_DEFAULTS, **kwargs}
    if hs_args is None:
        import sglang

        return sglang.Engine(model_path=model, **common)
    from .engine import create

    return create(model, hs_args=hs_args, **common)


def greedy_divergence(a: dict, b: dict) -> tuple[int | None, float, float]:
    """Compare two greedy ``generate`` results made with ``return_logprob=True, top_logprobs_num >= 2``.

    Returns (first output position where the token ids differ, or None; the largest difference of the
    chosen tokens' logprobs before it; the smaller top-1 minus top-2 logprob margin of the two runs at
    that position, inf if none). A real model in float32 may flip only where that margin is ~0.
    """
    ids_a, ids_b = a["output_ids"], b["output_ids"]
    lp_a, lp_b = a["meta_info"]["output_token_logprobs"], b["meta_info"]["output_token_logprobs"]
    n = min(len(ids_a), len(ids_b))
    first = next((i for i in range(n) if ids_a[i] != ids_b[i]), None if len(ids_a) == len(ids_b) else n)
    same = n if first is None else first
    diff = max((abs(lp_a[i][0] - lp_b[i][0]) for i in range(same)), default=0.0)
    margin = float("inf")
    if first is not None and first < n:
        for r in (a, b):
            top = sorted((t[0] for t in r["meta_info"]["output_top_logprobs"][first]), reverse=True)
            margin = min(margin, top[0] - top[1])
    return first, diff, margin


def small_pool(groups, s_k: float, s_v: float, pages: int, dense_reserve: float | None = 0.5, layers: int = 1,
               head_dim: int = 64, sink: int = 64, window: int = 128, auto_reserve_pages: int = 0,
               dtype=None, device: str = "cpu"):
    """An ``HSKVPool`` (default float32 on CPU; page 64, stream checkpoint 256) for unit tests: every layer
    split as ``groups`` (``LayerGroups``; a list: one per layer, ``layers`` ignored), the same sparsity for prefill and
    decode."""
    import torch
    from hs_kernels import SparsityConfig

    from .kv_pool import HSKVPool
    from .settings import HSSettings

    cfg = SparsityConfig(s_k, s_v, sink, window)
    per_layer = groups if isinstance(groups, list) else [groups] * layers
    h_kv = len(per_layer[0].retrieval) + len(per_layer[0].streaming)
    settings = HSSettings(prefill=cfg, decode=cfg, sink_tokens=sink, window_tokens=window, dense_reserve=dense_reserve,
                          recipe="test", stream_checkpoint=256, layers=per_layer, num_kv_heads=h_kv,
                          auto_reserve_pages=auto_reserve_pages)
    return HSKVPool(pages * 64, 64, dtype or torch.float32, h_kv, head_dim, len(per_layer), device, settings)


def flush_cache(engine, timeout_s: float = 60.0) -> None:
    """Flush the radix cache, retrying: SGLang refuses while a finished request is still being released."""
    import time

    deadline = time.monotonic() + timeout_s
    while not engine.flush_cache().success:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the radix cache could not be flushed within {timeout_s:.0f} s")
        time.sleep(0.2)
