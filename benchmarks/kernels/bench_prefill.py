"""Prefill benchmark on the GPU: cuDNN / SDPA flash vs our Triton kernel (``triton_prefill``, the
serving path) and the CUDA Trans-Both kernel (``cuda_prefill``, sparse tensor cores).

    python -m benchmarks.kernels.bench_prefill [--tokens 32768] [--chunk 8192] [--triton-configs 128:8:2,64:4:2]
        [--question 64] [--densify-chunks 64,512,4096] [--densify-prefixes 74,1034,8202]

Triton rows: the sequence prefilled in chunks of ``--chunk`` tokens, as SGLang's chunked prefill
runs it, each chunk against the previous chunks stored in the pools with block sparsity S_K / S_V
(blocks chosen at random, 2:4 by magnitude); the times of all chunks are summed, so the causal work
is that of the one-shot prefill. "one shot" is the whole sequence as one chunk (dense, no pools).
The kernel variant follows the prefix's entries (K, V: 1 all dense, 2 all sparse, 3 mixed).

CUDA rows (sm_90): the same sequence in one chunk whose tiles are compressed first (``compress_chunk(k, v, S_K, 1)``,
every V tile 2:4, every K tile 2:4 or none), on wgmma.sp (``gpu.prefill_compressed_attention``, which reads 2:4 keys
pruned and stored dense), with and without the compression's time.

Shapes everywhere: Llama-3.1-8B attention (32 query heads, 8 KV heads, d 128, bf16), causal. Effective TFLOP/s
counts the dense causal work for every row: 4 * T^2 / 2 * H_q * D (two GEMMs, 2 FLOP per multiply-add, half the
score matrix), whatever the kernel skips.
``--question N``: then N query tokens after the whole sequence as a cached prefix, the prefix split
among programs (``prefill_splits``) vs not, and cuDNN on the same keys. ``--densify-chunks``: where
copying a prefix dense first pays (``gpu.prefill_densify``, ``gpu.prefix_copy_pays``). ``--cuda-prefix-chunks``: where the prefix's 2:4
blocks on the CUDA kernel pay (``gpu.cuda_prefix_pays``) and at which split counts.
"""

import argparse
import math
import sys

import torch

from benchmarks.kernels.bench_gpu import rel_err
from hs_kernels.timing import alternating, timeit
from hs_kernels.chunk_blocks import compress_chunk

H_Q, H_KV, D = 32, 8, 128
BENCH_S = ((0, 0), (0, 1), (1, 1), (1, 0), (0.5, 0.5))  # (S_K, S_V) of the chunk's tiles
DENSE_TFLOPS = 790.0  # H200 bf16 dense GEMM measured (cuBLAS, warm clocks); sparse tensor cores 2x


def flops(t: int, h_q: int = H_Q, d: int = D) -> float:
    return 4.0 * t * t / 2 * h_q * d


