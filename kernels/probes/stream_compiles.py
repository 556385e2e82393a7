"""How many variants of the streaming kernel a serving mix compiles: the extend calls of prompts and questions of
1-300 tokens after cached prefixes of 0-5000 tokens (keys laid out as serving passes them, ``streaming_keys``),
Llama-3.1-8B's streaming half (16 query heads, 4 KV heads, d 128), sink 128, window 256. Each variant is a Triton
compile (about a second) that the first request meeting it waits for. Prints the variants compiled, the distinct
(tile rows, split) shapes the calls met, and the first and the repeated call's time for the case the warm-up misses.

    python kernels/probes/stream_compiles.py
"""

import time

import torch

from hs_kernels import attention as ref
from hs_kernels import gpu
from hs_kernels import triton_stream as ts

H_Q, H_KV, D, SINK, WINDOW = 16, 4, 128, 128, 256


def compiled_variants() -> int:
    return sum(len(cache[0]) for cache in ts.stream_kernel.device_caches.values())


def call(prefix: int, t: int) -> tuple[float, int]:
    """The call's time (synced) and its keys."""
    q = torch.randn(1, t, H_Q, D, device="cuda", dtype=torch.bfloat16)
    k_pos = ref.streaming_keys(prefix, prefix + t, SINK, WINDOW, "cuda")[None]
    k, v = (torch.randn(1, k_pos.shape[1], H_KV, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    q_pos = torch.arange(prefix, prefix + t, device="cuda")[None]
    torch.cuda.synchronize()
    start = time.perf_counter()
    gpu.triton_streaming(q, q_pos, k, v, k_pos, SINK, WINDOW, D ** -0.5)
    torch.cuda.synchronize()
    return time.perf_counter() - start, k_pos.shape[1]


def main():
    shapes, g, sms = set(), H_Q // H_KV, gpu._sm_count(torch.device("cuda"))
    for prefix in (0, 64, 1000, 4096, 4360, 5000):
        for t in (1, 3, 8, 17, 64, 100, 128, 300):
            _, keys = call(prefix, t)
            rows = gpu.stream_rows(t, g)  # the launcher's defaults, as triton_streaming picks them
            shapes.add((rows, gpu.stream_splits(-(-t * g // rows) * H_KV, -(-keys // 64), sms) > 1))
    print(f"streaming kernel: {compiled_variants()} variants compiled for 48 extend calls of {len(shapes)} tile shapes "
          f"(rows, split): {sorted(shapes)}")
    (first, _), (again, _) = call(4097, 7), call(4097, 7)
    print(f"an unseen (prefix, length) = (4097, 7) after them: first call {1e3 * first:.1f} ms, again {1e3 * again:.2f} ms")


if __name__ == "__main__":
    main()
