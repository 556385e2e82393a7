"""Whether a served prefix's 2:4 keys are read faster on the CUDA kernel from a dense copy (``gpu.prefix_keys``, as
the one-shot prefill reads its keys) than as 2:4 blocks: ``gpu.cuda_prefix_prefill``
in one part, its split given, 2:4 keys against ``dense_keys=True`` (the copy included), and the copy alone, queued
back to back call by call (``timing.alternating(queued=True)``: one clock for all). Prefix as served
(``prefix_path_timing.served_pools``), Llama-3.1-8B heads unless ``--heads``.

    python kernels/probes/prefix_dense_keys.py [--prefix 32778] [--chunks 1024,4096,8192] [--heads 32/8/128]
"""

import argparse

import torch
from prefix_path_timing import served_pools

from hs_kernels import gpu
from hs_kernels.bench_gpu import rel_err
from hs_kernels.timing import alternating


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", type=int, default=32778)
    ap.add_argument("--chunks", default="1024,4096,8192")
    ap.add_argument("--heads", default="32/8/128", help="query heads / KV heads / head_dim")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    h_q, h_kv, d = (int(x) for x in args.heads.split("/"))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    k_pool, v_pool, k_index, v_index = served_pools(args.prefix, gen, h_kv, d)
    split = gpu.cuda_prefix_blocks(k_pool, v_pool, k_index, v_index, args.prefix)
    scale = d ** -0.5
    print(f"prefix {args.prefix} (served), heads {args.heads}; ms per call, alternating\n"
          "| chunk | 2:4 keys | dense keys, copy included | the copy | x | rel. difference |\n"
          "|---|---|---|---|---|---|")
    for t in (int(x) for x in args.chunks.split(",")):
        q, k, v = (torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (h_q, h_kv, h_kv))

        def prefill(dense_keys):
            return gpu.cuda_prefix_prefill(q, k, v, k_pool, v_pool, args.prefix, scale, split, splits=1,
                                           dense_keys=dense_keys)

        diff = rel_err(prefill(True)[0], prefill(False)[0])
        sparse, dense, copy = alternating(lambda: prefill(False), lambda: prefill(True),
                                          lambda: gpu.prefix_keys(k_pool, split.k_sparse), iters=args.calls,
                                          queued=True)
        print(f"| {t} | {sparse:.3f} | {dense:.3f} | {copy:.3f} | {sparse / dense:.3f}x | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
