"""Where the paper's one-shot prefill spends its compression: ``chunk_blocks.compress_chunk`` (the chunk's tiles
compressed 2:4 before ``gpu.prefill_compressed_attention``) at 32K tokens, Llama-3.1-8B shapes (32/8 heads, d 128,
bf16): ms per call back to back and the host's share, each CUDA kernel's time (torch profiler), and the attention
timed alone and after the compression, as ``bench_prefill`` times them.

    python kernels/probes/compress_chunk_timing.py [--tokens 32768]
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from hs_kernels import gpu
from hs_kernels.timing import back_to_back, timeit
from hs_kernels.chunk_blocks import compress_chunk


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32768)
    t = ap.parse_args().tokens
    torch.manual_seed(0)
    q = torch.randn(t, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(t, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    print("| S_K | compress_chunk ms, back to back | host ms | attention alone ms | with compress_chunk ms |")
    print("|---|---|---|---|---|")
    for s_k in (1, 0):
        fn = lambda: compress_chunk(k, v, s_k, 1)  # noqa: E731
        chunk = fn()
        alone = timeit(lambda: gpu.prefill_compressed_attention(q, k, v, chunk))
        both = timeit(lambda: gpu.prefill_compressed_attention(q, k, v, fn()))
        print(f"| {s_k} | {back_to_back(fn):.3f} | {back_to_back(fn, host_only=True):.3f} | {alone:.3f} | {both:.3f} |",
              flush=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                gpu.prefill_compressed_attention(q, k, v, fn())
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))


if __name__ == "__main__":
    main()
