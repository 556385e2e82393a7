"""Which checkpoints hs-prep understands, and the attention geometry it reads from config.json."""
import re
from dataclasses import dataclass

from hs_prep.errors import PrepError

# model_type -> family (the recipe name). MoE variants share the dense attention layout.
SUPPORTED_MODEL_TYPES = {
    "llama": "llama",
    "mistral": "mistral",
    "mixtral": "mistral",
    "qwen2": "qwen2",
    "qwen2_moe": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
}

ATTENTION_TENSOR = re.compile(
    r"^(?P<prefix>(?:.*\.)?layers)\.(?P<layer>\d+)\.self_attn\.(?P<proj>q_proj|k_proj|v_proj|o_proj)\.(?P<kind>weight|bias)$"
)


@dataclass(frozen=True)
class AttentionGeometry:
    model_type: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    rope_theta: float
    rope_scaling: dict | None

    @property
    def family(self) -> str:
        return SUPPORTED_MODEL_TYPES[self.model_type]

    @property
    def heads_per_group(self) -> int:
        return self.num_heads // self.num_kv_heads

    def expected_shape(self, proj: str, kind: str) -> tuple[int, ...]:
        rows = {"q_proj": self.num_heads, "k_proj": self.num_kv_heads, "v_proj": self.num_kv_heads}
        if proj == "o_proj":
            return (self.hidden_size, self.num_heads * self.head_dim) if kind == "weight" else (self.hidden_size,)
        out = rows[proj] * self.head_dim
        return (out, self.hidden_size) if kind == "weight" else (out,)


def read_geometry(config: dict) -> AttentionGeometry:
    """Validate config.json and return the attention shapes the permutation relies on."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise PrepError(
            f"unsupported architecture {model_type!r}; hs-prep supports model_type "
            + ", ".join(sorted(SUPPORTED_MODEL_TYPES))
        )
    try:
        num_heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
    except (KeyError, TypeError, ValueError) as e:
        raise PrepError(f"config.json lacks a valid {e} entry") from None
    kv_heads = int(config.get("num_key_value_heads") or num_heads)
    head_dim = int(config.get("head_dim") or hidden // num_heads)
    if num_heads <= 0 or kv_heads <= 0 or num_heads % kv_heads:
        raise PrepError(f"config.json: {num_heads} query heads are not a multiple of {kv_heads} KV heads")
    rope = config.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    scaling = config.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    return AttentionGeometry(model_type, layers, num_heads, kv_heads, head_dim, hidden, theta, scaling)
