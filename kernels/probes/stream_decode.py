"""The streaming decode of a step's layers, inside a CUDA graph of 32 calls: keys gathered and one program per KV head
against keys read in place (``k_rows``) and in place with the key blocks split
(``stream_splits``). Llama-3.1-8B's streaming half: 16 query heads, 4 KV heads, d 128, sink 128, window 256.

    python kernels/probes/stream_decode.py   (from the repository root: it reads tests/kv_cases.py)
"""

import sys

import torch

from hs_kernels import gpu

sys.path.insert(0, "tests")
from kv_cases import stream_case  # noqa: E402

def graph_us(fn, calls=32, reps=50):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls): fn()
    g.replay(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps): g.replay()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / (reps * calls)

print("| B | gathered, 1 program per head (old) us | in place us | in place + split us | splits | max |diff| |")
print("|---|---|---|---|---|---|")
for B in (1, 4, 16):
    gen = torch.Generator().manual_seed(B)
    q, q_pos, k, v, k_pos = stream_case("decode", B, 1, 448, 16, 4, 128, 128, 256, torch.bfloat16, gen, "cuda")
    n = k.shape[1]
    rows = torch.randperm(B * n + 1000, generator=gen)[:B * n].view(B, n).cuda()
    k_st, v_st = (torch.zeros(B * n + 1000, 4, 128, dtype=torch.bfloat16, device="cuda").index_copy_(0, rows.flatten(), x.flatten(0, 1)) for x in (k, v))
    kp32, qp32 = k_pos.to(torch.int32), q_pos.to(torch.int32)
    blocks = gpu.stream_key_blocks(kp32)
    old = lambda: gpu.triton_streaming(q, qp32, k_st[rows], v_st[rows], kp32, 128, 256, 0.088, key_blocks=blocks, splits=1)
    inplace = lambda: gpu.triton_streaming(q, qp32, k_st, v_st, kp32, 128, 256, 0.088, key_blocks=blocks, k_rows=rows, splits=1)
    split = lambda: gpu.triton_streaming(q, qp32, k_st, v_st, kp32, 128, 256, 0.088, key_blocks=blocks, k_rows=rows)
    o1, o3 = old()[0], split()[0]
    sp = gpu.stream_splits(B * 4, blocks[0].shape[1], gpu._sm_count(q.device))
    print(f"| {B} | {graph_us(old):.1f} | {graph_us(inplace):.1f} | {graph_us(split):.1f} | {sp} | {(o1.float() - o3.float()).abs().max().item():.2e} |")
