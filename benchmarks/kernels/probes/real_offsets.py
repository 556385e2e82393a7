"""The CUDA prefill on real activations (benchmarks/kernels/probes/capture_qkv.py's file: q, k, v of some layers), on the GPU:
rows the kernel flags (its static offset too far above their scores), time and error, at OFFSET_HEADROOM 0 and the
shipped value. d 64 heads are zero-padded to 128 (the same scores and norms), each query head is its own KV head
(G = 1), the scale stays 1/sqrt(d). Per layer: the one shot, causal (``cuda_prefill.attend``), and the last quarter
of the tokens as a chunk after the rest stored 2:4 in pools (``gpu.prefill_attention(kernel="cuda")``).

    python -m benchmarks.kernels.probes.real_offsets .scratch/smol_qkv.safetensors
"""
import sys

import torch
from hs_prep.safetensors_file import open_safetensors

from hs_kernels import attention as ref
from hs_kernels import cuda_prefill, gpu
from benchmarks.kernels.bench_gpu import rel_err
from benchmarks.kernels.bench_prefill import _pools_at
from hs_kernels.timing import timeit
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk
from hs_kernels.pool import BlockPool


def read_tensors(path: str, device: str = "cuda") -> dict[str, torch.Tensor]:
    """The file's bf16 tensors, through hs_prep's validated reader (the GPU machine may lack the safetensors package)."""
    file = open_safetensors(path)
    if any(entry.dtype != "BF16" for entry in file.tensors.values()):
        raise ValueError(f"{path}: expected bf16 tensors only")
    return {name: torch.frombuffer(bytearray(file.raw(name)), dtype=torch.bfloat16).view(entry.shape).to(device)
            for name, entry in file.tensors.items()}


def run(q, k, v, scale: float, prefix: int):
    """(flagged rows, one-shot ms, its rel. error on the unflagged rows, recomputed rows, chunk ms, chunk rel. error)."""
    h = q.shape[1]
    chunk = compress_chunk(k, v, 1, 1)
    keys = cuda_prefill.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)
    values = cuda_prefill.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index)
    pools = [BlockPool.allocate(op, 128, 0, 0, q.dtype, "cuda") for op in ("k", "v")]
    empty = torch.zeros(h, 1, dtype=torch.int32, device="cuda")
    r_out = ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0, scale)[0]
    alone, alone_lse = cuda_prefill.attend(q, keys, values, scale, 0, fallback=False)
    flagged = alone_lse.isnan()
    err = rel_err(alone[~flagged].float(), r_out[~flagged].float())
    ms = timeit(lambda: cuda_prefill.attend(q, keys, values, scale, 0), iters=5)

    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    (k_pool, k_idx), (v_pool, v_idx) = _pools_at(k[:prefix], "k", 1, gen), _pools_at(v[:prefix], "v", 1, gen)
    args = (q[prefix:], k[prefix:], v[prefix:], k_pool, v_pool, k_idx, v_idx, prefix, scale)
    c_ref = ref.prefill_attention(*args)[0]
    recomputed, rescue = torch.zeros(1, dtype=torch.int32, device="cuda"), cuda_prefill.rescue
    cuda_prefill.rescue = lambda *a, **kw: rescue(*a, count=recomputed, **kw)
    c_out = gpu.prefill_attention(*args, kernel="cuda")[0]
    cuda_prefill.rescue = rescue
    c_ms = timeit(lambda: gpu.prefill_attention(*args, kernel="cuda"), iters=5)
    return flagged.sum().item(), ms, err, recomputed.item(), c_ms, rel_err(c_out.float(), c_ref.float())


def main(path: str) -> None:
    tensors = read_tensors(path)
    layers = sorted({int(name.split(".")[0]) for name in tensors})
    shipped = cuda_prefill.OFFSET_HEADROOM
    totals = {hr: [0, 0.0, 0, 0.0] for hr in (0.0, shipped)}
    print("| layer | headroom | one shot: rows flagged | of | attend ms | rel.err (unflagged rows) | chunk after 3/4: "
          "rows recomputed | prefill_attention ms | rel.err |\n|---|---|---|---|---|---|---|---|---|")
    for layer in layers:
        q, k, v = (tensors[f"{layer}.{x}"] for x in "qkv")
        d, group = q.shape[-1], q.shape[1] // k.shape[1]
        q, k, v = (torch.nn.functional.pad(x, (0, 128 - d)) for x in (q, k, v))
        k, v = (x.repeat_interleave(group, 1).contiguous() for x in (k, v))
        prefix = q.shape[0] * 3 // 4 // 64 * 64
        for headroom in totals:
            cuda_prefill.OFFSET_HEADROOM = headroom
            flagged, ms, err, recomputed, c_ms, c_err = run(q, k, v, d ** -0.5, prefix)
            t = totals[headroom]
            t[0], t[1], t[2], t[3] = t[0] + flagged, t[1] + ms, t[2] + recomputed, t[3] + c_ms
            print(f"| {layer} | {headroom:.0f} | {flagged} | {q.shape[0] * q.shape[1]} | {ms:.3f} | {err:.1e} | "
                  f"{recomputed} | {c_ms:.3f} | {c_err:.1e} |", flush=True)
    cuda_prefill.OFFSET_HEADROOM = shipped
    rows = len(layers) * q.shape[0] * q.shape[1]
    for headroom, (flagged, ms, recomputed, c_ms) in totals.items():
        print(f"headroom {headroom:.0f}: one shot {flagged} of {rows} rows flagged ({100 * flagged / rows:.2f} %), "
              f"{ms:.2f} ms over {len(layers)} layers; chunks: {recomputed} rows recomputed, {c_ms:.2f} ms")


if __name__ == "__main__":
    main(*sys.argv[1:])
