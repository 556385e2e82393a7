"""Chunks after a served prefix on the GPU: ``prefill_attention`` with ``kernel="cuda"`` (the prefix's 2:4 blocks on
the sparse tensor cores), ``"triton"`` and ``"auto"``. The prefix is stored as served: 2:4 in K and V but for a dense
sink block, a dense window (the last 4 full blocks) and the partial last block. Llama-3.1-8B heads unless ``--heads``, bf16 unless ``--dtype``. Per chunk: one
call's latency (synced after it), the time per call with 20 calls queued back to back (as a model's layers queue
them), the host's time to issue them, and the GPU's busy time per call (the profiler's kernel time); "..., split
given" passes the prefix's split (``gpu.cuda_prefix_blocks``, the call's host sync) found once beforehand.
``--against DIR``: another tree's kernels folder (``git archive REV kernels | tar -x -C DIR/..``) imported beside this
one and timed in the same process, the two alternating for ``--rounds`` rounds (separate processes of the same code
differed by up to 32 % on host-bound calls: docs/kernels.md, Measuring). ``--host-profile``: instead,
where each path's host time goes (cProfile of 50 calls back to back, the functions with the most time of their own),
for the first chunk length.

    python -m benchmarks.kernels.probes.prefix_path_timing [--prefix 32778] [--chunks 256,1024,4096,8192] [--host-profile]
                                                [--against DIR [--rounds 3]] [--heads 28/4/128]
                                                [--dtype float16]
"""

import argparse
import cProfile
import importlib
import os
import pstats
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

from hs_kernels import gpu
from benchmarks.kernels.bench_gpu import rel_err
from benchmarks.kernels.bench_prefill import D, H_KV, H_Q
from hs_kernels.timing import back_to_back, timeit
from hs_kernels.compressed_kv import to_blocks
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask


def served_pools(prefix: int, gen: torch.Generator, h_kv: int = H_KV, d: int = D, dtype=torch.bfloat16):
    """K and V pools with index maps for ``prefix`` random tokens of ``h_kv`` heads of ``d`` stored as served (see
    the module doc)."""
    out = []
    for operand in ("k", "v"):
        blocks = to_blocks(torch.randn(prefix, h_kv, d, device="cuda", dtype=dtype, generator=gen))
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


def tree(kernels_dir: str):
    """``(gpu, BlockPool)`` of another tree's kernels folder, imported as the package ``hs_kernels_against``."""
    root = tempfile.mkdtemp()
    os.symlink(os.path.abspath(kernels_dir), os.path.join(root, "hs_kernels_against"))
    sys.path.insert(0, root)
    return (importlib.import_module("hs_kernels_against.gpu"),
            importlib.import_module("hs_kernels_against.pool").BlockPool)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", type=int, default=32778)
    ap.add_argument("--chunks", default="256,1024,4096,8192")
    ap.add_argument("--host-profile", action="store_true")
    ap.add_argument("--against")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--heads", default=f"{H_Q}/{H_KV}/{D}", help="query heads / KV heads / head_dim")
    ap.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    h_q, h_kv, d = (int(x) for x in args.heads.split("/"))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    pools = served_pools(args.prefix, gen, h_kv, d, dtype)
    trees = {"this": (gpu, pools)}
    if args.against:
        other, pool_class = tree(args.against)
        own = tuple(pool_class(p.operand, p.dense, p.values, p.meta) for p in pools[:2])
        trees["against"] = (other, own + pools[2:])
    splits = {name: g.cuda_prefix_blocks(*p, args.prefix) for name, (g, p) in trees.items()}  # found once for all layers
    print(f"prefix {args.prefix} (served layout), heads {args.heads}, {args.dtype}; ms per call\n"
          "| round | tree | chunk | kernel | one call, synced | back to back | host, back to back | GPU busy "
          "| rel.err vs triton |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    for t in (int(x) for x in args.chunks.split(",")):
        q, k, v = (torch.randn(t, h, d, device="cuda", dtype=dtype, generator=gen) for h in (h_q, h_kv, h_kv))
        run = {(name, kernel): (lambda g=g, p=p, kernel=kernel: g.prefill_attention(q, k, v, *p, args.prefix,
                                                                                 kernel=kernel))
               for name, (g, p) in trees.items() for kernel in ("triton", "cuda", "auto")}
        for name, (g, p) in trees.items():
            for kernel in ("cuda", "auto"):
                run[(name, f"{kernel}, split given")] = (
                    lambda g=g, p=p, kernel=kernel, split=splits[name]: g.prefill_attention(
                        q, k, v, *p, args.prefix, kernel=kernel, split=split))
        if args.host_profile:
            for (name, kernel), fn in run.items():
                print(f"==== {name} tree, chunk {t}, kernel={kernel}: cProfile of 50 calls", flush=True)
                host_profile(fn)
            return
        want = run[("this", "triton")]()[0]
        for r in range(args.rounds):
            for (name, kernel), fn in (run.items() if r % 2 == 0 else reversed(run.items())):
                err = rel_err(fn()[0], want)
                print(f"| {r} | {name} | {t} | {kernel} | {timeit(fn, iters=20):.3f} | {back_to_back(fn):.3f} | "
                      f"{back_to_back(fn, host_only=True):.3f} | {gpu_busy(fn):.3f} | {err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
