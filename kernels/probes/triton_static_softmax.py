"""A/B of the Triton prefill's online softmax against a static offset (no running maximum, no rescale; the offset a
constant that suits these random inputs): speed only, one shot 32K dense, Llama-3.1-8B heads. Run once per mode, in
separate processes (the static step replaces the module's before anything compiles).

    python kernels/probes/triton_static_softmax.py base|static
"""

import sys
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
import hs_kernels.triton_prefill as tp
from hs_kernels import gpu
from hs_kernels.timing import timeit
from hs_kernels.pool import BlockPool

if sys.argv[1] == "static":
    @triton.jit
    def static_step(q, k, v, m_i, l_i, acc, scale_log2, visible, MASKED: tl.constexpr):
        s = tl.dot(q, tl.trans(k))
        if MASKED:
            s = tl.where(visible, s, float("-inf"))
        p = tl.exp2(s * scale_log2 - 8.0)
        l_i = l_i + tl.sum(p, 1)
        acc = acc + tl.dot(p.to(v.dtype), v)
        return m_i, l_i, acc
    tp._softmax_step = static_step

t, hq, hk, d = 32768, 32, 8, 128
g = torch.Generator(device="cuda")
g.manual_seed(0)
q = torch.randn(t, hq, d, generator=g, device="cuda").bfloat16()
k, v = (torch.randn(t, hk, d, generator=g, device="cuda").bfloat16() for _ in range(2))
empty = [BlockPool.allocate(op, d, 0, 0, q.dtype, q.device) for op in ("k", "v")]
none = torch.zeros((hk, 0), dtype=torch.int32, device="cuda")
one = lambda: gpu.prefill_attention(q, k, v, *empty, none, none, 0)
out = one()[0]
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    f = lambda: F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True, enable_gqa=True)
    ref = f()[0].transpose(0, 1)
    cudnn = timeit(f, iters=7)
err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
print(f"{sys.argv[1]}: one shot 32K {timeit(one, iters=7):.3f} ms (cuDNN {cudnn:.3f}), rel err {err:.1e}", flush=True)
