"""Split counts of the CUDA decode (B=8, 32K, Llama-3.1-8B heads) around the wave model's pick, timed by do_bench as
kernels/bench_gpu.py does, with each launch's kernel time from the PyTorch profiler (decode kernel and combine).

    python kernels/probes/decode_splits.py
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, ProfilerActivity
from hs_kernels import gpu
from hs_kernels.bench_gpu import decode_inputs, bench, H_Q, H_KV, D, DT

gen = torch.Generator(device="cuda")
gen.manual_seed(0)
b, ctx = 8, 32768
q = torch.randn(b, H_Q, D, generator=gen, device="cuda").to(DT)
sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
scale = D ** -0.5
kd, vd = (torch.randn(b, H_KV, ctx, D, generator=gen, device="cuda").to(DT) for _ in range(2))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    cudnn = bench(lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True))
del kd, vd
print(f"cuDNN {cudnn:.4f} ms")
for s_k, s_v in ((0, 1), (1, 1), (0, 0)):
    k_pool, v_pool, k_index, v_index, nbytes = decode_inputs(b, ctx, s_k, s_v, gen)
    row = []
    for n in (4, 5, 6, 7, 8, 9, 10, 11):
        ms = bench(lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, scale, n))
        row.append(f"{n}:{ms:.4f}({cudnn / ms:.3f}x)")
    print(f"S_K={s_k} S_V={s_v} splits:ms " + " ".join(row), flush=True)
    for n in (6, 8):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(30):
                gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, scale, n)
            torch.cuda.synchronize()
        parts = {e.key[:40]: e.device_time_total / e.count / 1000 for e in prof.key_averages() if e.device_time_total > 0}
        print(f"  splits {n} per-kernel ms: " + ", ".join(f"{k}={v:.4f}" for k, v in parts.items()), flush=True)
