"""Scratch (s34): the cached question of probe_host with the prefix and streaming split rules switched in one process."""
import sys
from hs_kernels import gpu
from sglang_hs import probe_host as ph

args = ph.parse(sys.argv[1:])
backend, locs = ph.build(args)
question = ph.steps(args, backend, locs)["question, hs"]
auto = gpu.prefill_splits, gpu.stream_splits
one_p, one_s = (lambda *a: 1), (lambda *a: 1)
modes = {"auto": auto, "prefill 1": (one_p, auto[1]), "stream 1": (auto[0], one_s), "both 1": (one_p, one_s)}
for r in range(2):
    for name, (pf, st) in (modes.items() if r == 0 else reversed(modes.items())):
        gpu.prefill_splits, gpu.stream_splits = pf, st
        host, total, ops = ph.timed(question, args.device, args.repeats)
        print(f"| {args.prefix} | {args.question} | {name} | {r} | {host * 1e3:.2f} | {total * 1e3:.2f} | {ops} |", flush=True)
