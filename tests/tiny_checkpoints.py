"""Tiny random Hugging Face checkpoints of every architecture hs-prep supports, made on the fly."""
import json
import os

import torch

ARCHITECTURES = {
    # name: (config class name, extra config)
    "llama": ("LlamaConfig", {}),
    "llama_mha": ("LlamaConfig", {"num_key_value_heads": 8}),
    "mistral": ("MistralConfig", {}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 2, "num_experts_per_tok": 1}),
    "qwen2": ("Qwen2Config", {}),  # q/k/v biases
    "qwen2_moe": ("Qwen2MoeConfig", {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
                                     "shared_expert_intermediate_size": 32}),
    "qwen3": ("Qwen3Config", {"head_dim": 16}),  # q_norm / k_norm
    "qwen3_moe": ("Qwen3MoeConfig", {"head_dim": 16, "num_experts": 2, "num_experts_per_tok": 1,
                                     "moe_intermediate_size": 32}),
}


def make_checkpoint(path: str, arch: str = "llama", dtype=torch.float32, shard_size: str | None = "100KB",
                    seed: int = 0, **overrides) -> str:
    """Save a randomly initialised 2-layer model (8 query heads, 4 KV groups unless overridden)."""
    import transformers

    class_name, extra = ARCHITECTURES[arch]
    settings = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                    tie_word_embeddings=False)
    settings.update(extra)
    settings.update(overrides)
    config = getattr(transformers, class_name)(**settings)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    with torch.no_grad():  # larger than the default init so that heads differ clearly in rank
        for name, p in model.named_parameters():
            if "self_attn" in name and "norm" not in name:
                p.normal_(0, 0.3 if "bias" in name else 0.2)
    model.save_pretrained(path, max_shard_size=shard_size) if shard_size else model.save_pretrained(path)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 256}, f)
    return path
