"""The model families hs-prep supports, served by SGLang with hs (CPU, tiny random checkpoints converted by the real
hs-prep): at sparsity 0 it answers as stock SGLang does; sparse, a cached prefix answers as a cold one."""

import os

import pytest

pytest.importorskip("sglang")
pytest.importorskip("hs_prep")

from sglang_hs.testing import cpu_engine, flush_cache, prepare, tiny_model, use_cpu_placeholder  # noqa: E402

pytestmark = pytest.mark.slow

# case: (model_type, tiny_model arguments). Llama with 4 query heads per KV head is test_sglang_engine's; qwen2_moe:
# stock SGLang 0.5.17 runs its shared-expert gate through a Triton kernel even on CPU, so it cannot be served here.
FAMILIES = {"llama_mha": ("llama", {"kv_heads": 8}), "mistral": ("mistral", {}), "qwen2": ("qwen2", {}),
            "qwen3": ("qwen3", {}), "mixtral": ("mixtral", {"num_local_experts": 2, "num_experts_per_tok": 1}),
            "qwen3_moe": ("qwen3_moe", {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 256})}
PREFIX = "".join(f"item {i}: a long shared context about boats and trains. " for i in range(12))[:576]
QUESTIONS = ["What do the boats carry, and how far do the trains go each day? " * 5,
             "Which one is faster, and why would anybody pick the slower one? " * 5]
GREEDY = {"max_new_tokens": 10, "temperature": 0.0}
ZERO = {"prefill_sk": 0.0, "prefill_sv": 0.0, "decode_sk": 0.0, "decode_sv": 0.0}
SPARSE = {"retrieval_ratio": 0.5, "prefill_sk": 1.0, "prefill_sv": 1.0, "decode_sk": 1.0, "decode_sv": 1.0, "sink_tokens": 64,
          "window_tokens": 128, "stream_checkpoint": 256}


@pytest.fixture(scope="module")
def placeholder_log(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("ph") / "calls.log")
    use_cpu_placeholder(log)
    return log


def generate(model, hs_args, prompts, cold_again=False):
    """Greedy answers to ``prompts`` in order, then (``cold_again``) the last prompt again after a cache flush."""
    engine = cpu_engine(model, hs_args, max_total_tokens=8192,
                        **({} if hs_args is not None else {"attention_backend": "torch_native"}))
    try:
        out = [engine.generate(prompt, GREEDY) for prompt in prompts]
        if cold_again:
            flush_cache(engine)
            out.append(engine.generate(prompts[-1], GREEDY))
        return out
    finally:
        engine.shutdown()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_serves_with_hs(family, tmp_path, placeholder_log):
    model_type, arguments = FAMILIES[family]
    src = tiny_model(str(tmp_path / "src"), model_type, hidden=512, **arguments)
    dense, sparse = prepare(src, str(tmp_path / "r1"), 1.0), prepare(src, str(tmp_path / "r05"), 0.5)
    prompts = [PREFIX + q for q in QUESTIONS]

    stock = generate(dense, None, prompts[:1])
    zero = generate(dense, ZERO, prompts[:1])
    assert zero[0]["output_ids"] == stock[0]["output_ids"]

    _, cached, cold = generate(sparse, SPARSE, prompts, cold_again=True)
    assert cached["meta_info"]["cached_tokens"] >= 512 and cold["meta_info"]["cached_tokens"] == 0
    assert cached["output_ids"] == cold["output_ids"]
    assert not os.path.exists(placeholder_log), open(placeholder_log).read()
