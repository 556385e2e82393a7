"""The read ceiling against the V-only decode (B=8, 32K, S_K = 0, S_V = 1): how fast a plain streaming read of the
same bytes runs (a Triton XOR-reduce, several tile shapes), next to cuDNN's dense decode, ours and a torch copy; by
do_bench (memset flush) and by the profiler's kernel time.

    python kernels/probes/read_ceiling.py
"""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

from decode_timing import B, CTX, kernel_ms
from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_KV, H_Q, bench, decode_inputs


@triton.jit
def read_kernel(x, out, n, BLOCK: tl.constexpr, PER: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    base = pid.to(tl.int64) * BLOCK * PER
    for i in range(PER):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc ^= tl.load(x + offs, mask=offs < n, other=0, cache_modifier=".cg")
    tl.store(out + pid, tl.sum(acc))


def main():
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    k_pool, v_pool, k_index, v_index, nbytes = decode_inputs(B, CTX, 0, 1, gen)
    q = torch.randn(B, H_Q, D, generator=gen, device="cuda").to(DT)
    sl = torch.full((B,), CTX, dtype=torch.int32, device="cuda")
    kd, vd = (torch.randn(B, H_KV, CTX, D, generator=gen, device="cuda").to(DT) for _ in range(2))
    dense_bytes = 2 * kd.numel() * kd.element_size()
    sdpa = lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True)  # noqa: E731
    rows = []
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        rows.append(("cuDNN decode (dense KV)", dense_bytes, bench(sdpa), kernel_ms(sdpa)))
    for n in (6, 8):
        f = lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, D ** -0.5, n, dependent=True)  # noqa: E731
        rows.append((f"ours V only, {n} splits", nbytes, bench(f), kernel_ms(f)))
    x = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_()
    y = torch.empty_like(x)
    copy = lambda: y.copy_(x)  # noqa: E731
    rows.append(("torch copy (bytes read)", nbytes, bench(copy), kernel_ms(copy)))
    for block, warps in ((1024, 4), (2048, 8), (4096, 8), (8192, 16)):
        for per in (4, 16, 64):
            progs = triton.cdiv(x.numel(), block * per)
            out = torch.empty(progs, dtype=torch.int32, device="cuda")
            f = lambda: read_kernel[(progs,)](x, out, x.numel(), BLOCK=block, PER=per, num_warps=warps)  # noqa: E731
            rows.append((f"triton read B{block} w{warps} per{per} ({progs} progs)", nbytes, bench(f), kernel_ms(f)))
    print(f"bytes: V-only pools {nbytes / 1e6:.1f} MB, dense {dense_bytes / 1e6:.1f} MB")
    print("| kernel | do_bench ms | GB/s (do_bench) | profiler ms | GB/s (profiler) |\n|---|---|---|---|---|")
    for name, nb, a, k in rows:
        print(f"| {name} | {a:.4f} | {nb / a / 1e6:.0f} | {k:.4f} | {nb / k / 1e6:.0f} |")


if __name__ == "__main__":
    main()