def bench(tokens: int, chunk: int, triton_configs) -> list[tuple]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    torch.manual_seed(0)
    dev = "cuda"
    t = tokens
    q = torch.randn(t, H_Q, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(t, H_KV, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(t, H_KV, D, device=dev, dtype=torch.bfloat16)
    f = flops(t)
    rows = []

    def add(name, ms, note=""):
        rows.append((name, ms, f / ms / 1e9 if ms else float("nan"), note))
        print(f"  {name:34s} {ms:8.3f} ms {f / ms / 1e9:7.1f} TFLOP/s {note}", flush=True)

    qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, k, v))  # [1, H, T, D]
    for name, backend in (("cuDNN (SDPA, enable_gqa)", SDPBackend.CUDNN_ATTENTION),
                          ("SDPA flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                ms = timeit(lambda: sdpa(qb, kb, vb, is_causal=True, enable_gqa=True))
            add(name, ms)
        except Exception as e:
            try:  # flash without GQA support: expanded K/V (not counted in the time)
                ke, ve = (x.repeat_interleave(H_Q // H_KV, dim=1) for x in (kb, vb))
                with sdpa_kernel([backend]):
                    ms = timeit(lambda: sdpa(qb, ke, ve, is_causal=True))
                add(name, ms, "(K/V expanded to 32 heads)")
            except Exception as e2:
                print(f"  {name}: unavailable ({type(e).__name__}: {e}; {type(e2).__name__})", flush=True)
    ref_out = None
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        ref_out = sdpa(qb, kb, vb, is_causal=True, enable_gqa=True)[0].transpose(0, 1)

    bench_triton(q, k, v, chunk, triton_configs, add, ref_out)
    bench_cuda(q, k, v, chunk, add)
    return rows


def bench_cuda(q, k, v, chunk: int, add) -> None:
    """The CUDA Trans-Both kernel on wgmma.sp (``gpu.prefill_compressed_attention``), one shot, every V tile 2:4 and
    every K tile 2:4 (S_K = 1) or dense (S_K = 0): the entry point's whole cost (key norms, kernel, underflow check),
    the same alternating with cuDNN call by call (one clock for both: ``alternating``), then with the chunk's
    compression (alternating with the call without it); then chunks of ``chunk`` tokens over the previous ones stored
    2:4 (S = 1/1), ``gpu.prefill_attention`` on the Triton kernel alone and "auto" (the prefix's 2:4 blocks on the CUDA
    kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from hs_kernels import cuda_prefill, gpu
    from hs_kernels.chunk_blocks import chunk_as_dense

    if not cuda_prefill.supports(q, k.shape[1]):
        print("  CUDA wgmma.sp prefill: not supported here (needs sm_90, nvcc, bf16, d 128)", flush=True)
        return
    qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, k, v))

    def cudnn_call():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            sdpa(qb, kb, vb, is_causal=True, enable_gqa=True)

    for s_k in (1, 0):
        compressed = compress_chunk(k, v, s_k, 1)
        out, _ = gpu.prefill_compressed_attention(q, k, v, compressed)
        kd, vd = (x.transpose(0, 1)[None] for x in chunk_as_dense(k, v, compressed))
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            same_keys = sdpa(q.transpose(0, 1)[None], kd, vd, is_causal=True, enable_gqa=True)[0].transpose(0, 1)
        note = f"rel.err vs cuDNN on the same keys {rel_err(out, same_keys):.1e}"
        def run():
            return gpu.prefill_compressed_attention(q, k, v, compressed)

        add(f"ours CUDA wgmma.sp one shot, S_K={s_k} S_V=1", timeit(run), note)
        cudnn, ours = alternating(cudnn_call, run, iters=40)
        add("  the same, alternating with cuDNN call by call", ours,
            f"cuDNN {cudnn:.2f} ms in the same turns: {cudnn / ours:.2f}x at one clock")
        alone, with_c = alternating(
            run, lambda: gpu.prefill_compressed_attention(q, k, v, compress_chunk(k, v, s_k, 1)))
        add(f"  the same with compress_chunk({s_k}, 1)", with_c,
            f"{with_c - alone:+.2f} ms over the call without it, alternating")
    # chunked over a 2:4 prefix (the serving path): the prefix's 2:4 blocks on the kernel, the chunk on Triton
    gen = torch.Generator(device=q.device)
    gen.manual_seed(3)
    (k_pool, k_idx), (v_pool, v_idx) = _pools_at(k, "k", 1, gen), _pools_at(v, "v", 1, gen)
    ref_out = torch.cat(_chunked(q, k, v, chunk, k_pool, v_pool, k_idx, v_idx, kernel="triton"))
    for kernel in ("triton", "auto"):
        run = lambda: _chunked(q, k, v, chunk, k_pool, v_pool, k_idx, v_idx, kernel=kernel)  # noqa: E731
        note = "" if kernel == "triton" else f"rel.err vs the Triton row {rel_err(torch.cat(run()), ref_out):.1e}"
        add(f"chunked {chunk}, prefix S_K=1 S_V=1, kernel={kernel}", timeit(run), note)


def _pools_at(x: torch.Tensor, operand: str, s: float, gen: torch.Generator):
    """A pool holding the blocks of ``x [T, H_kv, D]`` (T a multiple of 64), a random fraction ``s``
    of them 2:4-compressed, and its ``[H_kv, T / 64]`` index map."""
    from hs_kernels.compressed_kv import to_blocks
    from hs_kernels.pool import BlockPool
    from hs_kernels.pruner import element_mask

    blocks = to_blocks(x)
    sparse = torch.rand(blocks.shape[:2], generator=gen, device=x.device) < s
    return BlockPool.holding(operand, blocks, sparse, element_mask(blocks, operand))


def _chunked(q, k, v, chunk: int, k_pool, v_pool, k_idx, v_idx, **options) -> list[torch.Tensor]:
    """The sequence prefilled in chunks of ``chunk`` tokens by ``gpu.prefill_attention``, each after the previous
    ones as its prefix in the pools; the chunks' outputs."""
    from hs_kernels import gpu

    outs = []
    for c0 in range(0, q.shape[0], chunk):
        c1 = min(q.shape[0], c0 + chunk)
        outs.append(gpu.prefill_attention(q[c0:c1], k[c0:c1], v[c0:c1], k_pool, v_pool, k_idx[:, :c0 // 64],
                                          v_idx[:, :c0 // 64], c0, **options)[0])
    return outs


def bench_triton(q, k, v, chunk: int, configs, add, ref_out) -> None:
    from hs_kernels import gpu
    from hs_kernels.pool import BlockPool

    t = q.shape[0]
    gen = torch.Generator(device=q.device)
    gen.manual_seed(0)
    empty = [BlockPool.allocate(op, D, 0, 0, q.dtype, q.device) for op in ("k", "v")]
    none = torch.zeros((H_KV, 0), dtype=torch.int32, device=q.device)
    for block_m, warps, stages, *rest in configs:
        chunk_n = rest[0] if rest and rest[0] else None
        heads = rest[1] if len(rest) > 1 else None
        hg = gpu.prefill_tiles(t, H_Q, H_KV, block_m, heads)[0]
        tag = (f"[{block_m} rows, {warps} warps, {stages} stages, {hg} heads per tile"
               f"{f', {chunk_n}-key chunk tiles' if chunk_n else ''}]")
        opts = dict(block_m=block_m, num_warps=warps, num_stages=stages, chunk_n=chunk_n, heads=heads)
        one = lambda: gpu.prefill_attention(q, k, v, *empty, none, none, 0, **opts)  # noqa: E731
        out, _ = one()
        err = rel_err(out, ref_out)
        add(f"Triton one shot, dense {tag}", timeit(one), f"rel.err vs cuDNN {err:.1e}")
        # densify None: the default (the prefix copied whole under TMA pairs, else prefill_densify); False: read in
        # place (a dense prefix by pointer pairs through the index maps, 2:4 blocks unpacked by each program);
        # prefix_n None: the default (prefill_prefix_n); 64: a dense (or densified) prefix one block per key tile
        runs = [(s, False, None, None) for s in BENCH_S] + [
            ((0, 0), False, False, None), ((0.5, 0.5), True, False, None), ((1, 1), False, False, None),
            ((0, 1), False, False, None), ((0.5, 0.5), False, False, None), ((0, 0), False, None, 64),
            ((1, 1), False, None, 64), ((0.5, 0.5), False, None, 64)]
        for (sk, sv), select, densify, prefix_n in runs:
            if prefix_n == 64 and gpu.prefill_prefix_n(block_m) == 64:
                continue
            (k_pool, k_idx), (v_pool, v_idx) = _pools_at(k, "k", sk, gen), _pools_at(v, "v", sv, gen)

            chunked = lambda: _chunked(q, k, v, chunk, k_pool, v_pool, k_idx, v_idx, kernel="triton",  # noqa: E731
                                       **opts, select=select, densify=densify, prefix_n=prefix_n)
            kinds = gpu._entry_kinds(k_idx, v_idx, k_idx.shape[1])
            how = (" select" if select else (" read in place" if densify is False else "")) + (
                f" {prefix_n}-key prefix tiles" if prefix_n else "")
            add(f"Triton chunked {chunk}, S_K={sk} S_V={sv}, kernel {kinds}{how} {tag}", timeit(chunked))
            del k_pool, v_pool


def bench_question(prefix: int, t: int) -> None:
    """A ``t``-token question after a cached ``prefix`` (the cached-prefix TTFT case): the prefix split
    among programs (auto) vs one program per (tile, head) walking all of it; cuDNN attends the same
    keys without a mask (the question's own causal part is negligible)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from hs_kernels import gpu

    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    q, k, v = (torch.randn(t, h, D, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (H_Q, H_KV, H_KV))
    pk, pv = (torch.randn(prefix, H_KV, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    qb = q.transpose(0, 1)[None]
    kb, vb = (torch.cat((p_, x)).transpose(0, 1)[None] for p_, x in ((pk, k), (pv, v)))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        cudnn = timeit(lambda: sdpa(qb, kb, vb, enable_gqa=True))
    print(f"\n{t}-token question after a {prefix}-token prefix ({H_Q}/{H_KV} heads, d {D}, bf16); cuDNN {cudnn:.3f} ms\n"
          "| prefix S_K/S_V | heads per tile | splits | ms | vs cuDNN | vs 1 head, unsplit |\n|---|---|---|---|---|---|",
          flush=True)
    for sk, sv in ((0, 0), (1, 1)):
        (k_pool, k_idx), (v_pool, v_idx) = _pools_at(pk, "k", sk, gen), _pools_at(pv, "v", sv, gen)
        run = lambda h, n: lambda: gpu.triton_prefill(q, k, v, k_pool, v_pool, k_idx, v_idx, prefix,  # noqa: E731
                                                       D ** -0.5, splits=n, heads=h)
        one = timeit(run(1, 1))
        for heads in (1, None):
            hg = gpu.prefill_tiles(t, H_Q, H_KV, gpu.prefill_launch(D)[0], heads)[0]
            programs = gpu.prefill_programs(t, H_Q, H_KV, gpu.prefill_launch(D)[0], heads)
            auto = gpu.prefill_split_plan(programs, prefix // 64, q.device)[0]
            for n in (1, auto):
                ms = one if (heads, n) == (1, 1) else timeit(run(heads, n))
                print(f"| {sk}/{sv} | {hg} | {n} | {ms:.3f} | {cudnn / ms:.2f}x | {one / ms:.2f}x |", flush=True)


def bench_densify(prefixes, lengths) -> None:
    """Where copying the prefix dense first (``densify``) starts to pay: chunks of ``lengths`` tokens after a cached
    prefix of each of ``prefixes`` tokens stored at S = 1/1, 0.5/0.5 and 0/0 (for an all-dense prefix "on" is the
    copy the TMA path makes), default launch, off / on / default alternated three times (the fastest of each), and
    whether the default copied (``gpu.prefill_densify``, ``gpu.prefix_copy_pays`` on the TMA path)."""
    from hs_kernels import gpu

    gen = torch.Generator(device="cuda")
    gen.manual_seed(2)
    print("\nChunks after a cached prefix: densify off / on / default (default launch)\n"
          "| prefix | S_K/S_V | chunk tokens | readers x blocks | off ms | on ms | off / on | default ms | default |\n"
          "|---|---|---|---|---|---|---|---|---|", flush=True)
    for prefix in prefixes:
        pk, pv = (torch.randn(prefix, H_KV, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        used = -(-prefix // 64)
        for sk, sv in ((1, 1), (0.5, 0.5), (0, 0)):
            (k_pool, k_idx), (v_pool, v_idx) = _pools_at(pk, "k", sk, gen), _pools_at(pv, "v", sv, gen)
            for t in lengths:
                q, k, v = (torch.randn(t, h, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                           for h in (H_Q, H_KV, H_KV))
                run = lambda on: lambda: gpu.triton_prefill(q, k, v, k_pool, v_pool, k_idx, v_idx,  # noqa: E731
                                                            prefix, D ** -0.5, densify=on)
                times = {on: [] for on in (False, True, None)}
                for _ in range(3):
                    for on in times:
                        times[on].append(timeit(run(on), iters=15))
                off, on, default = (min(times[x]) for x in (False, True, None))
                readers = gpu.prefill_programs(t, H_Q, H_KV, gpu.prefill_launch(D)[0]) // H_KV
                picks = _copies(gpu, run(None))
                print(f"| {prefix} | {sk}/{sv} | {t} | {readers * used} | {off:.3f} | {on:.3f} | {off / on:.2f}x | "
                      f"{default:.3f} | {'on' if picks else 'off'} |", flush=True)


def _copies(gpu, fn) -> bool:
    """Whether ``fn`` copies its prefix dense first (calls ``gpu._densified``)."""
    copy, calls = gpu._densified, []
    gpu._densified = lambda *a, **kw: calls.append(1) or copy(*a, **kw)
    try:
        fn()
    finally:
        gpu._densified = copy
    return bool(calls)


def bench_cuda_prefix(prefixes, lengths, splits=()) -> None:
    """Chunks of ``lengths`` tokens after a cached prefix of each of ``prefixes`` tokens stored 2:4 (S = 1/1):
    ``gpu.prefill_attention`` on the Triton kernel alone vs the prefix on the CUDA kernel (``kernel="cuda"``, its
    default split count), what "auto" picks, and the CUDA path at each of ``splits``."""
    from hs_kernels import gpu

    gen = torch.Generator(device="cuda")
    gen.manual_seed(4)
    print("\nChunks after a prefix stored 2:4 (S = 1/1): kernel triton / cuda (its default splits), then forced splits\n"
          "| prefix | chunk tokens | CTAs | splits | triton ms | cuda ms | triton / cuda | rel.err | auto | "
          "splits: cuda ms |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for prefix in prefixes:
        pk, pv = (torch.randn(prefix, H_KV, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        (k_pool, k_idx), (v_pool, v_idx) = _pools_at(pk, "k", 1, gen), _pools_at(pv, "v", 1, gen)
        for t in lengths:
            q, k, v = (torch.randn(t, h, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                       for h in (H_Q, H_KV, H_KV))
            run = lambda kernel: lambda: gpu.prefill_attention(q, k, v, k_pool, v_pool, k_idx, v_idx,  # noqa: E731
                                                               prefix, kernel=kernel)
            split = lambda n: lambda: gpu.cuda_prefix_prefill(  # noqa: E731
                q, k, v, k_pool, v_pool, prefix, D ** -0.5, gpu.cuda_prefix_blocks(k_pool, v_pool, k_idx, v_idx, prefix),
                splits=n)
            err = rel_err(run("cuda")()[0], run("triton")()[0])
            tri, cud = timeit(run("triton")), timeit(run("cuda"))
            auto = "cuda" if gpu.cuda_prefix_pays(q, k_pool, v_pool, k_idx, prefix) else "triton"
            forced = " ".join(f"{n}: {timeit(split(n)):.3f}" for n in splits)
            print(f"| {prefix} | {t} | {gpu.cp.ctas(t, H_Q, H_KV)} | "
                  f"{gpu.cuda_prefix_splits(t, H_Q, H_KV, prefix // 64, q.device)} | {tri:.3f} | {cud:.3f} | "
                  f"{tri / cud:.2f}x | {err:.1e} | {auto} | {forced} |", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--chunk", type=int, default=8192, help="Triton rows: chunked-prefill chunk (a multiple of 64)")
    ap.add_argument("--triton-configs", default="128:8:3,128:8:2,64:4:3", help="block_m:num_warps:num_stages[:chunk_n[:heads]] list (heads per tile: default the widest)")
    ap.add_argument("--question", type=int, default=64, help="also time a question of this many tokens after a "
                    "--tokens prefix (0: skip)")
    ap.add_argument("--densify-chunks", default="", help="also time chunks of these many tokens (a list) after a "
                    "prefix (of --tokens, or each of --densify-prefixes) at S = 1/1, 0.5/0.5, 0/0, densify off / on / default")
    ap.add_argument("--densify-prefixes", default="", help="the prefix lengths of --densify-chunks (a list)")
    ap.add_argument("--cuda-prefix-chunks", default="", help="also time chunks of these many tokens (a list) after a "
                    "2:4 prefix (of --tokens, or each of --cuda-prefixes), Triton alone vs the prefix on the CUDA kernel")
    ap.add_argument("--cuda-prefixes", default="", help="the prefix lengths of --cuda-prefix-chunks (a list; a served "
                    "prefix ends inside a block, e.g. 32778, which the Triton part then attends too)")
    ap.add_argument("--cuda-prefix-splits", default="", help="also time --cuda-prefix-chunks at these split counts of "
                    "the CUDA part (a list)")
    a = ap.parse_args(argv)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; T={a.tokens} causal, "
          f"{H_Q}/{H_KV} heads, d {D}, bf16; FLOPs = 4*T^2/2*H_q*D = {flops(a.tokens) / 1e12:.2f} T", flush=True)
    configs = [tuple(int(y) for y in x.split(":")) for x in a.triton_configs.split(",") if x]
    rows = bench(a.tokens, a.chunk, configs)
    cudnn = next((r[1] for r in rows if r[0].startswith("cuDNN")), math.nan)
    print("\n| kernel | ms | eff. TFLOP/s | vs cuDNN | of 790 dense | note |\n|---|---|---|---|---|---|")
    for name, ms, tf, note in rows:
        print(f"| {name} | {ms:.2f} | {tf:.0f} | {cudnn / ms:.2f}x | {tf / DENSE_TFLOPS:.0%} | {note} |")
    if a.question:
        bench_question(a.tokens, a.question)
    if a.densify_chunks:
        bench_densify([int(x) for x in (a.densify_prefixes or str(a.tokens)).split(",")],
                      [int(x) for x in a.densify_chunks.split(",")])
    if a.cuda_prefix_chunks:
        bench_cuda_prefix([int(x) for x in (a.cuda_prefixes or str(a.tokens)).split(",")],
                          [int(x) for x in a.cuda_prefix_chunks.split(",")],
                          [int(x) for x in a.cuda_prefix_splits.split(",") if x])


if __name__ == "__main__":
    sys.exit(main())
