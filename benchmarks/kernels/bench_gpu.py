"""GPU benchmark of our kernels against cuDNN and SDPA flash, one table (run on the H200).

    python -m benchmarks.kernels.bench_gpu [--quick]

Llama-3.1-8B attention shapes: 32 query heads, 8 KV groups, d 128, bf16.
Decode: B=8, 32K context; ours at S_K/S_V in {0, 0.5, 1} (sink block and 256-token window stay
dense, as the pruner does), bytes = what the kernel must read (dense blocks, 2:4 values +
metadata, index maps); GB/s against the 4.3 TB/s copy ceiling. Compression: K and V of 32K tokens
x 8 KV heads (Triton; a loss-only pass as serving's first pass), against cuDNN causal prefill of the same 32K tokens.
Timing: triton.testing.do_bench (median), inputs far larger than L2; the CUDA decode at its default launch also
alternating with cuDNN call by call (``timing.alternating``, queued: no sync between calls), its ratio against
cuDNN in the same turns (one power state for both: docs/kernels.md, Measuring).
"""

import argparse
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hs_kernels import cuda_decode, gpu
from hs_kernels.timing import alternating
from hs_kernels.compressor import compress_blocks
from hs_kernels.format import BLOCK_SIZE, sparse_shapes
from hs_kernels.pruner import block_loss, element_mask

COPY_CEILING = 4.3e12
H_Q, H_KV, D = 32, 8, 128
DT = torch.bfloat16


def rel_err(x, y):
    return ((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-30)).item()


