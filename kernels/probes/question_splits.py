"""The Triton prefill of a short question after a served prefix, by prefix split count: per call, the time with 20
calls queued back to back (as a model's layers queue them), the host's time to issue them and the GPU's busy time.
A split adds a merge launch and its buffers (host time, which decides short questions in an eager extend), fewer
splits leave each program more blocks (GPU time). Llama-3.1-8B's retrieval half by default (16/4 heads, d 128), bf16.

    python kernels/probes/question_splits.py [--prefixes 4096,8192,16384,32768] [--questions 64,256]
                                             [--splits 1,2,4,8,16]
"""

import argparse

import torch

from hs_kernels import gpu
from hs_kernels.timing import back_to_back
from prefix_path_timing import gpu_busy, served_pools


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefixes", default="4096,8192,16384,32768")
    ap.add_argument("--questions", default="64,256")
    ap.add_argument("--splits", default="1,2,4,8,16")
    ap.add_argument("--heads", default="16/4/128", help="query heads / KV heads / head_dim")
    args = ap.parse_args()
    h_q, h_kv, d = (int(x) for x in args.heads.split("/"))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    print("| prefix | question | splits | back to back | host | GPU busy |\n|---|---|---|---|---|---|", flush=True)
    for prefix in (int(x) for x in args.prefixes.split(",")):
        pools = served_pools(prefix, gen, h_kv, d)
        for t in (int(x) for x in args.questions.split(",")):
            q, k, v = (torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (h_q, h_kv, h_kv))
            programs = gpu.prefill_programs(t, h_q, h_kv)
            auto = gpu.prefill_split_plan(programs, prefix // 64, q.device)[0]
            want = gpu.triton_prefill(q, k, v, *pools, prefix, d ** -0.5, splits=1)[0]
            for s in [int(x) for x in args.splits.split(",")] + [None]:
                fn = lambda s=s: gpu.triton_prefill(q, k, v, *pools, prefix, d ** -0.5, splits=s)  # noqa: E731
                assert (fn()[0] - want).abs().max().item() < 2e-2
                name = f"auto ({auto})" if s is None else str(s)
                print(f"| {prefix} | {t} | {name} | {back_to_back(fn):.3f} | {back_to_back(fn, host_only=True):.3f} | "
                      f"{gpu_busy(fn):.3f} |", flush=True)


if __name__ == "__main__":
    main()
