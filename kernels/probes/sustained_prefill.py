"""Whether a sustained prefill runs slower than a short burst: the 32K causal one shot (Llama-3.1-8B shapes, bf16),
cuDNN and ours (``gpu.prefill_compressed_attention`` at S = 1/1), ``--calls`` calls each, every call timed alone
(events, a sync after each), with the SM clock and power the driver reports (torch.cuda.clock_rate / power_draw,
NVML) sampled after every call. By default each kernel runs its calls in turn, and each run's median of its first 5
and of its last 10 calls is printed; ``--interleave``: the kernels alternate call by call, so that both run in the
same power state, and the medians of all calls after the first ``--settle`` are printed with their ratio;
``--pause S``: S seconds idle before each call, so that calls run at a burst's clocks; ``--kernel-only``: ours as
``cuda_prefill.launch`` alone (no entry-point checks, no rescue, no host sync).

    python kernels/probes/sustained_prefill.py [--calls 60] [--rounds 2] [--interleave] [--settle 20] [--pause 0]
        [--kernel-only]
"""

import argparse
import statistics

import torch
from one_shot import one_shot

from hs_kernels import cuda_prefill, gpu
from hs_kernels.timing import per_call


def telemetry() -> tuple[float, float]:
    """SM MHz and W now, NaN where NVML is not installed."""
    try:
        return torch.cuda.clock_rate(), torch.cuda.power_draw() / 1e3
    except (ImportError, ModuleNotFoundError, RuntimeError):
        return float("nan"), float("nan")


def medians(samples) -> str:
    return " / ".join(f"{statistics.median(x):.{p}f}" for x, p in zip(zip(*samples), (3, 0, 0)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--interleave", action="store_true")
    ap.add_argument("--settle", type=int, default=20)
    ap.add_argument("--kernel-only", action="store_true", help="ours as cuda_prefill.launch alone")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds idle before each call (a burst's clocks)")
    args = ap.parse_args()
    shot = one_shot()
    q, t = shot.q, shot.q.shape[0]
    out, lse = torch.empty_like(q), torch.empty(t, 32, device="cuda")

    def ours():
        if args.kernel_only:  # the launch alone: no entry-point checks, no rescue, no host sync
            cuda_prefill.launch(q, shot.keys, shot.values, 128 ** -0.5, 0, out, lse)
        else:
            gpu.prefill_compressed_attention(q, shot.k, shot.v, shot.chunk)

    kernels = (("cuDNN", shot.cudnn), ("ours S=1/1", ours))
    if args.interleave:
        print("| round | cuDNN: ms, MHz, W | ours S=1/1: ms, MHz, W | ratio |\n|---|---|---|---|")
        for r in range(args.rounds):
            a, b = (x[args.settle:] for x in per_call(*(fn for _, fn in kernels), calls=args.calls,
                                                      pause=args.pause, extra=telemetry))
            ratio = statistics.median(x[0] for x in a) / statistics.median(x[0] for x in b)
            print(f"| {r} | {medians(a)} | {medians(b)} | {ratio:.3f}x |", flush=True)
        return
    print("| round | kernel | first 5: ms, MHz, W | last 10: ms, MHz, W |\n|---|---|---|---|")
    for r in range(args.rounds):
        for name, fn in kernels:
            samples = per_call(fn, calls=args.calls, extra=telemetry)[0]
            print(f"| {r} | {name} | {medians(samples[:5])} | {medians(samples[-10:])} |", flush=True)


if __name__ == "__main__":
    main()
