"""The prefill probes' one shot: random bf16 inputs at given heads, the chunk compressed at S = 1/1 with its 2:4
operands, and cuDNN's causal attention on the dense inputs."""

from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

from hs_kernels import cuda_prefill
from hs_kernels.chunk_blocks import ChunkBlocks, compress_chunk


@dataclass
class OneShot:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    chunk: ChunkBlocks
    keys: cuda_prefill.SparseBlocks
    values: cuda_prefill.SparseBlocks

    def cudnn(self) -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa(*(x.transpose(0, 1)[None] for x in (self.q, self.k, self.v)), is_causal=True, enable_gqa=True)


def one_shot(t: int = 32768, h_q: int = 32, h_kv: int = 8, d: int = 128) -> OneShot:
    torch.manual_seed(0)
    q = torch.randn(t, h_q, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(t, h_kv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    chunk = compress_chunk(k, v, 1, 1)
    keys, values = (cuda_prefill.SparseBlocks(*x) for x in ((chunk.k_vals, chunk.k_meta, chunk.k_index),
                                                             (chunk.v_vals, chunk.v_meta, chunk.v_index)))
    return OneShot(q, k, v, chunk, keys, values)
