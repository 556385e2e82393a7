"""The decode reading a pool's index maps through each sequence's pages (``pages=``) against the maps gathered per
layer first (what serving did before), and the benchmark's maps per sequence.

1. B=8, 32K, Llama heads (32/8, d 128, bf16): cuDNN, ours with maps per sequence, ours through pages (shuffled), at
   S_K/S_V 1/1 and 0/1 (the targets' pools), triton.testing.do_bench.
2. Serving's setting, inside a CUDA graph of 32 calls (a step's layers): Llama's retrieval half (16/4 heads), a graph
   width of 2048 blocks (128K context), B 1 and 16 at 4K and 32K: two gathers of the maps then the decode, against
   the decode through pages.

    python -m benchmarks.kernels.probes.paged_decode   (from the repository root: it reads tests/kv_cases.py)
"""

import math
import sys

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from hs_kernels import gpu
from benchmarks.kernels.bench_gpu import bench, decode_inputs, rel_err

sys.path.insert(0, "tests")
from kv_cases import paged  # noqa: E402

WIDTH = 2048


def graph_us(fn, calls=32):
    return triton.testing.do_bench_cudagraph(lambda: [fn() for _ in range(calls)], rep=60, return_mode="median") * 1e3 / calls


def gathered(index, pages):
    b, n = pages.shape
    return index.t()[None].expand(b, -1, -1).gather(2, pages[:, None, :].expand(b, index.shape[1], n))


def main():
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    b, ctx, h_q, h_kv, d = 8, 32768, 32, 8, 128
    q = torch.randn(b, h_q, d, generator=gen, device="cuda").to(torch.bfloat16)
    kd, vd = (torch.randn(b, h_kv, ctx, d, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(2))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        base = bench(lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True))
    del kd, vd
    sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    print(f"B={b}, {ctx // 1024}K, heads {h_q}/{h_kv}, d {d}: cuDNN {base:.4f} ms")
    print("| S_K/S_V | per sequence ms (x cuDNN) | through pages ms (x cuDNN) | max rel err |")
    print("|---|---|---|---|")
    for s_k, s_v in ((1, 1), (0, 1)):
        k_pool, v_pool, k_index, v_index, _ = decode_inputs(b, ctx, s_k, s_v, gen)
        k_map, v_map, pages = paged(k_index, v_index, gen)
        plain = lambda: gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl, d ** -0.5)  # noqa: E731
        through = lambda: gpu.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, d ** -0.5, pages=pages)  # noqa: E731
        err = rel_err(through()[0], plain()[0])
        t0, t1 = bench(plain), bench(through)
        print(f"| {s_k}/{s_v} | {t0:.4f} ({base / t0:.3f}x) | {t1:.4f} ({base / t1:.3f}x) | {err:.1e} |", flush=True)
        del k_pool, v_pool

    h_q, h_kv = 16, 4
    print(f"\nServing: heads {h_q}/{h_kv}, graph width {WIDTH} blocks, S_K/S_V 1/1; us per layer in a CUDA graph of 32")
    print("| B | context | gather x2 + decode us | through pages us | max rel err |")
    print("|---|---|---|---|---|")
    for b in (1, 16):
        for ctx in (4096, 32768):
            k_pool, v_pool, k_index, v_index, _ = decode_inputs(b, ctx, 1, 1, gen, h_kv=h_kv)
            pad = torch.zeros(b, h_kv, WIDTH - k_index.shape[2], dtype=k_index.dtype, device="cuda")
            k_map, v_map, pages = paged(torch.cat([k_index, pad], 2), torch.cat([v_index, pad], 2), gen)
            pages64 = pages.long()
            q = torch.randn(b, h_q, d, generator=gen, device="cuda").to(torch.bfloat16)
            sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
            old = lambda: gpu.decode_attention(q, k_pool, v_pool, gathered(k_map, pages64), gathered(v_map, pages64),  # noqa: E731
                                               sl, d ** -0.5)
            new = lambda: gpu.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, d ** -0.5, pages=pages)  # noqa: E731
            err = rel_err(new()[0], old()[0])
            print(f"| {b} | {ctx} | {graph_us(old):.1f} | {graph_us(new):.1f} | {err:.1e} |", flush=True)
            del k_pool, v_pool


if __name__ == "__main__":
    main()
