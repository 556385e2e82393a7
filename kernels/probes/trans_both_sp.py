"""Driver of the trans_both_sp.cu probe (the Trans-Both loop on wgmma.sp): builds it with nvcc, checks it against
the PyTorch oracle (the 2:4 prefix decompressed, float32 attention without a mask) on small shapes with shuffled
pool slots, then times it on Llama-3.1-8B attention (32 / 8 heads, d 128, bf16) against cuDNN on the same keys
(dense) and the serving path (the Triton prefill over the same pools, whose chunk adds its own causal keys); where
the source exports the causal launch, also a one-shot causal prefill (every token's keys compressed, 32K by default)
against cuDNN causal on the same keys.
Both softmax forms are run where the source builds them: the running maximum (the single-warpgroup versions in git
history), and a static offset per query row (``static_bound``).

    python kernels/probes/trans_both_sp.py [--tokens 8192] [--prefix 32768] [--causal 32768] [--source other.cu]
        [--define HS_NO_EXP]
"""

import argparse
import ctypes
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hs_kernels import gpu
from hs_kernels.bench_prefill import timeit
from hs_kernels.compressed_kv import to_blocks
from hs_kernels.pool import BlockPool
from hs_kernels.pruner import element_mask
from hs_kernels.triton_blocks import LOG2E

SOURCE = Path(__file__).with_name("trans_both_sp.cu")
NOT_BUILT = 801  # cudaErrorNotSupported: the source does not build this softmax form
D, G = 128, 4


