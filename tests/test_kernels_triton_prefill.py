"""CPU: the Triton prefill kernel under Triton's interpreter (TRITON_INTERPRET=1) vs the reference.

As test_kernels_triton_decode.py: the kernel's own indexing, masking (partial last prefix block,
causal diagonal, chunk tail), 2:4 unpacking and online softmax run on CPU tensors on every pool
path (dense / sparse / mixed, single-kind pools), tiles of 64 and 128 rows, d 64 / 128 / 256, in
float16 with the select form of the unpack (the prmt form and bfloat16: test_kernels_gpu_triton_prefill.py), branch and select forms of the
mixed variant, chunk key tiles of 64 and 128, 1 / 2 / 4 / 8 query heads per tile, the prefix densified first, dense prefixes two blocks per key tile, the chunk's keys through tensor descriptors (and a gathered prefix's block pairs), and the prefix split among programs (partials merged by log-sum-exp), including
more splits asked for than there are full blocks. Tokens past the prefix in its last block are NaN
in the pools, dense or compressed: the kernel must not let them through.
"""

import pytest
from kv_cases import interpret

pytest.importorskip("triton")

CASES = [
    # t, h_q, h_kv, d, prefix_len, p_k, p_v, block_m, select, splits, chunk_n, heads per tile (None: widest)
    (130, 8, 2, 64, 0, 0.0, 0.0, 64, False, None, 64, None),
    (100, 8, 2, 128, 300, 0.5, 0.5, 64, False, None, 64, None),
    (70, 4, 1, 64, 250, 1.0, 1.0, 128, False, None, 64, None),
    (64, 8, 8, 64, 129, 1.0, 0.0, 64, False, None, 64, None),
    (33, 16, 2, 256, 64, 0.0, 1.0, 64, False, None, 64, None),
    (257, 4, 2, 64, 640, 0.3, 0.7, 128, False, None, 64, None),
    (90, 8, 2, 64, 333, 0.5, 0.5, 64, True, None, 64, None),
    (64, 8, 2, 64, 1000, 0.5, 0.5, 64, False, 4, 64, None),
    (100, 4, 1, 128, 704, 1.0, 0.0, 128, False, 3, 64, None),
    (40, 8, 2, 64, 130, 0.0, 1.0, 64, False, 8, 64, None),
    (300, 8, 2, 64, 200, 0.5, 0.5, 128, False, None, 128, None),
    (257, 4, 1, 128, 0, 0.0, 0.0, 128, False, None, 128, None),
    (150, 8, 2, 64, 200, 0.5, 0.5, 64, False, None, 64, 1),   # one head per tile
    (200, 8, 1, 64, 130, 0.5, 0.5, 128, False, 2, 128, 2),    # 2 of a group of 8 heads, 64 tokens per tile
    (97, 16, 2, 64, 64, 0.0, 0.0, 128, False, None, 64, None),  # 8 heads, 16 tokens per tile
]
# the prefix copied dense first (densify): mixed, sparse-only and one-operand-sparse prefixes, partial last blocks
DENSIFY = [
    (100, 8, 2, 128, 300, 0.5, 0.5, 64, False, None, 64, None),
    (70, 4, 1, 64, 250, 1.0, 1.0, 128, False, None, 64, None),
    (64, 8, 2, 64, 1000, 0.5, 0.5, 64, False, 4, 64, None),
    (33, 16, 2, 256, 64, 0.0, 1.0, 64, False, None, 64, None),
    (64, 8, 8, 64, 129, 1.0, 0.0, 64, False, None, 64, None),
]

# dense prefixes two blocks per key tile (prefix_n 128): even and odd block counts, splits, a densified prefix
PAIRS = [
    (100, 8, 2, 64, 640, 0.0, 0.0, 128, False, None, 64, None, False),
    (70, 4, 1, 128, 704, 0.0, 0.0, 128, False, 3, 64, None, False),
    (64, 8, 2, 64, 1000, 0.5, 0.5, 128, False, 4, 64, None, True),
]

# the chunk's keys through tensor descriptors (tma): chunk tails, 64/128-key tiles, d 64/128/256, after a prefix
TMA = [
    (130, 8, 2, 64, 0, 0.0, 0.0, 64, False, None, 64, None, False, 64),
    (257, 4, 1, 128, 0, 0.0, 0.0, 128, False, None, 128, None, False, 64),
    (100, 8, 2, 128, 300, 0.5, 0.5, 64, False, None, 64, None, False, 64),
    (33, 16, 2, 256, 64, 0.0, 1.0, 64, False, None, 64, None, True, 64),
    (64, 8, 2, 64, 1000, 0.5, 0.5, 128, False, 4, 64, None, True, 128),
    # densified under TMA (the dense operand copied too), block pairs read as 128-row descriptor tiles: an odd
    # block count, a partial last block with splits, a dense K beside a 2:4 V, an all-dense prefix copied on request
    (100, 8, 2, 64, 704, 1.0, 0.0, 128, False, None, 64, None, True, 128),
    (70, 4, 1, 128, 650, 0.5, 0.5, 128, False, 3, 64, None, True, 128),
    (64, 4, 1, 64, 600, 0.0, 1.0, 128, False, None, 64, None, True, 128),
    (64, 4, 1, 64, 600, 0.0, 0.0, 128, False, None, 128, None, True, 128),
    # the default under TMA pairs: prefixes this short are read where they are (gpu.prefix_copy_pays; the default
    # copy is tests/test_kernels_gpu_triton_prefill.py's), by their pools' kinds
    (70, 4, 1, 64, 650, 0.5, 0.5, 128, False, None, 64, None, None, 128),
    (64, 4, 1, 64, 600, 0.0, 0.0, 128, False, 2, 64, None, None, 128),
]

SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from kv_cases import make_case, rel_err
from hs_kernels import attention as ref, gpu

results = []
for t, h_q, h_kv, d, prefix, p_k, p_v, block_m, select, splits, chunk_n, heads, densify, prefix_n, tma in json.loads(sys.argv[2]):
    gen = torch.Generator().manual_seed(len(results))
    k_pool, v_pool, k_index, v_index, _ = make_case(1, h_kv, d, [prefix], p_k, p_v, torch.float16, gen, "cpu")
    k_index, v_index = k_index[0], v_index[0]
    tail = prefix % 64
    for pool, index in ((k_pool, k_index), (v_pool, v_index)):
        if tail:  # tokens past the prefix in its last block: stale data, dense or compressed
            for e in index[:, prefix // 64].tolist():
                if e >= 0:
                    pool.dense[e, tail:] = float("nan")
                elif pool.operand == "k":
                    pool.values[-e - 1, tail:] = float("nan")
                else:  # V^T rows: values 2g, 2g + 1 of token group g
                    pool.values[-e - 1, :, 2 * -(-tail // 4):] = float("nan")
    q = torch.randn(t, h_q, d, generator=gen).half()
    k = torch.randn(t, h_kv, d, generator=gen).half()
    v = torch.randn(t, h_kv, d, generator=gen).half()
    out, lse = gpu.triton_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix, 0.09, block_m, 4, 1, select,
                                  splits=splits, chunk_n=chunk_n, heads=heads, densify=densify, prefix_n=prefix_n,
                                  tma=tma)
    r_out, r_lse = ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix, 0.09)
    results.append({"rel_err": rel_err(out, r_out), "lse_err": (lse - r_lse).abs().max().item(),
                    "nan": bool(out.isnan().any() or lse.isnan().any()),
                    "dtype_ok": out.dtype == torch.float16 and lse.dtype == torch.float32,
                    "kinds": [gpu._pool_kinds(k_pool), gpu._pool_kinds(v_pool)]})  # the variant that ran
print(json.dumps(results))
"""


def test_triton_prefill_interpreted_matches_reference():
    cases = ([(*c, False, 64, False) for c in CASES] + [(*c, True, 64, False) for c in DENSIFY]
             + [(*c, 128, False) for c in PAIRS] + [(*c, True) for c in TMA])
    results = interpret(SCRIPT, cases)
    assert len(results) == len(cases)
    kinds = {tuple(r["kinds"]) for r in results}
    assert {(1, 1), (3, 3), (2, 2), (2, 1), (1, 2)} <= kinds  # every load path ran
    for case, r in zip(cases, results):
        assert not r["nan"], (case, r)
        assert r["rel_err"] < 2e-3, (case, r)  # float16 output rounding
        assert r["lse_err"] < 1e-3, (case, r)
        assert r["dtype_ok"], (case, r)


def test_launch_defaults():
    """The Python-side choices of the default launch (figures behind them: docs/kernels.md)."""
    from hs_kernels import gpu

    assert gpu.prefill_tiles(64, 32, 8) == (4, 2)  # Llama: the 4 heads of a group, 32 tokens per tile
    assert gpu.prefill_tiles(64, 16, 2) == (8, 4)  # 8 heads leave 16 tokens per tile
    assert gpu.prefill_tiles(64, 16, 2, block_m=64) == (4, 4)
    assert gpu.prefill_tiles(100, 28, 4) == (1, 1)  # a group of 7: no power of two above 1 divides it
    assert gpu.prefill_chunk_n(0, 128) == 128 and gpu.prefill_chunk_n(0, 64) == 64 and gpu.prefill_chunk_n(640, 128) == 64
    assert gpu.prefill_chunk_n(640, 128, tma=True) == 128 and gpu.prefill_chunk_n(640, 64, tma=True) == 64
    assert gpu.prefill_prefix_n(128) == 128 and gpu.prefill_prefix_n(64) == 64
    for kind, n in gpu.DENSIFY_MIN_READERS.items():
        assert not gpu.prefill_densify(n - 1, kind, 8, 2048, 128, 2) and gpu.prefill_densify(n, kind, 8, 2048, 128, 2)
        # the copy's fixed cost: a short prefix stays where it is, whatever the readers
        floor = -(-gpu.DENSIFY_MIN_BLOCK_READS[kind] // n)
        assert gpu.prefill_densify(n, kind, 8, floor, 128, 2) and not gpu.prefill_densify(n, kind, 8, floor - 1, 128, 2)
        assert not gpu.prefill_densify(64, kind, 8, gpu.DENSIFY_MIN_BLOCK_READS[kind] // 64 - 1, 128, 2)
        fits = gpu.DENSIFY_MAX_BYTES // (2 * 8 * 64 * 128 * 2)  # prefix blocks whose dense K and V fit the cap
        assert gpu.prefill_densify(n, kind, 8, fits, 128, 2) and not gpu.prefill_densify(n, kind, 8, fits + 1, 128, 2)
    assert gpu.prefix_kind(1, 1) == "dense" and gpu.prefix_kind(2, 2) == "sparse" and gpu.prefix_kind(1, 2) == "sparse"
    assert gpu.prefix_kind(3, 1) == "mixed" and gpu.prefix_kind(2, 3) == "mixed"
    assert gpu.prefix_copy_pays(64, "dense", 8, gpu.DENSIFY_MIN_BLOCK_READS["dense"] // 64, 128, 2)
    assert not gpu.prefix_copy_pays(64, "dense", 8, gpu.DENSIFY_MIN_BLOCK_READS["dense"] // 64 - 1, 128, 2)