def bench(fn):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def decode_inputs(batch, ctx, s_k, s_v, gen, sparse_slots=0, h_kv=H_KV, d=D, dt=DT):
    """Pools and index maps with the pruner's layout: block 0 and the last 4 blocks dense, a fraction
    S of the others sparse (every KV head and sequence alike); slots contiguous per (seq, head).
    A pool gets at least ``sparse_slots`` sparse slots (unused ones make the kernel take its mixed path)."""
    nb = ctx // BLOCK_SIZE
    eligible = torch.zeros(nb, dtype=torch.bool)
    eligible[1: nb - 4] = True
    out, nbytes = [], 0
    for operand, s in (("k", s_k), ("v", s_v)):
        n_sparse = math.floor(s * int(eligible.sum()) + 0.5)
        sparse = torch.zeros(nb, dtype=torch.bool)
        sparse[torch.nonzero(eligible).flatten()[:n_sparse]] = True
        nd, ns = batch * h_kv * (nb - n_sparse), batch * h_kv * n_sparse
        alloc_ns = max(ns, sparse_slots)
        vshape = (BLOCK_SIZE, d // 2) if operand == "k" else (d, BLOCK_SIZE // 2)
        mshape = (BLOCK_SIZE, d // 16) if operand == "k" else (d, BLOCK_SIZE // 16)
        dense = torch.randn(max(nd, 1), BLOCK_SIZE, d, generator=gen, device="cuda").to(dt)
        values = torch.randn(alloc_ns, *vshape, generator=gen, device="cuda").to(dt)
        nibbles = torch.tensor([4, 8, 12, 9, 13, 14], device="cuda")  # the six valid (idx0, idx1)
        pick = nibbles[torch.randint(0, 6, (alloc_ns, *mshape, 4), generator=gen, device="cuda")]
        meta = (pick << torch.arange(0, 16, 4, device="cuda")).sum(-1).to(torch.int32)
        meta = torch.where(meta >= 0x8000, meta - 0x10000, meta).to(torch.int16)
        from hs_kernels.pool import BlockPool

        pool = BlockPool(operand, dense, values, meta)
        rows = torch.arange(batch * h_kv).view(batch, h_kv, 1)
        d_rank = torch.cumsum(~sparse, 0) - 1
        s_rank = torch.cumsum(sparse, 0) - 1
        index = torch.where(sparse, ~(rows * n_sparse + s_rank), rows * (nb - n_sparse) + d_rank)
        out += [pool, index.to(torch.int32).cuda()]
        nbytes += nd * BLOCK_SIZE * d * 2 + ns * (BLOCK_SIZE * d // 2 * 2 + BLOCK_SIZE * d // 16 * 2)
        nbytes += batch * h_kv * nb * 4
    k_pool, k_index, v_pool, v_index = out
    return k_pool, v_pool, k_index, v_index, nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--decode-only", action="store_true", help="skip prefill and compression")
    ap.add_argument("--compress-only", action="store_true", help="skip decode")
    ap.add_argument("--kernel-choice", action="store_true",
                    help="only the decode entry point's kernels (Triton, CUDA, auto) at default launch across shapes")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="with --kernel-choice: time each call replayed from a CUDA graph, as serving decodes (no host launch cost)")
    args = ap.parse_args()
    if args.kernel_choice:
        return kernel_choice(args.cuda_graphs)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    b, ctx = args.batch, args.ctx
    rows = []
    if not args.compress_only:
        decode_rows(rows, gen, b, ctx, args.quick)
    if not args.decode_only:
        compression_rows(rows, gen, args.quick)
    print_table(rows, b, ctx)


def decode_rows(rows, gen, b, ctx, quick):
    """Decode of B sequences of ctx tokens: cuDNN, SDPA flash and ours at each sparsity."""
    dense_bytes = 2 * b * H_KV * ctx * D * 2
    q = torch.randn(b, H_Q, D, generator=gen, device="cuda").to(DT)
    kd = torch.randn(b, H_KV, ctx, D, generator=gen, device="cuda").to(DT)
    vd = torch.randn(b, H_KV, ctx, D, generator=gen, device="cuda").to(DT)
    for name, backend in (("cuDNN SDPA", SDPBackend.CUDNN_ATTENTION), ("SDPA flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                ms = bench(lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True))
            rows.append((f"decode B={b} {ctx // 1024}K", name, ms, dense_bytes / ms / 1e6, None))
        except RuntimeError as e:
            rows.append((f"decode B={b} {ctx // 1024}K", f"{name} (failed: {str(e)[:40]})", float("nan"), 0, None))
    base = rows[0][2]

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True)

    settings = [(0, 0), (1, 1)] if quick else [(0, 0), (0.5, 0), (1, 0), (0, 0.5), (0, 1), (0.5, 0.5), (1, 1)]
    sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    tuning = [{"num_splits": n} for n in (8, 10, 12, 16, 24)] + [{"num_stages": 3}, {"num_warps": 4}, {"num_warps": 8}]
    scale = 1.0 / math.sqrt(D)
    default = gpu.triton_decode_splits(b, H_KV, ctx // BLOCK_SIZE, torch.cuda.get_device_properties().multi_processor_count)
    for s_k, s_v in settings:
        for mixed in ((False, True) if (s_k, s_v) == (0, 0) else (False,)):
            k_pool, v_pool, k_index, v_index, nbytes = decode_inputs(b, ctx, s_k, s_v, gen, sparse_slots=int(mixed))
            variants = [{}] if (s_k, s_v) not in ((0, 0), (1, 1)) or quick or mixed else [
                {}, *[o for o in tuning if o.get("num_splits") != default]]
            for opts in variants:
                splits = opts.get("num_splits", default)
                launch = {k: v for k, v in opts.items() if k != "num_splits"}
                ms = bench(lambda: gpu.triton_decode(q, k_pool, v_pool, k_index, v_index, sl, scale, splits, **launch))
                label = (f"ours S_K={s_k} S_V={s_v}" + (" (mixed kernel)" if mixed else "")
                         + ("".join(f" {k.replace('num_', '')}={v}" for k, v in opts.items()) or f" (splits {default})"))
                rows.append((f"decode B={b} {ctx // 1024}K", label, ms, nbytes / ms / 1e6, base / ms))
            for slots in (cuda_decode.SLOTS if cuda_decode.available() and not mixed else ()):
                if quick and slots != cuda_decode.DEFAULT_SLOTS:
                    continue
                cuda_default = gpu.cuda_decode_splits(b, H_KV, ctx // BLOCK_SIZE, q, slots)
                err = rel_err(gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, scale, cuda_default, slots=slots)[0],
                              gpu.triton_decode(q, k_pool, v_pool, k_index, v_index, sl, scale, default)[0])
                for n in [cuda_default] + ([] if quick else [x for x in (6, 8, 12, 16, 24, 48) if x != cuda_default]):
                    ms = bench(lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, scale, n, slots=slots))
                    rows.append((f"decode B={b} {ctx // 1024}K", f"ours CUDA mma.sp S_K={s_k} S_V={s_v} slots={slots} "
                                 f"splits={n}" + (f" (vs Triton {err:.0e})" if n == cuda_default else ""), ms,
                                 nbytes / ms / 1e6, base / ms))
                if slots == cuda_decode.DEFAULT_SLOTS:  # at one clock: ratio against cuDNN in the same turns
                    c, ms = alternating(cudnn, lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, scale,
                                                                       cuda_default, slots=slots), iters=200,
                                         queued=True)
                    rows.append((f"decode B={b} {ctx // 1024}K", f"ours CUDA mma.sp S_K={s_k} S_V={s_v} splits="
                                 f"{cuda_default}, alternating with cuDNN ({c:.4f} ms)", ms, nbytes / ms / 1e6, c / ms))
            if (s_k, s_v) == (1, 1):  # the product entry point: host-side checks and dispatch included
                ms = bench(lambda: gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl))
                rows.append((f"decode B={b} {ctx // 1024}K", f"ours S_K={s_k} S_V={s_v} via decode_attention", ms,
                             nbytes / ms / 1e6, base / ms))
            del k_pool, v_pool
    del kd, vd


CHOICE_SHAPES = [  # (batch, context, query heads, KV heads, head_dim, dtype)
    (1, 4096, 32, 8, 128, torch.bfloat16), (1, 32768, 32, 8, 128, torch.bfloat16),
    (1, 131072, 32, 8, 128, torch.bfloat16), (8, 8192, 32, 8, 128, torch.bfloat16),
    (32, 32768, 32, 8, 128, torch.bfloat16), (64, 4096, 32, 8, 128, torch.bfloat16),
    (8, 32768, 32, 8, 128, torch.float16), (8, 32768, 28, 4, 128, torch.bfloat16),  # G 7 (Qwen2-7B)
    (8, 32768, 64, 8, 128, torch.bfloat16), (8, 32768, 9, 3, 64, torch.bfloat16),  # G 8; SmolLM2's G 3, d 64
]


def kernel_choice(graphs: bool = False):
    """The decode entry point's two kernels at their default launch, and what ``kernel="auto"`` runs,
    across batch, context, GQA ratio, head_dim and dtype; one markdown table. ``graphs``: each call timed as
    a CUDA graph replay (``triton.testing.do_bench_cudagraph``), else launched from Python (``bench``); for
    the small shapes the latter includes the host's launch cost."""
    import triton.testing

    time_it = (lambda fn: triton.testing.do_bench_cudagraph(fn, rep=60, return_mode="median")) if graphs else bench
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    sms = torch.cuda.get_device_properties().multi_processor_count
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; decode at default launch, ms (x cuDNN); "
          f"{'CUDA graph replays' if graphs else 'launched from Python'}")
    print("| B | context | heads q/kv | d | dtype | S_K/S_V | cuDNN | Triton | CUDA | auto | CUDA / Triton |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for b, ctx, h_q, h_kv, d, dt in CHOICE_SHAPES:
        q = torch.randn(b, h_q, d, generator=gen, device="cuda").to(dt)
        kd = torch.randn(b, h_kv, ctx, d, generator=gen, device="cuda").to(dt)
        vd = torch.randn(b, h_kv, ctx, d, generator=gen, device="cuda").to(dt)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            base = time_it(lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True))
        del kd, vd
        sl = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        scale, nb = 1.0 / math.sqrt(d), ctx // BLOCK_SIZE
        for s_k, s_v in ((0, 0), (0, 1), (1, 1)):
            k_pool, v_pool, k_index, v_index, _ = decode_inputs(b, ctx, s_k, s_v, gen, h_kv=h_kv, d=d, dt=dt)
            tri = time_it(lambda: gpu.triton_decode(q, k_pool, v_pool, k_index, v_index, sl, scale,
                                                  gpu.triton_decode_splits(b, h_kv, nb, sms)))
            cuda = float("nan")
            if gpu.cuda_decode_supported(q, k_index):
                cuda = time_it(lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, scale,
                                                     gpu.cuda_decode_splits(b, h_kv, nb, q)))
            auto = time_it(lambda: gpu.decode_attention(q, k_pool, v_pool, k_index, v_index, sl))
            cells = " | ".join(f"{ms:.4f} ({base / ms:.2f}x)" for ms in (tri, cuda, auto))
            print(f"| {b} | {ctx} | {h_q}/{h_kv} | {d} | {str(dt)[6:]} | {s_k}/{s_v} | {base:.4f} | {cells} | "
                  f"{tri / cuda:.2f}x |", flush=True)
            del k_pool, v_pool


