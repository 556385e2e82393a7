"""Whether a sustained prefill runs slower than a short burst: the 32K causal one shot (Llama-3.1-8B shapes, bf16),
cuDNN and ours (``gpu.prefill_compressed_attention`` at S = 1/1) in turn, ``--calls`` calls each, every call timed
alone (events, a sync after each), with the SM clock and power the driver reports (torch.cuda.clock_rate /
power_draw, NVML) sampled after every call. Prints each run's median of its first 5 and of its last 10 calls.

    python kernels/probes/sustained_prefill.py [--calls 60] [--rounds 2]
"""

import argparse
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

from hs_kernels import gpu
from hs_kernels.chunk_blocks import compress_chunk


def telemetry() -> tuple[float, float]:
    """SM MHz and W now, NaN where NVML is not installed."""
    try:
        return torch.cuda.clock_rate(), torch.cuda.power_draw() / 1e3
    except (ImportError, ModuleNotFoundError, RuntimeError):
        return float("nan"), float("nan")


def run(fn, calls: int) -> list[tuple[float, float, float]]:
    """(ms, SM MHz, W) of each call."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(calls):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append((start.elapsed_time(end), *telemetry()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    t = 32768
    torch.manual_seed(0)
    q = torch.randn(t, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(t, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    chunk = compress_chunk(k, v, 1, 1)
    qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, k, v))

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            sdpa(qb, kb, vb, is_causal=True, enable_gqa=True)

    def ours():
        gpu.prefill_compressed_attention(q, k, v, chunk)

    print("| round | kernel | first 5: ms, MHz, W | last 10: ms, MHz, W |\n|---|---|---|---|")
    for r in range(args.rounds):
        for name, fn in (("cuDNN", cudnn), ("ours S=1/1", ours)):
            samples = run(fn, args.calls)
            cols = [" / ".join(f"{statistics.median(x):.{p}f}" for x, p in zip(zip(*part), (3, 0, 0)))
                    for part in (samples[:5], samples[-10:])]
            print(f"| {r} | {name} | {cols[0]} | {cols[1]} |", flush=True)


if __name__ == "__main__":
    main()
