"""Does an even count of programs per SM read faster? Same row length (32K), ours at programs = rows x splits of
512 (116 SMs run 4, 16 run 3) against 528 (every SM 4), and cuDNN at the same batches. GB/s of the bytes each reads."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_KV, H_Q, bench, decode_inputs

CTX = 32768
gen = torch.Generator(device="cuda")
gen.manual_seed(0)
print(f"SMs {torch.cuda.get_device_properties(0).multi_processor_count}")
for batch, splits in ((8, 8), (32, 2), (33, 2), (64, 1), (66, 1), (16, 4)):
    q = torch.randn(batch, H_Q, D, generator=gen, device="cuda").to(DT)
    sl = torch.full((batch,), CTX, dtype=torch.int32, device="cuda")
    kd, vd = (torch.randn(batch, H_KV, CTX, D, generator=gen, device="cuda").to(DT) for _ in range(2))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        cudnn = bench(lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True))
    dense_bytes = 2 * kd.numel() * 2
    del kd, vd
    row = [f"B={batch} splits {splits} programs {batch * H_KV * splits}: cuDNN {cudnn:.4f} ms "
           f"{dense_bytes / cudnn / 1e6:.0f} GB/s"]
    for s_k, s_v in ((0, 1), (1, 1), (0, 0)):
        k_pool, v_pool, k_index, v_index, nbytes = decode_inputs(batch, CTX, s_k, s_v, gen)
        ms = bench(lambda: gpu.cuda_decode(q, k_pool, v_pool, k_index, v_index, sl, D ** -0.5, splits))
        row.append(f"S {s_k}/{s_v} {ms:.4f} ms {nbytes / ms / 1e6:.0f} GB/s {cudnn / ms:.3f}x")
        del k_pool, v_pool
    print(" | ".join(row), flush=True)
