"""One line of figures for a candidate source of the CUDA prefill against cuDNN in the same process: a 32K causal one
shot with Llama-3.1-8B heads (32 / 8, d 128, bf16), S_K = 0 and 1, S_V = 1, through gpu.prefill_compressed_attention
(the chunk compressed beforehand, not timed). Run it alternately per source, on one machine:

    HS_CUDA_PREFILL_SOURCE=candidate.cu python -m benchmarks.kernels.probes.prefill_source_ab
    python -m benchmarks.kernels.probes.prefill_source_ab   # the shipped kernels/cuda/prefill_sp.cu
"""
import os
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa
from hs_kernels import gpu
from hs_kernels.chunk_blocks import compress_chunk
from hs_kernels.timing import timeit

torch.manual_seed(0)
t = 32768
q = torch.randn(t, 32, 128, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(t, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, k, v))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    cudnn = timeit(lambda: sdpa(qb, kb, vb, is_causal=True, enable_gqa=True), iters=10)
row = [os.path.basename(os.environ.get("HS_CUDA_PREFILL_SOURCE", "shipped")), f"cuDNN {cudnn:.2f}"]
for s_k in (0, 1):
    c = compress_chunk(k, v, s_k, 1)
    ms = timeit(lambda: gpu.prefill_compressed_attention(q, k, v, c), iters=10)
    row.append(f"S_K={s_k} {ms:.2f} ({cudnn / ms:.2f}x)")
print(" | ".join(row), flush=True)
