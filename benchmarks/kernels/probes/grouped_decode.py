"""An extend's tokens as decode rows (short extends): each row reading its own blocks, against a request's rows
sharing them a tile at a time (``decode_attention(groups=...)``). Llama-3.1-8B's retrieval half by default (16/4
heads, d 128), bf16, a served prefix (2:4 blocks but the first and last four), maps read through pages; per call,
inside a CUDA graph of 32 calls (a forward's layers), as short extends replay it.

    python -m benchmarks.kernels.probes.grouped_decode [--prefixes 4096,16384,32768,65536] [--questions 16,64]
        [--splits 8,32,128] [--warps 8] [--stages 3]
    (from the repository root: it reads tests/kv_cases.py). ``--splits``: the grouped rows also at these split counts
    (a column each), against the default ``triton_decode_splits``; ``--warps`` / ``--stages``: likewise at these
    warp / pipeline stage counts.
"""

import argparse
import sys

import torch
import triton.testing

from hs_kernels import gpu
from benchmarks.kernels.probes.prefix_path_timing import served_pools

sys.path.insert(0, "tests")
from kv_cases import extend_rows, paged, rel_err  # noqa: E402


def graph_us(fn, calls: int = 32) -> float:
    return triton.testing.do_bench_cudagraph(lambda: [fn() for _ in range(calls)], rep=60, return_mode="median") * 1e3 / calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefixes", default="4096,16384,32768,65536")
    ap.add_argument("--questions", default="16,64")
    ap.add_argument("--heads", default="16/4/128", help="query heads / KV heads / head_dim")
    options = {"splits": "num_splits", "warps": "num_warps", "stages": "num_stages"}  # flag: decode_attention's keyword
    for flag in options:
        ap.add_argument(f"--{flag}", default="", help=f"{flag} to time the grouped rows at, besides the default")
    args = ap.parse_args()
    variants = [(f"{n} {flag}", {key: int(n)})
                for flag, key in options.items() for n in getattr(args, flag).split(",") if n]
    h_q, h_kv, d = (int(x) for x in args.heads.split("/"))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    rows_a_tile = gpu.decode_tile_rows(h_q // h_kv, d)
    print(f"heads {h_q}/{h_kv}, d {d}, bf16; {rows_a_tile} rows a tile; us per call, graph of 32 calls")
    swept = "".join(f" grouped, {name} |" for name, _ in variants)
    print(f"| prefix | question | rows, CUDA | rows, Triton | grouped rows | x best per row | rel err |{swept}")
    print("|---|---|---|---|---|---|---|" + "---|" * len(variants), flush=True)
    for prefix in (int(x) for x in args.prefixes.split(",")):
        for t in (int(x) for x in args.questions.split(",")):
            k_pool, v_pool, k_index, v_index = served_pools(prefix + t, gen, h_kv, d)
            k_map, v_map, seq_pages = paged(k_index[None], v_index[None], gen)
            pages, groups, lens = extend_rows([(prefix, t)], 0, seq_pages)
            q = torch.randn(t, h_q, d, device="cuda", dtype=torch.bfloat16, generator=gen)

            def run(kernel, grouped, **launch):
                return gpu.decode_attention(q, k_pool, v_pool, k_map, v_map, lens, d ** -0.5, kernel=kernel,
                                            pages=pages, groups=groups if grouped else None, **launch)[0]

            err = rel_err(run("auto", True), run("triton", False))
            cuda = gpu.cuda_decode_supported(q, k_map)  # d 64 / 128, G <= 8, nvcc
            times = [graph_us(lambda k=k, g=g: run(k, g)) if k != "cuda" or cuda else float("nan")
                     for k, g in (("cuda", False), ("triton", False), ("auto", True))]
            best = min(times[:2] if cuda else times[1:2])
            sweep = "".join(f" {graph_us(lambda o=o: run('auto', True, **o)):.1f} |" for _, o in variants)
            print(f"| {prefix} | {t} | {times[0]:.1f} | {times[1]:.1f} | {times[2]:.1f} | {best / times[2]:.2f}x "
                  f"| {err:.1e} |{sweep}", flush=True)
            del k_pool, v_pool


if __name__ == "__main__":
    main()
