"""Candidate A/B driver of the CUDA Trans-Both prefill (``hs_kernels.cuda_prefill``, kernels/cuda/prefill_sp.cu, or
another version of that source with the same export): checks the kernel alone (no underflow fallback) against the
PyTorch oracle (the 2:4 pools decompressed, float32 attention) on small shapes with shuffled pool slots, without a
mask and causally at two query positions; then times it on Llama-3.1-8B attention (32 / 8 heads, d 128, bf16)
against cuDNN on the same keys: 8K queries over a 32K prefix without a mask (and the Triton serving path on the same
pools, whose chunk adds its own causal keys), and a 32K one-shot causal prefill (every block 2:4), the entry point's
whole cost (offsets, kernel, underflow check).

    python -m benchmarks.kernels.probes.trans_both_sp [--tokens 8192] [--prefix 32768] [--causal 32768] [--source other.cu]
        [--define HS_NO_EXP]
"""

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hs_kernels import cuda_prefill, gpu
from hs_kernels.timing import timeit
from hs_kernels.compressed_kv import to_blocks
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask

D, G = 128, 4


def queries(t: int, h_kv: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(t, h_kv * G, D, generator=gen, device=gen.device).to(torch.bfloat16)


def sparse_prefix(prefix: int, h_kv: int, gen: torch.Generator):
    """K and V pools holding ``prefix`` random tokens of ``h_kv`` heads, every block 2:4, slots shuffled (on the
    generator's device)."""
    out = []
    for op in ("k", "v"):
        x = torch.randn(prefix, h_kv, D, generator=gen, device=gen.device).to(torch.bfloat16)
        blocks = to_blocks(x)
        pool, index = BlockPool.holding(op, blocks, torch.ones(blocks.shape[:2], dtype=torch.bool, device=gen.device),
                                        element_mask(blocks, op))
        perm = torch.randperm(pool.values.shape[0], generator=gen, device=gen.device)
        values, meta = torch.empty_like(pool.values), torch.empty_like(pool.meta)
        values[perm], meta[perm] = pool.values, pool.meta
        out += [BlockPool(op, pool.dense, values, meta), (~perm[~index.long()]).to(torch.int32)]
    return out


def blocks(pool, index):
    return cuda_prefill.SparseBlocks(pool.values, pool.meta, index)


def run(q, k_pool, k_index, v_pool, v_index, q_pos0=None, defines=(), fallback=False):
    return cuda_prefill.attend(q, blocks(k_pool, k_index), blocks(v_pool, v_index), D ** -0.5, q_pos0,
                               fallback=fallback, defines=defines)


def dense(pool, index):
    """The pool's blocks of the index map [h_kv, nb], decompressed: [h_kv, 64 nb, d]."""
    return pool.gather(index).flatten(1, 2)


def reference(q, k, v, scale, q_pos0=None):
    """Float32 attention of q [t, h_q, d] over keys and values [h_kv, n, d], any GQA ratio; q_pos0 as
    ``cuda_prefill.attend``'s."""
    group = q.shape[1] // k.shape[0]
    k, v = (x.float().repeat_interleave(group, 0) for x in (k, v))
    s = torch.einsum("thd,hkd->htk", q.float(), k) * scale
    if q_pos0 is not None:
        pos = torch.arange(q.shape[0], device=q.device)[:, None] + q_pos0
        s = s.masked_fill(torch.arange(k.shape[1], device=q.device)[None, :] > pos, float("-inf"))
    return torch.einsum("htk,hkd->thd", s.softmax(-1), v), s.logsumexp(-1).t()


def report(what, result, r_out, r_lse):
    out, lse = result
    err = ((out.float() - r_out).norm() / r_out.norm()).item()
    print(f"check {what}: rel. err {err:.1e}, max |lse diff| {(lse - r_lse).abs().max().item():.1e}, "
          f"NaN {bool(out.isnan().any())}", flush=True)


def check(gen, defines):
    for t, prefix, h_kv in ((16, 64, 1), (40, 192, 1), (50, 640, 2), (333, 2048, 8)):
        q = queries(t, h_kv, gen)
        k_pool, k_index, v_pool, v_index = sparse_prefix(prefix, h_kv, gen)
        for q_pos0 in (None, prefix - t, (prefix - t) // 2):
            report(f"t {t} at {q_pos0} of prefix {prefix} heads {h_kv * G}/{h_kv}",
                   run(q, k_pool, k_index, v_pool, v_index, q_pos0, defines),
                   *reference(q, dense(k_pool, k_index), dense(v_pool, v_index), D ** -0.5, q_pos0))


def cudnn_ms(q, k_pool, k_index, v_pool, v_index, causal: bool) -> float:
    """cuDNN attention (SDPA) over the same keys, decompressed dense."""
    kd, vd = dense(k_pool, k_index)[None], dense(v_pool, v_index)[None]
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return timeit(lambda: F.scaled_dot_product_attention(q.transpose(0, 1)[None], kd, vd, is_causal=causal,
                                                             enable_gqa=True))


def bench(gen, t: int, prefix: int, defines):
    h_kv = 8
    q = queries(t, h_kv, gen)
    k_pool, k_index, v_pool, v_index = sparse_prefix(prefix, h_kv, gen)
    prefix_flop = 4.0 * t * h_kv * G * prefix * D
    ours = timeit(lambda: run(q, k_pool, k_index, v_pool, v_index, defines=defines))
    cudnn = cudnn_ms(q, k_pool, k_index, v_pool, v_index, causal=False)
    kc, vc = (torch.randn(t, h_kv, D, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(2))
    triton = timeit(lambda: gpu.triton_prefill(q, kc, vc, k_pool, v_pool, k_index, v_index, prefix, D ** -0.5))
    chunk_flop = 4.0 * t * h_kv * G * t / 2 * D
    print(f"\n{torch.cuda.get_device_name()}: {t} queries x {prefix} keys of a 2:4 prefix, 32/8 heads, d 128, bf16; "
          f"{cuda_prefill.library(G, D, defines).hs_prefill_sp_resident(0)} CTAs per SM\n"
          f"| kernel | ms | effective TFLOP/s |\n|---|---|---|\n"
          f"| cuDNN, the same keys dense, no mask | {cudnn:.3f} | {prefix_flop / cudnn / 1e9:.0f} |\n"
          f"| wgmma.sp Trans-Both, static offset | {ours:.3f} | {prefix_flop / ours / 1e9:.0f} |\n"
          f"| Triton prefill (serving path: prefix densified, + the chunk's causal keys) | {triton:.3f} | "
          f"{(prefix_flop + chunk_flop) / triton / 1e9:.0f} |", flush=True)


def bench_causal(gen, t: int, defines):
    """One shot: t tokens whose keys are all compressed, each query sees the keys at or before it."""
    h_kv = 8
    q = queries(t, h_kv, gen)
    k_pool, k_index, v_pool, v_index = sparse_prefix(t, h_kv, gen)
    ours = timeit(lambda: run(q, k_pool, k_index, v_pool, v_index, 0, defines, fallback=True))
    out, lse = torch.empty_like(q), torch.empty(q.shape[:2], device="cuda")
    alone = timeit(lambda: cuda_prefill.launch(q, blocks(k_pool, k_index), blocks(v_pool, v_index), D ** -0.5, 0, out,
                                               lse, defines))
    cudnn = cudnn_ms(q, k_pool, k_index, v_pool, v_index, causal=True)
    flop = 4.0 * t * h_kv * G * t / 2 * D
    print(f"\n{t} tokens one shot, causal, every block 2:4, 32/8 heads, d 128, bf16\n"
          f"| kernel | ms | effective TFLOP/s |\n|---|---|---|\n"
          f"| cuDNN causal, the same keys dense | {cudnn:.3f} | {flop / cudnn / 1e9:.0f} |\n"
          f"| wgmma.sp Trans-Both, causal, the kernels alone (key norms, attention) | {alone:.3f} | {flop / alone / 1e9:.0f} |\n"
          f"| wgmma.sp Trans-Both, causal (offsets, kernel, underflow check) | {ours:.3f} | {flop / ours / 1e9:.0f} |",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--prefix", type=int, default=32768)
    ap.add_argument("--causal", type=int, default=32768, help="tokens of the one-shot causal timing (0: none)")
    ap.add_argument("--source", type=Path, default=cuda_prefill.SOURCE, help="another version of prefill_sp.cu")
    ap.add_argument("--define", action="append", default=[], help="a macro for nvcc, e.g. one of the source's ablations")
    args = ap.parse_args()
    cuda_prefill.SOURCE = args.source
    defines = tuple(args.define)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    print(f"source {args.source}, defines {args.define}", flush=True)
    check(gen, defines)
    bench(gen, args.tokens, args.prefix, defines)
    if args.causal:
        bench_causal(gen, args.causal, defines)


if __name__ == "__main__":
    main()
