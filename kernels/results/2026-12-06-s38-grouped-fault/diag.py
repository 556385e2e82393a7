"""The grouped decode's illegal address on an H100 (thirty-eighth session): each case of
tests/test_kernels_gpu_decode.py::test_grouped_rows_match_reference in its own process (a fault ends the context),
over split counts and pipeline stages. ``python diag.py`` prints a table; ``python diag.py CASE SPLITS STAGES`` runs
one (0 = the default split rule)."""
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../tests"))
CASES = [
    ([(4096, 64)], 0, 32, 8, 128, torch.bfloat16, 1.0, 1.0),
    ([(700, 1), (1040, 33), (90, 20)], 10, 32, 8, 128, torch.float16, 0.5, 0.5),
    ([(2000, 40)], 8, 9, 3, 64, torch.bfloat16, 0.0, 1.0),
    ([(1500, 24)], 0, 8, 2, 256, torch.bfloat16, 0.5, 0.5),
    ([(3000, 16)], 0, 64, 1, 64, torch.bfloat16, 0.5, 0.5),
]


def one(case: int, splits: int, stages: int) -> str:
    from kv_cases import extend_rows, make_case, paged, rel_err

    from hs_kernels import attention as ref
    from hs_kernels import gpu
    seqs, padding, h_q, h_kv, d, dtype, p_k, p_v = CASES[case]
    gen = torch.Generator(device="cuda").manual_seed(7)
    k_pool, v_pool, k_index, v_index, _ = make_case(len(seqs), h_kv, d, [p + t for p, t in seqs], p_k, p_v, dtype,
                                                    gen, "cuda")
    k_map, v_map, seq_pages = paged(k_index, v_index, gen)
    pages, groups, sl = extend_rows(seqs, padding, seq_pages)
    q = torch.randn(len(sl), h_q, d, generator=gen, device="cuda").to(dtype)
    rows = gpu.decode_tile_rows(h_q // h_kv, d)
    if not splits:
        splits = gpu.triton_decode_splits(-(-len(sl) // rows), h_kv, pages.shape[-1], gpu._sm_count(q.device), rows)
    out, lse = gpu.triton_decode(q, k_pool, v_pool, k_map, v_map, sl, 0.09, splits, num_stages=stages, pages=pages,
                                 groups=groups, tile_rows=rows)
    torch.cuda.synchronize()
    r_out, _ = ref.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, 0.09, pages=pages)
    return f"ok {splits} splits, err {rel_err(out, r_out):.1e}"


if __name__ == "__main__":
    if len(sys.argv) == 4:
        print(one(*map(int, sys.argv[1:])))
        sys.exit(0)
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    print("| case | splits | stages | result |\n|---|---|---|---|")
    for case in range(len(CASES)):
        for splits in (0, 1, 2, 4):
            for stages in (1, 2):
                run = subprocess.run([sys.executable, __file__, str(case), str(splits), str(stages)], env=env,
                                     capture_output=True, text=True, timeout=120)
                tail = (run.stdout + run.stderr).strip().splitlines()
                result = tail[-1][:90] if run.returncode == 0 else "FAIL " + next(
                    (t for t in reversed(tail) if "Error" in t), tail[-1] if tail else "")[:80]
                print(f"| {case} | {splits or 'rule'} | {stages} | {result} |", flush=True)
