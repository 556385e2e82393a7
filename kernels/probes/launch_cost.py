"""Host time of one launch (no sync inside the timed loop) of the CUDA prefill's pieces on the GPU: the rescue of lost
rows (``cuda_prefill.rescue``, with another part to merge and with only the kernel's marks), a ``torch.zeros(1)``
for scale, and the CUDA library's ``launch``. 512 tokens, Llama heads, 2048 keys stored 2:4.

    python kernels/probes/launch_cost.py
"""

import torch

from hs_kernels import cuda_prefill as cp
from hs_kernels.timing import back_to_back
from hs_kernels.chunk_blocks import compress_chunk


def main() -> None:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    t, h_kv, group, scale = 512, 8, 4, 128 ** -0.5
    q = torch.randn(t, h_kv * group, 128, device="cuda", generator=gen).bfloat16()
    k, v = (torch.randn(2048, h_kv, 128, device="cuda", generator=gen).bfloat16() for _ in range(2))
    chunk = compress_chunk(k, v, 1, 1)
    keys = cp.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)
    values = cp.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index)
    out, lse = torch.empty_like(q), torch.empty(t, h_kv * group, device="cuda")
    work = cp.launch(q, keys, values, scale, None, out, lse, flag=False)
    other = (out.clone(), lse.clone())
    for name, fn in (("rescue", lambda: cp.rescue(q, keys, values, work, scale, None, out, lse, other=other)),
                     ("rescue marked", lambda: cp.rescue(q, keys, values, work, scale, 0, out, lse, marked=True)),
                     ("zeros(1)", lambda: torch.zeros(1, dtype=torch.int32, device="cuda")),
                     ("launch", lambda: cp.launch(q, keys, values, scale, None, out, lse, flag=False))):
        print(f"{name}: {1e3 * back_to_back(fn, 100, host_only=True):.1f} us host per call", flush=True)


if __name__ == "__main__":
    main()
