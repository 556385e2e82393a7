"""The CUDA decode and cuDNN under three timings, to see what the benchmark itself adds: do_bench (a 256 MB memset
before each call flushes L2 but leaves its dirty lines to be written back inside the timed call), a clean flush
(the memset, then a 256 MB read pass, untimed), and the PyTorch profiler's kernel time back to back (no flush).
Ours with the combine launched plainly and as a programmatic dependent of the decode (``gpu.cuda_decode``'s
``dependent``).

    python kernels/probes/decode_timing.py
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, ProfilerActivity
from hs_kernels import gpu
from hs_kernels.bench_gpu import decode_inputs, bench, H_Q, H_KV, D, DT


def bench_clean(fn, reps=200):
    """median ms; before each call a 256 MB memset, then a 256 MB read pass (its dirty lines written back untimed)"""
    a = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    r = torch.ones(64 << 20, device="cuda")
    for _ in range(10):
        fn()
    ts = []
    for _ in range(reps):
        a.zero_()
        r.sum()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        ts.append((s, e))
    torch.cuda.synchronize()
    x = sorted(s.elapsed_time(e) for s, e in ts)
    return x[len(x) // 2]


def kernel_ms(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(30):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages()) / 30 / 1000


gen = torch.Generator(device="cuda")
gen.manual_seed(0)
b, ctx = 8, 32768
q = torch.randn(b, H_Q, D, generator=gen, device="cuda").to(DT)
sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
scale = D ** -0.5
kd, vd = (torch.randn(b, H_KV, ctx, D, generator=gen, device="cuda").to(DT) for _ in range(2))
rows = []
for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
    with sdpa_kernel([backend]):
        f = lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True)
        rows.append((name, bench(f), bench_clean(f), kernel_ms(f)))
del kd, vd
for s_k, s_v, n in ((0, 1, 6), (0, 1, 8), (1, 1, 8), (0, 0, 8)):
    k_pool, v_pool, k_index, v_index, nbytes = decode_inputs(b, ctx, s_k, s_v, gen)
    for dep in (False, True):
        f = lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, scale, n, dependent=dep)  # noqa: E731
        rows.append((f"ours S_K={s_k} S_V={s_v} splits {n}{', dependent combine' if dep else ''}", bench(f),
                     bench_clean(f), kernel_ms(f)))
base = rows[0]
print("| kernel | do_bench (memset flush) ms | x cuDNN | clean flush ms | x cuDNN | profiler, no flush ms | x cuDNN |")
print("|---|---|---|---|---|---|---|")
for name, a, c, k in rows:
    print(f"| {name} | {a:.4f} | {base[1] / a:.3f} | {c:.4f} | {base[2] / c:.3f} | {k:.4f} | {base[3] / k:.3f} |")
