"""Balanced against fixed splits where rows are short (the default split count, S = 1/1): per call in one CUDA graph
over 32 layers' own pools. Prints one line per shape."""
import torch

from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_KV, H_Q, decode_inputs

LAYERS = 32


def per_layer(calls, reps=20):
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        ts.append((s, e))
    torch.cuda.synchronize()
    x = sorted(s.elapsed_time(e) for s, e in ts)
    return x[len(x) // 2] / len(calls) * 1000


gen = torch.Generator(device="cuda")
gen.manual_seed(0)
for batch, ctx in ((1, 4096), (1, 32768), (8, 4096), (32, 4096), (8, 32768)):
    q = torch.randn(batch, H_Q, D, generator=gen, device="cuda").to(DT)
    sl = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    pools = [decode_inputs(batch, ctx, 1, 1, gen)[:4] for _ in range(LAYERS)]
    splits = gpu.cuda_decode_splits(batch, H_KV, ctx // 64, q)
    us = {b: per_layer([lambda p=p, b=b: gpu.cuda_decode(q, *p, sl, D ** -0.5, splits, balance=b) for p in pools])
          for b in (False, True)}
    print(f"B={batch} ctx={ctx} splits {splits}: fixed {us[False]:.2f} us, balanced {us[True]:.2f} us, "
          f"{us[False] / us[True]:.3f}x", flush=True)
    del pools
