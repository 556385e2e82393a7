"""cuDNN's decode and ours (V only, 8 splits; dense, 8 splits) once each inside a profiler range, for ncu."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_KV, H_Q, decode_inputs

B, CTX = 8, 32768
gen = torch.Generator(device="cuda")
gen.manual_seed(0)
q = torch.randn(B, H_Q, D, generator=gen, device="cuda").to(DT)
sl = torch.full((B,), CTX, dtype=torch.int32, device="cuda")
kd, vd = (torch.randn(B, H_KV, CTX, D, generator=gen, device="cuda").to(DT) for _ in range(2))
pools = {sv: decode_inputs(B, CTX, 0, sv, gen)[:4] for sv in (1, 0)}
calls = [lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True)]
calls += [lambda p=p: gpu.cuda_decode(q, *p, sl, D ** -0.5, 8) for p in pools.values()]
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for c in calls:
        c()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for c in calls:
        c()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
print("done")
