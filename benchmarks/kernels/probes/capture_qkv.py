"""Real activations for the CUDA prefill's softmax offsets: a Llama-family checkpoint's post-RoPE q, k and its v on
real text, on the CPU (transformers, float32). Prints, per layer, how far the static offset |q| x longest key x scale
(log2) lies above each row's log-sum-exp for a chunk after a cached prefix (the last quarter after the rest), and
saves every third layer's q, k, v (bf16, [T, heads, d]) for benchmarks/kernels/probes/real_offsets.py on the GPU.

    python -m benchmarks.kernels.probes.capture_qkv "$(python -c 'from hs_prep.embedded import embedded_checkpoint as c; print(c())')" \\
        ../shared/papers/000_91f65ccefcddff67.txt 2048 .scratch/smol_qkv.safetensors
"""
import math
import sys

import torch
import transformers.models.llama.modeling_llama as llama
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def capture(checkpoint: str, text: str, tokens: int):
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids = tok(text, return_tensors="pt").input_ids[:, :tokens]
    qk, vs = [], []
    rope = llama.apply_rotary_pos_emb

    def spy(q, k, *args, **kwargs):
        q, k = rope(q, k, *args, **kwargs)
        qk.append((q[0].transpose(0, 1), k[0].transpose(0, 1)))  # [T, heads, d]
        return q, k

    llama.apply_rotary_pos_emb = spy
    d = model.config.hidden_size // model.config.num_attention_heads
    for layer in model.model.layers:
        layer.self_attn.v_proj.register_forward_hook(lambda m, i, o: vs.append(o[0].view(ids.shape[1], -1, d)))
    with torch.no_grad():
        model(ids)
    llama.apply_rotary_pos_emb = rope
    return [(q, k, v) for (q, k), v in zip(qk, vs)]


def gaps(q, k, prefix: int) -> torch.Tensor:
    """Offset minus log-sum-exp (log2) of each row of the chunk after ``prefix`` keys, causal."""
    t, d = q.shape[0], q.shape[-1]
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    s = torch.einsum("thd,uhd->htu", q, k) * d ** -0.5
    s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    lse = s.logsumexp(-1)[:, prefix:] / math.log(2)
    offset = q.norm(dim=-1).T[:, prefix:] * k[:prefix].norm(dim=-1).amax(0)[:, None] * d ** -0.5 / math.log(2)
    return offset - lse


def main(checkpoint: str, text_path: str, tokens: str, out: str) -> None:
    layers = capture(checkpoint, open(text_path).read(), int(tokens))
    t = layers[0][0].shape[0]
    every = []
    for i, (q, k, _) in enumerate(layers):
        g = gaps(q, k, t * 3 // 4)
        every.append(g.flatten())
        print(f"layer {i:2d}: gap (log2) median {g.median():6.1f}, max {g.max():6.1f}")
    g = torch.cat(every)
    print(f"{t} tokens; rows of the last quarter, all layers: {g.numel()}; gap quantiles 50 / 99 / 100 %: "
          f"{', '.join(f'{x:.1f}' for x in torch.quantile(g, torch.tensor([0.5, 0.99, 1.0])).tolist())}")
    for past in (78, 126, 142, 158, 174):
        print(f"  rows with gap > {past}: {(g > past).sum().item()}")
    save_file({f"{i}.{name}": x.contiguous().to(torch.bfloat16) for i, qkv in enumerate(layers) if i % 3 == 0
               for name, x in zip("qkv", qkv)}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
