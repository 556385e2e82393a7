"""Chunks after a served prefix on the GPU: ``prefill_attention`` with ``kernel="cuda"`` (the prefix's 2:4 blocks on
the sparse tensor cores) and ``kernel="triton"``. The prefix is stored as served: 2:4 in K and V but for a dense sink
block, a dense window (the last 4 full blocks) and the partial last block. Llama-3.1-8B heads, bf16. Per chunk: one
call's latency (synced after it), the time per call with 20 calls queued back to back (as a model's layers queue
them), and the GPU's busy time per call (the profiler's kernel time). For an A/B of two trees, run it once with each
on PYTHONPATH. ``--host-profile``: instead, where each path's host time goes (cProfile of 50 calls back to back, the
functions with the most time of their own), for the first chunk length.

    python kernels/probes/prefix_path_timing.py [--prefix 32778] [--chunks 256,1024,4096,8192] [--host-profile]
"""

import argparse
import cProfile
import pstats

import torch
from torch.profiler import ProfilerActivity, profile

from hs_kernels import gpu
from hs_kernels.bench_gpu import rel_err
from hs_kernels.bench_prefill import D, H_KV, H_Q, back_to_back, timeit
from hs_kernels.compressed_kv import to_blocks
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask


def served_pools(prefix: int, gen: torch.Generator):
    """K and V pools with index maps for ``prefix`` random tokens stored as served (see the module doc)."""
    out = []
    for operand in ("k", "v"):
        blocks = to_blocks(torch.randn(prefix, H_KV, D, device="cuda", dtype=torch.bfloat16, generator=gen))
        sparse = torch.ones(blocks.shape[:2], dtype=torch.bool, device="cuda")
        sparse[:, 0] = False
        sparse[:, prefix // 64 - 4:] = False
        out.append(BlockPool.holding(operand, blocks, sparse, element_mask(blocks, operand)))
    (k_pool, k_index), (v_pool, v_index) = out
    return k_pool, v_pool, k_index, v_index


def gpu_busy(fn, calls: int = 10) -> float:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages()) / calls / 1000


def host_profile(fn, calls: int = 50) -> None:
    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", type=int, default=32778)
    ap.add_argument("--chunks", default="256,1024,4096,8192")
    ap.add_argument("--host-profile", action="store_true")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    pools = served_pools(args.prefix, gen)
    print(f"prefix {args.prefix} (served layout), Llama heads, bf16; ms per call\n"
          "| chunk | kernel | one call, synced | back to back | GPU busy | rel.err vs triton |\n|---|---|---|---|---|---|",
          flush=True)
    for t in (int(x) for x in args.chunks.split(",")):
        q, k, v = (torch.randn(t, h, D, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (H_Q, H_KV, H_KV))
        run = {kernel: (lambda kernel=kernel: gpu.prefill_attention(q, k, v, *pools, args.prefix, kernel=kernel))
               for kernel in ("triton", "cuda")}
        if args.host_profile:
            for kernel, fn in run.items():
                print(f"==== chunk {t}, kernel={kernel}: cProfile of 50 calls", flush=True)
                host_profile(fn)
            return
        want = run["triton"]()[0]
        for kernel, fn in run.items():
            err = rel_err(fn()[0], want)
            print(f"| {t} | {kernel} | {timeit(fn, iters=20):.3f} | {back_to_back(fn):.3f} | {gpu_busy(fn):.3f} | "
                  f"{err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
