"""write_tokens: the reference against explicit loops (block pools through an index map, page-slot storage, bad
slots), and the Triton kernel under Triton's interpreter against the reference."""

import pytest
import torch
from kv_cases import interpret

from hs_kernels import write_tokens
from hs_kernels.store import write_tokens as reference

CASE_CODE = r"""
import torch

def store_case(kind, t, h, d, n, seed, dtype=torch.float16, bad=False):
    gen = torch.Generator().manual_seed(seed)
    pages = 9
    qkv = torch.randn(t, 3 * h, d, generator=gen).to(dtype)
    k, v = qkv[:, h:2 * h], qkv[:, 2 * h:]  # views with a token stride of 3 h d, as a fused projection gives them
    locs = torch.randperm(pages * 64, generator=gen)[:t] + 0
    heads = torch.randperm(h, generator=gen)[:n].to(torch.int32)
    if kind == "blocks":  # a dense slot per (page, head) through an index map; destination one wide
        slots = torch.randperm(pages * n + 5, generator=gen)[:pages * n].view(pages, n).to(torch.int32)
        k_slots, v_slots = slots, slots.flip(0).contiguous()
        k_dest, v_dest = (torch.zeros(pages * n + 5, 64, 1, d, dtype=dtype) for _ in range(2))
    else:  # one slot per page for all heads
        slots = torch.randperm(pages + 3, generator=gen)[:pages].long()
        k_slots = v_slots = slots[:, None]
        k_dest, v_dest = (torch.zeros(pages + 3, 64, n, d, dtype=dtype) for _ in range(2))
    if bad:  # one written page without a slot
        k_slots = k_slots.clone()
        k_slots[int(locs[0]) // 64, 0] = -5
    return k, v, locs, heads, k_slots, v_slots, k_dest, v_dest
"""
exec(CASE_CODE)

CASES = [("blocks", 70, 8, 64, 4, 0), ("pages", 33, 6, 128, 3, 1), ("blocks", 1, 4, 128, 4, 2), ("pages", 5, 2, 80, 2, 3)]


def expected(k, v, locs, heads, k_slots, v_slots, k_dest, v_dest):
    k_out, v_out = k_dest.clone(), v_dest.clone()
    for ti, loc in enumerate(locs.tolist()):
        for i, h in enumerate(heads.tolist()):
            for x, slots, out in ((k, k_slots, k_out), (v, v_slots, v_out)):
                slot = int(slots[loc // 64, i if slots.shape[1] > 1 else 0])
                if slot >= 0:
                    out[slot, loc % 64, i if out.shape[2] > 1 else 0] = x[ti, h]
    return k_out, v_out


@pytest.mark.parametrize("case", CASES)
def test_reference_writes_each_head_to_its_slot(case):
    args = store_case(*case)
    k_want, v_want = expected(*args)
    reference(*args)
    assert torch.equal(args[6], k_want) and torch.equal(args[7], v_want)


def test_bad_slot_raises_or_flags_and_writes_the_rest():
    args = store_case("blocks", 20, 4, 64, 4, 5, bad=True)
    with pytest.raises(RuntimeError, match="no slot"):
        reference(*store_case("blocks", 20, 4, 64, 4, 5, bad=True))
    errors = torch.zeros(1, dtype=torch.int32)
    k_want, v_want = expected(*args)
    write_tokens(*args, errors=errors)  # the public entry point: the reference on this machine
    assert errors.item() == 1
    assert torch.equal(args[6], k_want) and torch.equal(args[7], v_want)
    errors.zero_()
    write_tokens(*store_case("blocks", 20, 4, 64, 4, 5), errors=errors)
    assert errors.item() == 0


def test_shapes_are_checked():
    k, v, locs, heads, k_slots, v_slots, k_dest, v_dest = store_case("pages", 4, 2, 64, 2, 0)
    with pytest.raises(ValueError, match="k_dest"):
        reference(k, v, locs, heads, k_slots, v_slots, k_dest[:, :32], v_dest)
    with pytest.raises(ValueError, match="k_slots"):
        reference(k, v, locs, heads, k_slots.float(), v_slots, k_dest, v_dest)


SCRIPT = CASE_CODE + r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from hs_kernels import gpu
from hs_kernels.store import write_tokens as reference
pytest_cases = json.loads(sys.argv[2])
results = []
for case in pytest_cases:
    *case, bad = case
    a, b = store_case(*case, bad=bad), store_case(*case, bad=bad)
    ea, eb = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    reference(*a, errors=ea)
    gpu.triton_write(*b, errors=eb)
    results.append({"k": bool(torch.equal(a[6], b[6])), "v": bool(torch.equal(a[7], b[7])),
                    "errors": [int(ea), int(eb)], "written": int((b[6] != 0).any(-1).sum())})
print(json.dumps(results))
"""


def test_triton_write_interpreted_matches_reference():
    pytest.importorskip("triton")
    cases = [[*c, False] for c in CASES] + [["blocks", 20, 4, 64, 4, 5, True], ["pages", 12, 3, 64, 3, 6, True]]
    results = interpret(SCRIPT, cases)
    assert len(results) == len(cases)
    for case, r in zip(cases, results):
        assert r["k"] and r["v"], (case, r)
        assert r["errors"] == [int(case[-1])] * 2, (case, r)
        assert r["written"] > 0, (case, r)