def build(source: Path = SOURCE, defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    so = Path(tempfile.mkdtemp()) / "trans_both_sp.so"
    # ptxas's performance advisories (C75xx) are kept out of the measurement's output; a failed build shows them
    proc = subprocess.run(["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-shared", "-Xcompiler", "-fPIC",
                           *(f"-D{d}" for d in defines), "-o", str(so), str(source)], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"nvcc failed on {source}: {proc.stderr[-2000:]}")
    lib = ctypes.CDLL(str(so))
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.trans_both_sp_launch.argtypes = [p] * 10 + [i] * 3 + [ctypes.c_float, p]
    lib.trans_both_sp_launch.restype = i
    lib.trans_both_sp_resident.restype = i
    lib.causal = hasattr(lib, "trans_both_sp_launch_causal")  # older sources build no mask
    if lib.causal:
        lib.trans_both_sp_launch_causal.argtypes = [p] * 10 + [i] * 3 + [ctypes.c_float, i, p]
        lib.trans_both_sp_launch_causal.restype = i
    return lib


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


def static_bound(q, k_pool, k_index, scale):
    """Each query row's softmax offset in log2 units: |q| times its KV head's largest key norm (the 2:4 values
    hold a pruned key's whole norm), an upper bound of every score by Cauchy-Schwarz."""
    k_norm = k_pool.values[(~k_index).long()].float().norm(dim=-1).amax(dim=(1, 2))  # [h_kv]
    return q.float().norm(dim=-1) * k_norm.repeat_interleave(G) * (scale * LOG2E)


def run(lib, q, k_pool, k_index, v_pool, v_index, scale, bound=None, q_pos0=None):
    """q_pos0: None, no mask; else query token i sits at position q_pos0 + i of the prefix (causal)."""
    t, h_q, _ = q.shape
    out = torch.empty(t, h_q, D, device="cuda")
    lse = torch.empty(t, h_q, device="cuda")
    args = [q.data_ptr(), k_pool.values.data_ptr(), k_pool.meta.data_ptr(), v_pool.values.data_ptr(),
            v_pool.meta.data_ptr(), k_index.data_ptr(), v_index.data_ptr(), None if bound is None else bound.data_ptr(),
            out.data_ptr(), lse.data_ptr(), t, k_index.shape[0], k_index.shape[1], scale * LOG2E]
    stream = torch.cuda.current_stream().cuda_stream
    if q_pos0 is None:
        rc = lib.trans_both_sp_launch(*args, stream)
    else:
        rc = lib.trans_both_sp_launch_causal(*args, q_pos0, stream)
    if rc == NOT_BUILT:
        return None
    if rc:
        raise RuntimeError(f"trans_both_sp_launch: CUDA error {rc}")
    return out, lse


def reference(q, k_pool, k_index, v_pool, v_index, scale, q_pos0=None):
    k, v = (p.gather(i).flatten(1, 2).float().repeat_interleave(G, 0) for p, i in ((k_pool, k_index), (v_pool, v_index)))
    s = torch.einsum("thd,hkd->htk", q.float(), k) * scale
    if q_pos0 is not None:
        pos = torch.arange(q.shape[0], device=q.device)[:, None] + q_pos0
        s = s.masked_fill(torch.arange(k.shape[1], device=q.device)[None, :] > pos, float("-inf"))
    return torch.einsum("htk,hkd->thd", s.softmax(-1), v), s.logsumexp(-1).t()


def reference_max(q, k_pool, k_index, scale):
    k = k_pool.gather(k_index).flatten(1, 2).float().repeat_interleave(G, 0)
    return torch.einsum("thd,hkd->thk", q.float(), k).amax(-1) * (scale * LOG2E)


def report(what, result, r_out, r_lse):
    out, lse = result
    err = ((out - r_out).norm() / r_out.norm()).item()
    print(f"check {what}: rel. err {err:.1e}, max |lse diff| {(lse - r_lse).abs().max().item():.1e}, "
          f"NaN {bool(out.isnan().any())}", flush=True)


def check(lib, gen):
    for t, prefix, h_kv in ((16, 64, 1), (40, 192, 1), (50, 640, 2), (333, 2048, 8)):
        q = queries(t, h_kv, gen)
        k_pool, k_index, v_pool, v_index = sparse_prefix(prefix, h_kv, gen)
        r_out, r_lse = reference(q, k_pool, k_index, v_pool, v_index, D ** -0.5)
        bound = static_bound(q, k_pool, k_index, D ** -0.5)
        for name, b in (("running max", None), ("static offset", bound)):
            result = run(lib, q, k_pool, k_index, v_pool, v_index, D ** -0.5, b)
            if result is not None:
                report(f"{name}: t {t} prefix {prefix} heads {h_kv * G}/{h_kv}", result, r_out, r_lse)
        for q_pos0 in (prefix - t, (prefix - t) // 2) if lib.causal else ():
            result = run(lib, q, k_pool, k_index, v_pool, v_index, D ** -0.5, bound, q_pos0)
            report(f"static offset, causal: t {t} at {q_pos0} of prefix {prefix} heads {h_kv * G}/{h_kv}", result,
                   *reference(q, k_pool, k_index, v_pool, v_index, D ** -0.5, q_pos0))
        top = reference_max(q, k_pool, k_index, D ** -0.5)
        print(f"  static offset above the largest score by {(bound - top).min().item():.1f} .. "
              f"{(bound - top).max().item():.1f} (log2 units)", flush=True)


def cudnn_ms(q, k_pool, k_index, v_pool, v_index, causal: bool) -> float:
    """cuDNN attention (SDPA) over the same keys, decompressed dense."""
    kd, vd = (p.gather(i).flatten(1, 2)[None] for p, i in ((k_pool, k_index), (v_pool, v_index)))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return timeit(lambda: F.scaled_dot_product_attention(q.transpose(0, 1)[None], kd, vd, is_causal=causal,
                                                             enable_gqa=True))


def bench(lib, gen, t: int, prefix: int):
    h_kv = 8
    q = queries(t, h_kv, gen)
    k_pool, k_index, v_pool, v_index = sparse_prefix(prefix, h_kv, gen)
    prefix_flop = 4.0 * t * h_kv * G * prefix * D
    built = run(lib, q, k_pool, k_index, v_pool, v_index, D ** -0.5) is not None
    ours = timeit(lambda: run(lib, q, k_pool, k_index, v_pool, v_index, D ** -0.5)) if built else float("nan")
    bound = static_bound(q, k_pool, k_index, D ** -0.5)
    ours_static = timeit(lambda: run(lib, q, k_pool, k_index, v_pool, v_index, D ** -0.5, bound))
    cudnn = cudnn_ms(q, k_pool, k_index, v_pool, v_index, causal=False)
    kc, vc = (torch.randn(t, h_kv, D, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(2))
    triton = timeit(lambda: gpu.triton_prefill(q, kc, vc, k_pool, v_pool, k_index, v_index, prefix, D ** -0.5))
    chunk_flop = 4.0 * t * h_kv * G * t / 2 * D
    print(f"\n{torch.cuda.get_device_name()}: {t} queries x {prefix} keys of a 2:4 prefix, 32/8 heads, d 128, bf16; "
          f"{lib.trans_both_sp_resident()} CTAs per SM\n| kernel | ms | effective TFLOP/s |\n|---|---|---|\n"
          f"| cuDNN, the same keys dense, no mask | {cudnn:.3f} | {prefix_flop / cudnn / 1e9:.0f} |\n"
          f"| wgmma.sp Trans-Both probe, running max | {ours:.3f} | {prefix_flop / ours / 1e9:.0f} |\n"
          f"| wgmma.sp Trans-Both probe, static offset | {ours_static:.3f} | {prefix_flop / ours_static / 1e9:.0f} |\n"
          f"| Triton prefill (serving path: prefix densified, + the chunk's causal keys) | {triton:.3f} | "
          f"{(prefix_flop + chunk_flop) / triton / 1e9:.0f} |", flush=True)


def bench_causal(lib, gen, t: int):
    """One shot: t tokens whose keys are all compressed, each query sees the keys at or before it."""
    h_kv = 8
    q = queries(t, h_kv, gen)
    k_pool, k_index, v_pool, v_index = sparse_prefix(t, h_kv, gen)
    bound = static_bound(q, k_pool, k_index, D ** -0.5)
    ours = timeit(lambda: run(lib, q, k_pool, k_index, v_pool, v_index, D ** -0.5, bound, 0))
    cudnn = cudnn_ms(q, k_pool, k_index, v_pool, v_index, causal=True)
    flop = 4.0 * t * h_kv * G * t / 2 * D
    print(f"\n{t} tokens one shot, causal, every block 2:4, 32/8 heads, d 128, bf16\n"
          f"| kernel | ms | effective TFLOP/s |\n|---|---|---|\n"
          f"| cuDNN causal, the same keys dense | {cudnn:.3f} | {flop / cudnn / 1e9:.0f} |\n"
          f"| wgmma.sp Trans-Both probe, causal, static offset | {ours:.3f} | {flop / ours / 1e9:.0f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--prefix", type=int, default=32768)
    ap.add_argument("--causal", type=int, default=32768, help="tokens of the one-shot causal timing (0: none)")
    ap.add_argument("--source", type=Path, default=SOURCE, help="another version of trans_both_sp.cu (same exports)")
    ap.add_argument("--define", action="append", default=[], help="a macro for nvcc, e.g. one of the source's ablations")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    print(f"source {args.source}, defines {args.define}", flush=True)
    lib = build(args.source, tuple(args.define))
    check(lib, gen)
    bench(lib, gen, args.tokens, args.prefix)
    if args.causal and lib.causal:
        bench_causal(lib, gen, args.causal)


if __name__ == "__main__":
    main()
