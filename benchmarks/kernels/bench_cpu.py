"""CPU benchmark: compressing one layer's KV vs one dense attention over the same tokens.

    python -m benchmarks.kernels.bench_cpu [--tokens 4096 --kv-heads 8 --q-heads 32 --head-dim 128 --dtype bfloat16]

Prints the best of ``--repeat`` wall times (ms) for: compress_sequence (prune + select + compress
K and V into pools), the compressed prefill attention of this package (all tokens, one chunk), and
torch SDPA causal attention (dense, GQA) over the same tokens.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from hs_kernels.attention import prefill_attention
from hs_kernels.compressed_kv import compress_sequence
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import SparsityConfig


def best_ms(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--q-heads", type=int, default=32)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--s-k", type=float, default=0.5)
    p.add_argument("--s-v", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(0)
    q = torch.randn(a.tokens, a.q_heads, a.head_dim).to(dtype)
    k = torch.randn(a.tokens, a.kv_heads, a.head_dim).to(dtype)
    v = torch.randn(a.tokens, a.kv_heads, a.head_dim).to(dtype)
    config = SparsityConfig(a.s_k, a.s_v)

    compress = best_ms(lambda: compress_sequence(k, v, config), a.repeat)
    qt, kt, vt = (x.transpose(0, 1) for x in (q, k, v))
    sdpa = best_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True), a.repeat)
    empty = torch.zeros(a.kv_heads, 0, dtype=torch.int32)
    pools = (BlockPool.allocate("k", a.head_dim, 0, 0, dtype), BlockPool.allocate("v", a.head_dim, 0, 0, dtype))
    reference = best_ms(lambda: prefill_attention(q, k, v, *pools, empty, empty, 0), a.repeat)

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {a.tokens} tokens, "
          f"{a.q_heads}/{a.kv_heads} heads, d {a.head_dim}, {a.dtype}, S_K {a.s_k}, S_V {a.s_v}")
    print(f"compress_sequence (K and V, prune+select+compress): {compress:9.1f} ms")
    print(f"dense causal attention, torch SDPA:                 {sdpa:9.1f} ms")
    print(f"dense causal attention, hs_kernels reference:       {reference:9.1f} ms")
    print(f"compress / SDPA attention: {compress / sdpa:.3f}")


if __name__ == "__main__":
    main()