def compression_rows(rows, gen, quick):
    """Compression of 32K tokens x 8 KV heads (K and V), vs cuDNN causal prefill of the same tokens."""
    t = 32768
    qp = torch.randn(1, H_Q, t, D, generator=gen, device="cuda").to(DT)
    kp = torch.randn(1, H_KV, t, D, generator=gen, device="cuda").to(DT)
    vp = torch.randn(1, H_KV, t, D, generator=gen, device="cuda").to(DT)
    flops = 4 * H_Q * t * t * D / 2
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        pre = bench(lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=True))
    rows.append(("prefill 32K causal", "cuDNN SDPA", pre, None, None, flops / pre / 1e9))
    blocks = kp[0].reshape(H_KV * t // BLOCK_SIZE, BLOCK_SIZE, D)
    vblocks = vp[0].reshape(H_KV * t // BLOCK_SIZE, BLOCK_SIZE, D)
    cbytes = 2 * blocks.numel() * 2 * (1 + 0.5 + 1 / 16)  # read dense, write values + metadata
    n = blocks.shape[0]
    pools = {op: (torch.empty(n, *sparse_shapes(op, D)[0], dtype=DT, device="cuda"),
                  torch.empty(n, *sparse_shapes(op, D)[1], dtype=torch.int16, device="cuda")) for op in ("k", "v")}
    no_slots = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    pairs = ((blocks, "k"), (vblocks, "v"))
    loss_only = bench(lambda: [gpu.compress_magnitude(x, op, *pools[op], no_slots) for x, op in pairs])
    rows.append(("compress K+V 32Kx8", f"ours Triton, loss only ({100 * loss_only / pre:.2f}%)", loss_only,
                 2 * blocks.numel() * 2 / loss_only / 1e6, None))
    variants = [{}] + [{"num_warps": w} for w in ((2, 8) if not quick else ())]
    masks = [element_mask(x, op) for x, op in pairs]
    ref = [(*compress_blocks(x, m, op), block_loss(x, m)) for (x, op), m in zip(pairs, masks)]
    slots = torch.arange(n, dtype=torch.int32, device="cuda")
    bufs = [(*pools[op], torch.empty(n, device="cuda")) for op in ("k", "v")]
    for opts in variants:
        def run():
            for (x, op), buf in zip(pairs, bufs):
                gpu.triton_compress(x, op, slots, *buf, **opts)
            return bufs
        exact = all(torch.equal(a[0].view(torch.int16), b[0].view(torch.int16)) and torch.equal(a[1], b[1])
                    and torch.allclose(a[2], b[2], rtol=1e-5) for a, b in zip(run(), ref))
        ms = bench(run)
        label = "Triton" + "".join(f" {k}={v}" for k, v in opts.items())
        rows.append(("compress K+V 32Kx8", f"ours {label} ({100 * ms / pre:.2f}%){'' if exact else ' WRONG'}", ms,
                     cbytes / ms / 1e6, None))


def print_table(rows, b, ctx):
    dev = torch.cuda.get_device_name()
    print(f"\n{dev}, torch {torch.__version__}, B={b}, ctx={ctx}, {H_Q}/{H_KV} heads, d {D}, bf16")
    print(f"{'case':22} | {'kernel':44} | {'ms':>8} | {'GB/s':>7} | {'% 4.3TB/s':>9} | {'x cuDNN':>7}")
    print("-" * 112)
    for r in rows:
        case, name, ms, gbs, speed = r[:5]
        gb = "" if gbs is None else f"{gbs:7.0f}"
        pct = "" if gbs is None else f"{100 * gbs * 1e9 / COPY_CEILING:8.1f}%"
        sp = "" if speed is None else f"{speed:7.2f}"
        extra = f"  ({r[5]:.0f} TFLOP/s)" if len(r) > 5 else ""
        print(f"{case:22} | {name:44} | {ms:8.4f} | {gb:>7} | {pct:>9} | {sp:>7}{extra}")


if __name__ == "__main__":
    main()
