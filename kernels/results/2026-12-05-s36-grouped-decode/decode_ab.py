"""The Triton decode's one-row programs (what every decode step runs where the CUDA decode does not apply) after the
thirty-sixth session's grouped rows, against the kernel before them, in one process, alternating: B=8, 32K,
Llama-3.1-8B heads (32/8, d 128, bf16), the benchmark's pools (kernels/bench_gpu.py), maps per sequence and through
pages, triton.testing.do_bench, default splits and launch options.

    git archive a6b7782 kernels | tar -x -C /tmp/before --strip-components=0   (then /tmp/before/kernels)
    python kernels/results/2026-12-05-s36-grouped-decode/decode_ab.py /tmp/before/kernels
"""

import importlib
import os
import sys
import tempfile

import torch

from hs_kernels import gpu
from hs_kernels.bench_gpu import bench, decode_inputs, rel_err

sys.path.insert(0, "tests")
from kv_cases import paged  # noqa: E402


def before(kernels_dir):
    root = tempfile.mkdtemp()
    os.symlink(os.path.abspath(kernels_dir), os.path.join(root, "hs_kernels_before"))
    sys.path.insert(0, root)
    return importlib.import_module("hs_kernels_before.gpu"), importlib.import_module("hs_kernels_before.pool").BlockPool


def main():
    old, old_pool = before(sys.argv[1])
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    b, ctx, h_q, d = 8, 32768, 32, 128
    q = torch.randn(b, h_q, d, generator=gen, device="cuda").to(torch.bfloat16)
    sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    print("| S_K/S_V | maps | before ms | now ms | now / before | rel err |\n|---|---|---|---|---|---|")
    for s_k, s_v in ((1, 1), (0, 1), (0, 0)):
        k_pool, v_pool, k_index, v_index, _ = decode_inputs(b, ctx, s_k, s_v, gen)
        own = tuple(old_pool(p.operand, p.dense, p.values, p.meta) for p in (k_pool, v_pool))
        k_map, v_map, pages = paged(k_index, v_index, gen)
        for name, maps in (("per sequence", (k_index, v_index, None)), ("pages", (k_map, v_map, pages))):
            splits = gpu.triton_decode_splits(b, 8, k_index.shape[2], gpu._sm_count(q.device))
            new_fn = lambda: gpu.triton_decode(q, k_pool, v_pool, *maps[:2], sl, d ** -0.5, splits, pages=maps[2])  # noqa: E731
            old_fn = lambda: old.triton_decode(q, *own, *maps[:2], sl, d ** -0.5, splits, pages=maps[2])  # noqa: E731
            err = rel_err(new_fn()[0], old_fn()[0])
            t_old, t_new = [], []
            for _ in range(3):
                t_old.append(bench(old_fn))
                t_new.append(bench(new_fn))
            a, n = min(t_old), min(t_new)
            print(f"| {s_k}/{s_v} | {name} | {a:.4f} | {n:.4f} | {n / a:.3f} | {err:.1e} |", flush=True)
        del k_pool, v_pool, own


if __name__ == "__main__":
    main()
