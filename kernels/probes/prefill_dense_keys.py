"""Whether the 2:4 prefill is faster with its keys 2:4 on the sparse tensor cores or pruned to 2:4 and stored dense
(zeros where pruned: the same scores), at one clock. The Trans-Both form reads Q^T from shared memory as S's B operand
for every block, dense keys take Q from registers (kernels/cuda/prefill_sp.cu): 8 KB less shared-memory traffic per
64 x 64 block, and shared memory is what bounds the kernel (kernels/NOTES_GPU.md). One shot, causal, every V tile
2:4, ``--tokens`` tokens; cuDNN, the 2:4 keys, the pruned dense keys, and the pruned dense keys with their pruning
(``gpu.prune_tiles``) take turns call by call, each call timed alone (``timing.per_call``), with ``--pause`` seconds
idle before each (0: at the power cap; 0.5: a burst's clocks). Prints each one's median, its ratio to cuDNN in the
same turns, and the two outputs' difference.

    python kernels/probes/prefill_dense_keys.py [--tokens 32768] [--heads 32:8:128] [--calls 30] [--pause 0]
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
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--heads", default="32:8:128", help="query heads:KV heads:head_dim")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--settle", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.0)
    args = ap.parse_args()
    h_q, h_kv, d = map(int, args.heads.split(":"))
    shot = one_shot(args.tokens, h_q, h_kv, d)
    q, k, v, keys, values, t = shot.q, shot.k, shot.v, shot.keys, shot.values, args.tokens
    every_tile = torch.ones(h_kv, t // 64, dtype=torch.bool, device="cuda")
    pruned = gpu.prune_tiles(k, "k", every_tile)
    same_as_compressed = torch.equal(pruned, chunk_as_dense(k, v, shot.chunk)[0])
    scale = d ** -0.5

    variants = {
        "cuDNN": shot.cudnn,
        "2:4 keys": lambda: cuda_prefill.attend(q, keys, values, scale, 0),
        "pruned dense keys": lambda: cuda_prefill.attend(q, pruned, values, scale, 0),
        "prune_tiles + pruned dense keys": lambda: cuda_prefill.attend(q, gpu.prune_tiles(k, "k", every_tile), values,
                                                                       scale, 0),
    }
    a, b = variants["2:4 keys"](), variants["pruned dense keys"]()
    diff = rel_err(b[0], a[0])
    for fn in variants.values():
        fn()
    samples = [[ms for ms, *_ in x[args.settle:]] for x in per_call(*variants.values(), calls=args.calls,
                                                                     pause=args.pause)]
    medians = [statistics.median(x) for x in samples]
    print(f"T={t} heads {h_q}/{h_kv} d {d}, pause {args.pause} s; the pruned keys equal chunk_as_dense's: "
          f"{same_as_compressed}; outputs' rel. difference {diff:.1e}")
    print("| variant | ms | x cuDNN, same turns |\n|---|---|---|")
    for name, ms in zip(variants, medians):
        print(f"| {name} | {ms:.3f} | {medians[0] / ms:.3f}x |", flush=True)


if __name__ == "__main__":
    main()
