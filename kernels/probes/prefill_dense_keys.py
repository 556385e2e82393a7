"""Whether the 2:4 prefill is faster with its keys 2:4 on the sparse tensor cores or pruned to 2:4 and stored dense
(zeros where pruned: the same scores), at one clock. The Trans-Both form reads Q^T from shared memory as S's B operand
for every block, dense keys take Q from registers (kernels/cuda/prefill_sp.cu): 8 KB less shared-memory traffic per
64 x 64 block, and shared memory is what bounds the kernel (docs/kernels.md). One shot, causal, every V tile
2:4, at each of ``--tokens``; cuDNN, the 2:4 keys, the dense keys alone, and the dense keys with their copy (by
``gpu.prune_tiles`` from k, or by ``gpu.chunk_keys`` from the compressed chunk) take turns call by call, each call
timed alone (``timing.per_call``), with ``--pause`` seconds idle before each (0: at the power cap; 0.5: a burst's
clocks). Prints each one's median, its ratio to cuDNN in the same turns, and the two outputs' difference.

    python kernels/probes/prefill_dense_keys.py [--tokens 32768[,...]] [--heads 32:8:128] [--calls 30] [--pause 0]
"""

import argparse
import statistics

import torch
from one_shot import one_shot

from hs_kernels import cuda_prefill, gpu
from hs_kernels.bench_gpu import rel_err
from hs_kernels.chunk_blocks import chunk_as_dense
from hs_kernels.timing import per_call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="32768", help="comma-separated chunk lengths")
    ap.add_argument("--heads", default="32:8:128", help="query heads:KV heads:head_dim")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--settle", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.0)
    args = ap.parse_args()
    h_q, h_kv, d = map(int, args.heads.split(":"))
    for t in map(int, args.tokens.split(",")):
        compare(t, h_q, h_kv, d, args)


def compare(t: int, h_q: int, h_kv: int, d: int, args) -> None:
    shot = one_shot(t, h_q, h_kv, d)
    q, k, keys, values, chunk = shot.q, shot.k, shot.keys, shot.values, shot.chunk
    every_tile = torch.ones(h_kv, t // 64, dtype=torch.bool, device="cuda")
    dense = gpu.chunk_keys(chunk)
    same_as_compressed = torch.equal(dense, chunk_as_dense(k, shot.v, chunk)[0])
    same_as_pruned = torch.equal(dense, gpu.prune_tiles(k, "k", every_tile))
    scale = d ** -0.5

    variants = {
        "cuDNN": shot.cudnn,
        "2:4 keys": lambda: cuda_prefill.attend(q, keys, values, scale, 0),
        "dense keys, no copy": lambda: cuda_prefill.attend(q, dense, values, scale, 0),
        "prune_tiles + dense keys": lambda: cuda_prefill.attend(q, gpu.prune_tiles(k, "k", every_tile), values,
                                                                scale, 0),
        "chunk_keys + dense keys": lambda: cuda_prefill.attend(q, gpu.chunk_keys(chunk), values, scale, 0),
    }
    a, b = variants["2:4 keys"](), variants["dense keys, no copy"]()
    diff = rel_err(b[0], a[0])
    for fn in variants.values():
        fn()
    samples = [[ms for ms, *_ in x[args.settle:]] for x in per_call(*variants.values(), calls=args.calls,
                                                                     pause=args.pause)]
    medians = [statistics.median(x) for x in samples]
    print(f"T={t} heads {h_q}/{h_kv} d {d}, pause {args.pause} s; chunk_keys equal chunk_as_dense's keys: "
          f"{same_as_compressed}, prune_tiles's: {same_as_pruned}; outputs' rel. difference {diff:.1e}")
    print("| variant | ms | x cuDNN, same turns |\n|---|---|---|")
    for name, ms in zip(variants, medians):
        print(f"| {name} | {ms:.3f} | {medians[0] / ms:.3f}x |", flush=True)


if __name__ == "__main__":
    main()
