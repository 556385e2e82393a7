"""GPU: the Triton write kernel (behind ``hs_kernels.write_tokens``) vs the reference, on fresh random inputs:
block pools through index maps and page-slot storage, the serving shapes (an 8K chunk and a decode step of
Llama-3.1-8B's retrieval half: 4 KV heads of 8, d 128, bf16), other head dims, K and V as views of a fused
projection, a cast to the destination's dtype, and pages without a slot (flagged, the rest written)."""

import pytest
import torch

from hs_kernels import gpu, write_tokens
from hs_kernels.store import write_tokens as reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.triton_available(), reason="needs CUDA and triton"),
]

CASES = [
    # kind, tokens, KV heads, listed heads, d, pages, source dtype, destination dtype, bad pages
    ("blocks", 8192, 8, 4, 128, 200, torch.bfloat16, torch.bfloat16, 0),
    ("pages", 8192, 8, 4, 128, 200, torch.bfloat16, torch.bfloat16, 0),
    ("blocks", 1, 8, 4, 128, 200, torch.bfloat16, torch.bfloat16, 0),
    ("blocks", 16, 8, 4, 128, 200, torch.bfloat16, torch.bfloat16, 0),
    ("pages", 300, 5, 3, 64, 50, torch.float16, torch.float16, 0),
    ("blocks", 700, 4, 4, 256, 40, torch.float32, torch.bfloat16, 0),
    ("blocks", 500, 8, 4, 128, 30, torch.bfloat16, torch.bfloat16, 3),
    ("pages", 500, 8, 4, 128, 30, torch.bfloat16, torch.bfloat16, 2),
]


def make(kind, t, h, n, d, pages, src, dst, bad, gen):
    qkv = torch.randn(t, 3 * h, d, generator=gen, device="cuda").to(src)
    k, v = qkv[:, h:2 * h], qkv[:, 2 * h:]
    locs = torch.randperm(pages * 64, generator=gen, device="cuda")[:t]
    heads = torch.randperm(h, generator=gen, device="cuda")[:n].to(torch.int32)
    if kind == "blocks":
        k_slots = torch.randperm(pages * n, generator=gen, device="cuda").view(pages, n).to(torch.int32)
        v_slots = torch.randperm(pages * n, generator=gen, device="cuda").view(pages, n).to(torch.int32)
        k_dest, v_dest = (torch.full((pages * n, 64, 1, d), float("nan"), dtype=dst, device="cuda") for _ in range(2))
    else:
        k_slots = v_slots = torch.randperm(pages + 7, generator=gen, device="cuda")[:pages, None]
        k_dest, v_dest = (torch.full((pages + 7, 64, n, d), float("nan"), dtype=dst, device="cuda") for _ in range(2))
    if bad:
        k_slots = k_slots.clone()
        k_slots[(locs[:bad] // 64).long(), 0] = -1 if kind == "pages" else torch.iinfo(torch.int32).min
    return k, v, locs, heads, k_slots, v_slots, k_dest, v_dest


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-t{c[1]}-h{c[2]}-n{c[3]}-d{c[4]}-{str(c[6])[6:]}-bad{c[8]}")
def test_triton_write_matches_reference(case):
    gen = torch.Generator(device="cuda")
    gen.seed()
    a = make(*case, gen)
    b = [x.clone() for x in a]
    ea, eb = (torch.zeros(1, dtype=torch.int32, device="cuda") for _ in range(2))
    launches = []
    kernel = gpu.triton_write
    try:
        gpu.triton_write = lambda *args: launches.append(1) or kernel(*args)
        write_tokens(*b, errors=eb)
    finally:
        gpu.triton_write = kernel
    assert launches == [1]
    reference(*a, errors=ea)
    torch.cuda.synchronize()
    assert ea.item() == eb.item() == int(case[-1] > 0)
    for x, y in ((a[6], b[6]), (a[7], b[7])):  # NaN where nothing was written, on both
        assert torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())
    if not case[-1]:  # every (token, listed head) row written once, nothing else
        assert (~b[6].isnan()).all(-1).sum().item() == case[1] * case[3]


def test_without_errors_flag_the_reference_runs():
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = make("blocks", 64, 8, 4, 128, 10, torch.bfloat16, torch.bfloat16, 0, gen)
    b = [x.clone() for x in a]
    launches = []
    kernel = gpu.triton_write
    try:
        gpu.triton_write = lambda *args: launches.append(1) or kernel(*args)
        write_tokens(*a)
    finally:
        gpu.triton_write = kernel
    reference(*b)
    assert launches == [] and torch.equal(a[6].nan_to_num(), b[6].nan_to_num())
    assert (~a[6].isnan()).all(-1).sum().item() == 64 * 4
