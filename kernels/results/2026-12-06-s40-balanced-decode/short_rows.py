"""Balanced against fixed splits where rows are short (the default split count, S = 1/1): per call in one CUDA graph
over 32 layers' own pools. Prints one line per shape.
(Call 10 ran it with this timing inlined; `per_layer` returns ms, so us = 1000 x.)"""
import sys

import torch

from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_KV, H_Q, decode_inputs

sys.path.insert(0, "kernels/probes")  # run from the repository root
from decode_timing import per_layer  # noqa: E402

LAYERS = 32

gen = torch.Generator(device="cuda")
gen.manual_seed(0)
for batch, ctx in ((1, 4096), (1, 32768), (8, 4096), (32, 4096), (8, 32768)):
    q = torch.randn(batch, H_Q, D, generator=gen, device="cuda").to(DT)
    sl = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    pools = [decode_inputs(batch, ctx, 1, 1, gen)[:4] for _ in range(LAYERS)]
    splits = gpu.cuda_decode_splits(batch, H_KV, ctx // 64, q)
    us = {b: 1000 * per_layer([lambda p=p, b=b: gpu.cuda_decode(q, *p, sl, D ** -0.5, splits, balance=b)
                               for p in pools]) for b in (False, True)}
    print(f"B={batch} ctx={ctx} splits {splits}: fixed {us[False]:.2f} us, balanced {us[True]:.2f} us, "
          f"{us[False] / us[True]:.3f}x", flush=True)
    del pools
