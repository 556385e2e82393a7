"""CPU: ``gpu.prefix_keys`` (a prefix's keys dense and token-major, as the CUDA prefill reads dense keys) under
Triton's interpreter against the pools' blocks, for all-2:4 and mixed K pools, d 64 and 128; ``gpu.chunk_keys`` (a
compressed chunk's keys so) against the decompressed chunk."""

import pytest
from kv_cases import interpret

pytest.importorskip("triton")

SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from kv_cases import make_case
from hs_kernels import gpu
from hs_kernels.compressor import decompress_blocks

results = []
for h_kv, d, blocks, p_k in json.loads(sys.argv[2]):
    gen = torch.Generator().manual_seed(len(results))
    k_pool, _, k_index, _, _ = make_case(1, h_kv, d, [64 * blocks], p_k, 0.0, torch.float16, gen, "cpu")
    k_index = k_index[0, :, :blocks].flip(1).contiguous()  # any order of blocks
    keys = gpu.prefix_keys(k_pool, k_index)
    expected = torch.empty_like(keys)
    for h in range(h_kv):
        for j, e in enumerate(k_index[h].tolist()):
            block = (k_pool.dense[e] if e >= 0
                     else decompress_blocks(k_pool.values[~e:][:1], k_pool.meta[~e:][:1], "k")[0])
            expected[64 * j:64 * j + 64, h] = block
    results.append({"shape": list(keys.shape), "equal": torch.equal(keys, expected),
                    "kinds": gpu._pool_kinds(k_pool)})
print(json.dumps(results))
"""


def test_prefix_keys_interpreted_are_the_pools_blocks():
    cases = [(2, 128, 5, 1.0), (3, 64, 4, 0.5), (1, 64, 3, 0.0)]
    results = interpret(SCRIPT, cases)
    assert [r["shape"] for r in results] == [[64 * n, h, d] for h, d, n, _ in cases]
    assert all(r["equal"] for r in results)
    assert [r["kinds"] for r in results] == [2, 3, 1]  # the pools: all 2:4, mixed, all dense (read as mixed)


CHUNK_SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from hs_kernels import gpu
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk

results = []
for t, h_kv, d in json.loads(sys.argv[2]):
    gen = torch.Generator().manual_seed(t)
    k, v = (torch.randn(t, h_kv, d, generator=gen).half() for _ in range(2))
    k[:64, 0, :8] = 0.5  # ties within groups of four
    chunk = compress_chunk(k, v, 1, 1)
    expected = chunk_as_dense(k, v, chunk)[0]
    results.append(torch.equal(gpu.chunk_keys(chunk).view(torch.int16), expected.view(torch.int16))
                   and not torch.equal(expected, k))
print(json.dumps(results))
"""


def test_chunk_keys_interpreted_are_the_decompressed_chunk():
    assert interpret(CHUNK_SCRIPT, [(192, 2, 128), (128, 3, 64)]) == [True, True]
