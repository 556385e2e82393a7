"""A prefill chunk's own V (or K) pruned 2:4 on the GPU, as the serving backend prunes it at the prefill sparsity: the
Triton path (``gpu.prune_tiles``: one copy, one launch) against the reference's torch ops on the same GPU
(``HS_KERNELS_NO_GPU=1`` for those calls), ms per call back to back (as 32 layers queue them) and the host's share.
The chunk: the retrieval heads of Llama-3.1-8B shapes (4 of 8 KV heads, d 128, bf16), every full tile chosen (S = 1).

    python kernels/probes/prune_tiles_timing.py [--tokens 1024,4096,16384]
"""

import argparse
import os

import torch

from hs_kernels import gpu
from hs_kernels.timing import back_to_back


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1024,4096,16384")
    args = ap.parse_args()
    print("| tokens | operand | path | ms per call, back to back | host ms per call |\n|---|---|---|---|---|")
    for t in (int(x) for x in args.tokens.split(",")):
        x = torch.randn(t, 8, 128, device="cuda", dtype=torch.bfloat16)[:, :4]  # a slice of heads, as served
        sparse = torch.ones(4, t // 64, dtype=torch.bool, device="cuda")
        for op in ("v", "k"):
            outs = []
            for path in ("triton", "reference"):
                os.environ["HS_KERNELS_NO_GPU"] = "1" if path == "reference" else "0"
                fn = lambda: gpu.prune_tiles(x, op, sparse)  # noqa: E731
                outs.append(fn())
                print(f"| {t} | {op} | {path} | {back_to_back(fn):.3f} | {back_to_back(fn, host_only=True):.3f} |",
                      flush=True)
            os.environ["HS_KERNELS_NO_GPU"] = "0"
            assert torch.equal(*outs), "the Triton path differs from the reference"


if __name__ == "__main__":
    main()
