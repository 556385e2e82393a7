"""The CUDA decode against cuDNN (B=8, 32K, Llama-3.1-8B heads), beyond kernels/bench_gpu.py's one timing.

Default: three timings, to see what the benchmark itself adds: do_bench (a 256 MB memset before each call flushes L2
but leaves its dirty lines to be written back inside the timed call), a clean flush (the memset, then a 256 MB read
pass, untimed), and the PyTorch profiler's kernel time back to back (no flush); ours with the combine launched
plainly and as a programmatic dependent of the decode (``gpu.cuda_decode``'s ``dependent``).
``--splits``: split counts (default 4-11, around the wave model's pick; ``--counts`` others) by do_bench, balanced and
fixed (``balance=False``), and the profiler's time per kernel at 6 and 8.
``--layers N``: as a decode step meets them, one call per layer over N layers' own inputs back to back (each far larger
than L2, so nothing is flushed and no dirty lines are left behind), replayed from one CUDA graph; ms per call.

    python kernels/probes/decode_timing.py [--splits [--counts 6,8,16,32,64]] [--layers 8]
"""

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_KV, H_Q, bench, decode_inputs

B, CTX = 8, 32768


def bench_clean(fn, reps=200):
    """Median ms; before each call a 256 MB memset, then a 256 MB read pass (its dirty lines written back untimed)."""
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


def kernels(fn, reps=30):
    """The PyTorch profiler's per-kernel records of ``reps`` calls back to back."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    return [e for e in prof.key_averages() if e.device_time_total > 0]


def kernel_ms(fn, reps=30):
    """The GPU time of one call, every kernel it launches summed."""
    return sum(e.device_time_total for e in kernels(fn, reps)) / reps / 1000


def timings(q, sl, sdpa, gen):
    rows = []
    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel([backend]):
            rows.append((name, bench(sdpa), bench_clean(sdpa), kernel_ms(sdpa)))
    for s_k, s_v, n in ((0, 1, 6), (0, 1, 8), (1, 1, 8), (0, 0, 8)):
        k_pool, v_pool, k_index, v_index, _ = decode_inputs(B, CTX, s_k, s_v, gen)
        for dep in (False, True):
            f = lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, D ** -0.5, n, dependent=dep)  # noqa: E731
            rows.append((f"ours S_K={s_k} S_V={s_v} splits {n}{', dependent combine' if dep else ''}", bench(f),
                         bench_clean(f), kernel_ms(f)))
    base = rows[0]
    print("| kernel | do_bench (memset flush) ms | x cuDNN | clean flush ms | x cuDNN | profiler, no flush ms | x cuDNN |")
    print("|---|---|---|---|---|---|---|")
    for name, a, c, k in rows:
        print(f"| {name} | {a:.4f} | {base[1] / a:.3f} | {c:.4f} | {base[2] / c:.3f} | {k:.4f} | {base[3] / k:.3f} |")


def per_layer(calls, reps=20):
    """Median ms per call of ``calls`` (one per layer) captured in order into one CUDA graph and replayed."""
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
    return x[len(x) // 2] / len(calls)


def layers(q, sl, gen, n, counts):
    kv = [[torch.randn(B, H_KV, CTX, D, generator=gen, device="cuda").to(DT) for _ in range(2)] for _ in range(n)]
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        cudnn = per_layer([lambda k=k, v=v: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)
                           for k, v in kv])
    del kv
    print(f"{n} layers, per call: cuDNN {cudnn:.4f} ms", flush=True)
    for s_k, s_v in ((0, 1), (1, 1), (0, 0)):
        pools = [decode_inputs(B, CTX, s_k, s_v, gen)[:4] for _ in range(n)]
        row = []
        for splits_ in counts:
            ms = per_layer([lambda p=p: gpu.cuda_decode(q, *p, sl, D ** -0.5, splits_, dependent=True) for p in pools])
            row.append(f"{splits_}:{ms:.4f}({cudnn / ms:.3f}x)")
        print(f"S_K={s_k} S_V={s_v} splits:ms " + " ".join(row), flush=True)
        del pools


def splits(q, sl, sdpa, gen, counts):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        cudnn = bench(sdpa)
    print(f"cuDNN {cudnn:.4f} ms")
    for s_k, s_v in ((0, 1), (1, 1), (0, 0)):
        k_pool, v_pool, k_index, v_index, _ = decode_inputs(B, CTX, s_k, s_v, gen)
        run = lambda n, balance=True: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, D ** -0.5, n,  # noqa: E731
                                                      balance=balance)
        for balance in (True, False):
            row = []
            for n in counts:
                ms = bench(lambda: run(n, balance))
                row.append(f"{n}:{ms:.4f}({cudnn / ms:.3f}x)")
            print(f"S_K={s_k} S_V={s_v} {'balanced' if balance else 'fixed'} splits:ms " + " ".join(row), flush=True)
        for n in (6, 8):
            parts = ", ".join(f"{e.key[:40]}={e.device_time_total / e.count / 1000:.4f}" for e in kernels(lambda: run(n)))
            print(f"  splits {n} per-kernel ms: {parts}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", action="store_true", help="the split-count sweep instead of the three timings")
    ap.add_argument("--counts", default="4,5,6,7,8,9,10,11", help="the split counts of --splits and --layers")
    ap.add_argument("--layers", type=int, default=0, help="per-layer timing over this many layers' inputs instead")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    q = torch.randn(B, H_Q, D, generator=gen, device="cuda").to(DT)
    sl = torch.full((B,), CTX, dtype=torch.int32, device="cuda")
    kd, vd = (torch.randn(B, H_KV, CTX, D, generator=gen, device="cuda").to(DT) for _ in range(2))
    sdpa = lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True)  # noqa: E731
    if args.layers:
        layers(q, sl, gen, args.layers, [int(n) for n in args.counts.split(",")])
    elif args.splits:
        splits(q, sl, sdpa, gen, [int(n) for n in args.counts.split(",")])
    else:
        timings(q, sl, sdpa, gen)


if __name__ == "__main__":
    main()
