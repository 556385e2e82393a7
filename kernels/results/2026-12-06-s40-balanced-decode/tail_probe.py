"""When each CUDA decode program starts and ends (globaltimer, a probe build that stamps head 0's partial output):
how much of the kernel's span the last programs take alone. B=8, 32K, Llama heads."""
import torch

from hs_kernels import gpu
from hs_kernels.bench_gpu import D, DT, H_KV, H_Q, decode_inputs

B, CTX = 8, 32768
gen = torch.Generator(device="cuda")
gen.manual_seed(0)
q = torch.randn(B, H_Q, D, generator=gen, device="cuda").to(DT)
sl = torch.full((B,), CTX, dtype=torch.int32, device="cuda")
flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
for s_k, s_v in ((0, 1), (1, 1), (0, 0)):
    pools = decode_inputs(B, CTX, s_k, s_v, gen)[:4]
    for splits in (6, 8):
        spans, lines = [], []
        for rep in range(7):
            parts = (torch.zeros(B, H_Q, splits, D, device="cuda"), torch.zeros(B, H_Q, splits, device="cuda"))
            flush.zero_()
            gpu.cuda_decode(q, *pools, sl, D ** -0.5, splits, parts=parts)
            torch.cuda.synchronize()
            st = parts[0].view(torch.int64).reshape(B, H_KV, 4, splits, D // 2)[:, :, 0, :, :3].reshape(-1, 3)
            t0, t1 = st[:, 0].double(), st[:, 1].double()
            base = t0.min()
            t0, t1 = (t0 - base) / 1e3, (t1 - base) / 1e3  # us
            span = t1.max().item()
            ends = t1.sort().values
            dur = (t1 - t0)
            spans.append(span)
            lines.append(f"span {span:.1f} us; starts max {t0.max():.1f}; ends p10 {ends[len(ends) // 10]:.1f} "
                         f"p50 {ends[len(ends) // 2]:.1f} p90 {ends[9 * len(ends) // 10]:.1f} max {span:.1f}; "
                         f"program duration min {dur.min():.1f} mean {dur.mean():.1f} max {dur.max():.1f}")
            sm = st[:, 2]
            per_sm = torch.bincount(sm, minlength=int(sm.max()) + 1)
            counts = per_sm[sm]
            lines[-1] += "; by programs on the SM: " + ", ".join(
                f"{n}: {int((counts == n).sum())} programs, mean {dur[counts == n].mean():.1f} ends max "
                f"{t1[counts == n].max():.1f}" for n in sorted(set(counts.tolist())))
        k = sorted(range(len(spans)), key=spans.__getitem__)[len(spans) // 2]
        print(f"S_K={s_k} S_V={s_v} splits {splits} (median of 7): {lines[k]}", flush=True)
