"""What the host sync for the prefix entries' kinds cost the Triton prefill: chunks of 64-512 tokens after prefixes
whose entries are mixed, all 2:4 or all dense, in pools holding both kinds (as served), with the kinds from the
entries (``gpu._entry_kinds``, one host sync per call) and from the pools (the
default: no sync). Latency (a sync after each call) and back to back (20 calls, then one sync), and whether the
default copied the prefix dense; Llama-3.1-8B heads, bf16.

    python kernels/probes/prefill_kinds_sync.py
"""
import torch

from hs_kernels import gpu
from hs_kernels.bench_prefill import D, H_KV, H_Q, _copies, _pools_at
from hs_kernels.timing import back_to_back, timeit


def first_of_kind(index: torch.Tensor, used: int, want) -> torch.Tensor:
    """Per KV head the first ``used`` entries that ``want`` keeps (all where None)."""
    return torch.stack([(row[want(row)] if want else row)[:used] for row in index]).contiguous()


def main() -> None:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    print("| prefix | entries | chunk | entries' kinds: latency / back to back ms, copied | pools' kinds: latency / "
          "back to back ms, copied | back to back, entries / pools |\n|---|---|---|---|---|---|")
    for prefix in (522, 2058, 8202, 32778):
        used = -(-prefix // 64)
        keys, values = (torch.randn(3 * used * 64, H_KV, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                        for _ in range(2))
        (k_pool, k_all), (v_pool, v_all) = _pools_at(keys, "k", 0.5, gen), _pools_at(values, "v", 0.5, gen)
        for name, want in (("mixed", None), ("2:4", lambda e: e < 0), ("dense", lambda e: e >= 0)):
            k_idx, v_idx = first_of_kind(k_all, used, want), first_of_kind(v_all, used, want)
            for t in (64, 256, 512):
                q, k, v = (torch.randn(t, h, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                           for h in (H_Q, H_KV, H_KV))
                args = (q, k, v, k_pool, v_pool, k_idx, v_idx, prefix, D ** -0.5)
                runs = (lambda: gpu.triton_prefill(*args, kinds=gpu._entry_kinds(k_idx, v_idx, used)),
                        lambda: gpu.triton_prefill(*args))
                outs = [fn()[0].float() for fn in runs]
                assert (outs[0] - outs[1]).abs().max().item() < 2e-2
                (la, ba, ca), (lb, bb, cb) = ((timeit(fn, iters=10), back_to_back(fn), _copies(gpu, fn)) for fn in runs)
                print(f"| {prefix} | {name} | {t} | {la:.3f} / {ba:.3f}, {'on' if ca else 'off'} | {lb:.3f} / "
                      f"{bb:.3f}, {'on' if cb else 'off'} | {ba / bb:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
