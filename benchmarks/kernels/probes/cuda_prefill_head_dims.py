"""The CUDA Trans-Both prefill at head_dim 64 and 128 against cuDNN: 32K tokens one shot, causal, Llama's 32/8 heads,
S_K = S_V = 1 (the chunk compressed by ``compress_chunk`` first, not timed), bf16 and fp16 (cuDNN in the same dtype),
triton.testing.do_bench. Each row also gives the kernel's relative error against cuDNN on the decompressed chunk (the
oracle's inputs): a build variant (``--define``, e.g. HS_NO_PV) is timed and checked in one run.

    python -m benchmarks.kernels.probes.cuda_prefill_head_dims [--dtype bfloat16 float16] [--define MACRO ...]
"""

import argparse

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from hs_kernels import cuda_prefill
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk


def causal_cudnn(q, k, v):
    qt, kt, vt = (x.transpose(0, 1)[None] for x in (q, k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)


def main(dtypes=("bfloat16", "float16"), defines=(), t: int = 32768, h_q: int = 32, h_kv: int = 8):
    for dtype, d in ((dtype, d) for dtype in dtypes for d in (64, 128)):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(0)
        q, k, v = (torch.randn(t, h, d, generator=gen, device="cuda").to(getattr(torch, dtype)) for h in (h_q, h_kv, h_kv))
        chunk = compress_chunk(k, v, 1, 1)
        keys = cuda_prefill.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)
        values = cuda_prefill.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index)
        attend = lambda: cuda_prefill.attend(q, keys, values, d ** -0.5, 0, defines=tuple(defines))  # noqa: E731
        out = attend()[0].float()
        oracle = causal_cudnn(q, *chunk_as_dense(k, v, chunk))[0].transpose(0, 1).float()
        err = ((out - oracle).norm() / oracle.norm()).item()
        ours = triton.testing.do_bench(attend, rep=200)
        base = triton.testing.do_bench(lambda: causal_cudnn(q, k, v), rep=200)
        print(f"{dtype} d {d}{''.join(' -D' + x for x in defines)}: {t // 1024}K causal, {h_q}/{h_kv} heads, S 1/1: "
              f"ours {ours:.2f} ms, cuDNN {base:.2f} ms, {base / ours:.2f}x; rel.err vs the oracle {err:.1e}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", nargs="+", choices=["bfloat16", "float16"], default=["bfloat16", "float16"])
    ap.add_argument("--define", nargs="*", default=[], help="more macros for the kernel's build (its ablations, variants)")
    args = ap.parse_args()
    main(args.dtype, args.define)
