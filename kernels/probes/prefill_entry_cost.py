"""Where the 2:4 prefill's entry point spends its time over the launch (a few tenths of a ms at 32K): the
32K causal one shot (Llama-3.1-8B shapes, S = 1/1), each variant timed alone per call (events, a sync after each),
all alternating call by call (one clock), then each variant's host time (a host clock around the call, after a
sync; the GPU idles meanwhile only where the call syncs). The launches read the chunk's keys as the entry point
gives them to the kernel (``gpu.compressed_prefill_keys``: from 2^16 query rows per KV head a dense copy, made once
here).

    python kernels/probes/prefill_entry_cost.py [--calls 30]
"""

import argparse
import time

import torch
from one_shot import one_shot

from hs_kernels import cuda_prefill, gpu
from hs_kernels.timing import alternating


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()
    shot = one_shot()
    q, values = shot.q, shot.values
    # the launches read the keys in the form the entry point gives the kernel, so its copy counts as entry cost
    keys = gpu.compressed_prefill_keys(shot.k, shot.chunk, q.shape[1])
    out, lse = torch.empty_like(q), torch.empty(q.shape[:2], device="cuda")
    scale = 128 ** -0.5

    def launch_and_rescue():
        work = cuda_prefill.launch(q, keys, values, scale, 0, out, lse)
        cuda_prefill.rescue(q, keys, values, work, scale, 0, out, lse, marked=True)

    variants = {
        "launch": lambda: cuda_prefill.launch(q, keys, values, scale, 0, out, lse),
        "launch + rescue": launch_and_rescue,
        "attend (+ the host sync)": lambda: cuda_prefill.attend(q, keys, values, scale, 0, out, lse),
        "prefill_compressed_attention": lambda: gpu.prefill_compressed_attention(q, shot.k, shot.v, shot.chunk),
    }
    times = alternating(*variants.values(), iters=args.calls)
    print("| variant | ms per call | over the launch | host ms |\n|---|---|---|---|")
    for (name, fn), ms in zip(variants.items(), times):
        torch.cuda.synchronize()
        host = []
        for _ in range(10):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            host.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
        print(f"| {name} | {ms:.3f} | {ms - times[0]:+.3f} | {sorted(host)[5]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
