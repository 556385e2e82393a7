"""GPU benchmark of the streaming-group attention (sink + window) at the serving shapes, one table.

    python -m benchmarks.kernels.bench_stream

Llama-3.1-8B's streaming half (16 query heads, 4 KV groups, d 128, bf16), sink 128, window 256,
keys laid out as the serving backend passes them (``streaming_keys``: sink page, page-aligned window, chunk):
a prefill chunk of 8192 queries after a 24576-token prefix, and decode at B = 8 (32K contexts).
Rows: the Triton kernel (its defaults; 8 warps; 64-row tiles: at 128 rows and d 128 the default 4 warps spill
612 bytes per thread, 8 warps or 64 rows none: ``python -m hs_kernels.resources``) and the PyTorch reference it
replaced on the serving path.
Timing: triton.testing.do_bench (median).
"""

import torch

from hs_kernels import attention as ref
from hs_kernels import gpu

H_Q, H_KV, D, SINK, WINDOW = 16, 4, 128, 128, 256


def main():
    import triton.testing

    cases = []
    cases.append(("prefill 8192 @ 24576", torch.arange(24576, 32768)[None], ref.streaming_keys(24576, 32768, SINK, WINDOW)[None]))
    cases.append(("decode B=8 @ 32K", torch.full((8, 1), 32767), ref.streaming_keys(32767, 32768, SINK, WINDOW)[None].expand(8, -1)))
    rows = []
    for name, q_pos, k_pos in cases:
        (b, t), n = q_pos.shape, k_pos.shape[1]
        q = torch.randn(b, t, H_Q, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, n, H_KV, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        q_pos, k_pos = q_pos.cuda(), k_pos.cuda()
        for label, fn in (("triton", lambda: gpu.triton_streaming(q, q_pos, k, v, k_pos, SINK, WINDOW, D ** -0.5)),
                          ("triton 8w", lambda: gpu.triton_streaming(q, q_pos, k, v, k_pos, SINK, WINDOW, D ** -0.5,
                                                                     num_warps=8)),
                          ("triton 64r", lambda: gpu.triton_streaming(q, q_pos, k, v, k_pos, SINK, WINDOW, D ** -0.5,
                                                                      block_m=gpu.stream_rows(t, H_Q // H_KV, cap=64))),
                          ("reference", lambda: ref.streaming_attention(q, q_pos, k, v, k_pos, SINK, WINDOW, D ** -0.5))):
            rows.append((name, label, triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")))
    print(f"{'case':24s} {'impl':10s} {'ms':>9s}")
    for name, label, ms in rows:
        print(f"{name:24s} {label:10s} {ms:9.3f}")


if __name__ == "__main__":
    main()
