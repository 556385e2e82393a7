"""Host time of one streaming-attention call of an extend (a 64-token question, Llama-3.1-8B's streaming half: 16/4
heads, d 128, sink 128 + window 256 keys read in place), by how it is launched, each issued 200 times back to back
without a sync inside the timed loop:

- ``streaming_attention``: the entry point the serving backend calls (checks, planning, allocations, the launch);
- ``triton_streaming``: the raw launch with its planning and allocations;
- ``stream_kernel[grid](...)``: Triton's launcher (``JITFunction.run``: argument specialization, the cache key, the
  launch) on prepared arguments;
- ``binder + compiled.run(...)``: Triton's argument binding and specialization (what picking the compiled variant
  safely needs), then the compiled kernel's own launcher, on the current stream;
- ``compiled.run(...)``: the compiled kernel's own launcher on bound arguments (what a launch costs without
  ``JITFunction.run``);
- ``torch.empty_like``: one allocation, for scale.

Says how much of an extend layer's host time a cheaper launch path could save.

    python kernels/probes/launch_paths.py
"""

import torch

from hs_kernels import gpu
from hs_kernels import triton_stream as ts
from hs_kernels.timing import back_to_back
from hs_kernels.triton_blocks import LOG2E

CALLS = 200


def host_us(fn) -> float:
    return back_to_back(fn, CALLS, host_only=True) * 1e3


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    t, h_q, h_kv, d, sink, window, prefix = 64, 16, 4, 128, 128, 256, 4096
    q = torch.randn(1, t, h_q, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k_pos = torch.cat([torch.arange(sink), torch.arange(prefix - window, prefix + t)]).to("cuda", torch.int32)[None]
    n = k_pos.shape[1]
    storage = [torch.randn(2 * n, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2)]
    rows = torch.randperm(2 * n, device="cuda", generator=gen)[:n][None]
    q_pos = torch.arange(prefix, prefix + t, device="cuda", dtype=torch.int32)[None]
    blocks = gpu.stream_key_blocks(k_pos)
    scale = d ** -0.5
    out = torch.empty_like(q)
    lse = torch.empty(1, t, h_q, device="cuda")
    block_m = gpu.stream_rows(t, h_q // h_kv)
    grid = (-(-t * (h_q // h_kv) // block_m), h_kv, 1)
    args = (q, q_pos, *storage, k_pos, rows, *blocks, out, lse, scale * LOG2E, t, n, blocks[0].shape[1], 1,
            blocks[0].shape[1], sink, window)
    consts = dict(H_KV=h_kv, G=h_q // h_kv, D=d, BLOCK_M=block_m, ROWS=True, SPLIT=False, num_warps=4, num_stages=2)
    compiled = ts.stream_kernel[grid](*args, **consts)
    binder = ts.stream_kernel.device_caches[torch.cuda.current_device()][-1]
    bound = tuple(binder(*args, **consts)[0].values())
    stream = torch.cuda.current_stream().cuda_stream

    def direct():
        compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, None, None, None, *bound)

    def bound_direct():
        params = binder(*args, **consts)[0]
        compiled.run(*grid, torch.cuda.current_stream().cuda_stream, compiled.function, compiled.packed_metadata,
                     None, None, None, *params.values())

    want = gpu.streaming_attention(q, q_pos, *storage, k_pos, sink, window, scale, key_blocks=blocks, k_rows=rows,
                                   splits=1)[0]
    out.zero_()
    direct()
    assert torch.equal(out, want), "the direct launch must compute what the entry point does"
    paths = {
        "streaming_attention": lambda: gpu.streaming_attention(q, q_pos, *storage, k_pos, sink, window, scale,
                                                               key_blocks=blocks, k_rows=rows, splits=1),
        "triton_streaming": lambda: gpu.triton_streaming(q, q_pos, *storage, k_pos, sink, window, scale,
                                                         key_blocks=blocks, k_rows=rows, splits=1),
        "stream_kernel[grid](...)": lambda: ts.stream_kernel[grid](*args, **consts),
        "binder + compiled.run(...)": bound_direct,
        "compiled.run(...)": direct,
        "torch.empty_like": lambda: torch.empty_like(q),
    }
    print("| launch path | host us per call |\n|---|---|")
    for _ in range(2):
        for name, fn in paths.items():
            print(f"| {name} | {host_us(fn):.1f} |", flush=True)


if __name__ == "__main__":
    main()
