"""One line: the CUDA decode at B=8, 32K over the three benchmark pools, at the given slots and split counts."""
import sys

import torch

from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_Q, bench, decode_inputs

B, CTX = 8, 32768
slots, counts = int(sys.argv[1]), [int(n) for n in sys.argv[2].split(",")]
gen = torch.Generator(device="cuda")
gen.manual_seed(0)
q = torch.randn(B, H_Q, D, generator=gen, device="cuda").to(DT)
sl = torch.full((B,), CTX, dtype=torch.int32, device="cuda")
for s_k, s_v in ((0, 1), (1, 1), (0, 0)):
    pools = decode_inputs(B, CTX, s_k, s_v, gen)[:4]
    row = [f"{n}:{bench(lambda: gpu.cuda_decode(q, *pools, sl, D ** -0.5, n, slots=slots)):.4f}" for n in counts]
    print(f"slots {slots} S_K={s_k} S_V={s_v} splits:ms " + " ".join(row), flush=True)
