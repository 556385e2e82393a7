"""The CUDA Trans-Both prefill's host side on the CPU: the recomputation of its lost rows (a Triton kernel, here under
Triton's interpreter), the entry point's fallback off sm_90, and the source building for sm_90a (nvcc)."""

import pytest
import torch
from kv_cases import interpret

from hs_kernels import attention as ref
from hs_kernels import cuda_prefill, gpu, nvcc
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk
from hs_kernels.pool import BlockPool

D = 128


def compressed(t: int, h_kv: int, group: int, seed: int, s_k: float = 1):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(t, h, D, generator=gen).to(torch.bfloat16) for h in (h_kv * group, h_kv, h_kv))
    return q, k, v, compress_chunk(k, v, s_k, 1)


def oracle(q, k, v, chunk):
    pools = [BlockPool.allocate(op, D, 0, 0, q.dtype) for op in ("k", "v")]
    empty = torch.zeros(k.shape[1], 1, dtype=torch.int32)
    return ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0)


RESCUE = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from hs_kernels import cuda_prefill as cp
from hs_kernels.chunk_blocks import chunk_as_dense, compress_chunk

D, H_KV, SCALE = 128, 2, 0.09
results = []
for q_pos0, s_k, other, marked, refused, G in json.loads(sys.argv[2]):
    gen = torch.Generator().manual_seed(len(results))
    k, v = (torch.randn(128, H_KV, D, generator=gen).half() for _ in range(2))
    t = 128 - (q_pos0 or 0)
    q = torch.randn(t, H_KV * G, D, generator=gen).half()
    chunk = compress_chunk(k, v, s_k, 1)
    keys = k if s_k == 0 else cp.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)
    values = cp.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index)
    k_d, v_d = (x.float().repeat_interleave(G, 1) for x in chunk_as_dense(k, v, chunk))
    scores = torch.einsum("thd,khd->thk", q.float(), k_d) * SCALE
    if q_pos0 is not None:
        after = torch.arange(128)[None, None, :] > (q_pos0 + torch.arange(t))[:, None, None]
        scores = scores.masked_fill(after, -torch.inf)
    r_out, r_lse = torch.einsum("thk,khd->thd", scores.softmax(-1), v_d), scores.logsumexp(-1)
    parts = None
    if other:  # the same rows over other keys: their result merged into the recomputed part
        o_o, l_o = torch.randn(t, H_KV * G, D, generator=gen).half(), torch.randn(t, H_KV * G, generator=gen) * 3
        parts = (o_o, l_o)
        top = torch.maximum(r_lse, l_o)
        w, w_o = (r_lse - top).exp(), (l_o - top).exp()
        r_out = (r_out * w[..., None] + o_o.float() * w_o[..., None]) / (w + w_o)[..., None]
        r_lse = top + (w + w_o).log()
    longest = k_d.view(128, H_KV, G, D)[:, :, 0].norm(dim=-1).amax(0)  # each KV head's longest key
    work = torch.cat((longest.view(torch.int32), torch.tensor([int(refused)], dtype=torch.int32)))
    edge = (q.float().norm(dim=-1) * work[:-1].view(torch.float32).repeat_interleave(G) * SCALE * cp.LOG2E
            - cp.OFFSET_HEADROOM - cp.UNDERFLOW_GAP) / cp.LOG2E
    out, lse = torch.full_like(q, 7.0), torch.zeros(t, H_KV * G)  # 7: what a row kept must still hold
    kind = torch.randint(0, 4, (t, H_KV * G), generator=gen)  # 0 kept, 1 marked NaN, 2 just below the edge, 3 just above
    lse[kind == 1] = float("nan")
    lse[kind == 2] = edge[kind == 2] - 0.5
    lse[kind == 3] = edge[kind == 3] + 0.5
    before = lse.clone()
    count = torch.zeros(1, dtype=torch.int32)
    cp.rescue(q, keys, values, work, SCALE, q_pos0, out, lse, other=parts, marked=marked, count=count)
    lost = (kind == 1) | ((kind == 2) & (not marked))
    kept = ~lost
    results.append({
        "count": count.item(), "lost": int(lost.sum()), "refused_nan": bool(out.isnan().all() and lse.isnan().all()),
        "out_err": (out[lost].float() - r_out[lost]).abs().max().item() if lost.any() else 0.0,
        "lse_err": (lse[lost] - r_lse[lost]).abs().max().item() if lost.any() else 0.0,
        "kept_untouched": bool((out[kept] == 7.0).all() and torch.equal(lse[kept], before[kept]))})
print(json.dumps(results))
"""


@pytest.mark.parametrize("case", [
    # q_pos0, s_k (1: 2:4 keys, 0: dense keys), other keys' part merged in, only the kernel's marks count, refused,
    # query heads per KV head (a program walks them; 3: its marks read through a power-of-two tile)
    (None, 1, True, False, False, 2),
    (0, 1, False, True, False, 2),
    (0, 0, False, False, False, 2),
    (45, 1, True, False, False, 2),
    (None, 0, False, True, False, 2),
    (None, 1, False, False, True, 2),
    (None, 1, False, True, False, 3),
    (7, 0, True, False, False, 3),
])
def test_rescue_recomputes_the_lost_rows_and_touches_nothing_else(case):
    """``cuda_prefill.rescue`` under Triton's interpreter: the rows marked NaN and (unless ``marked``) those whose
    ``lse`` lies past the static offset's reach (half a unit of log2 below the edge: lost; above: kept) get the exact
    attention over the blocks, merged with another part's where given; every other row keeps what it held; a refused
    launch leaves every row NaN."""
    r = interpret(RESCUE, [case])[0]
    if case[4]:  # refused
        assert r["refused_nan"]
        return
    assert r["lost"] > 0 and r["count"] == r["lost"]
    assert r["kept_untouched"]
    assert r["out_err"] < 2e-2 and r["lse_err"] < 1e-3


def test_compressed_prefill_off_cuda_is_the_oracle():
    q, k, v, chunk = compressed(130, 2, 4, 7)  # a partial last tile: K and V "mixed"
    assert chunk.k_mode == "mixed" and not cuda_prefill.supports(q, 2)
    out, lse = gpu.prefill_compressed_attention(q, k, v, chunk)
    r_out, r_lse = oracle(q, k, v, chunk)
    assert torch.equal(out, r_out) and torch.equal(lse, r_lse)


def test_compressed_prefill_rejects_mismatched_chunk_keys():
    q, k, v, chunk = compressed(64, 2, 4, 9)
    with pytest.raises(ValueError):
        gpu.prefill_compressed_attention(q, k[:32], v, chunk)


@pytest.mark.parametrize("group, head_dim, dtype", [(1, 128, torch.bfloat16), (4, 128, torch.bfloat16),
                                                   (16, 128, torch.bfloat16), (4, 64, torch.bfloat16),
                                                   (3, 64, torch.bfloat16), (6, 128, torch.bfloat16),
                                                   (4, 128, torch.float16), (3, 64, torch.float16)])
def test_kernel_builds_for_hopper(group, head_dim, dtype, tmp_path):
    """The source compiles for sm_90a at these GQA ratios, head_dims and dtypes with the machine's nvcc (no GPU needed), once."""
    if nvcc.find() is None:
        pytest.skip("no nvcc on this machine")
    defines = cuda_prefill.macros(group, head_dim, dtype)
    so = nvcc.library(cuda_prefill.SOURCE, "sm_90a", defines, tmp_path)
    assert so.exists() and so.stat().st_size > 0 and list(tmp_path.iterdir()) == [so]
    assert nvcc.library(cuda_prefill.SOURCE, "sm_90a", defines, tmp_path) == so



PREFIX_BLOCKS = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from hs_kernels import gpu
from hs_kernels.pool import BlockPool

results = []
for h_kv, nb, prefix_len, dense_share, seed in json.loads(sys.argv[2]):
    gen = torch.Generator().manual_seed(seed)
    slots = 3 * nb
    pools = [BlockPool.allocate(op, 128, 4, slots, torch.bfloat16) for op in ("k", "v")]
    # wider than the prefix and sliced: row strides that are not the width
    k_index, v_index = (torch.where(torch.rand(h_kv, nb + 5, generator=gen) < dense_share,
                                    torch.randint(0, 4, (h_kv, nb + 5), generator=gen, dtype=torch.int32),
                                    ~torch.randint(0, slots, (h_kv, nb + 5), generator=gen, dtype=torch.int32))[:, :nb]
                        for _ in range(2))
    used, full = -(-prefix_len // 64), prefix_len // 64
    ki, vi = k_index[:, :used], v_index[:, :used]
    both = ((ki < 0) & (vi < 0)).all(0) & (torch.arange(used) < full)
    has = [bool(x[:, ~both].any()) for x in (ki >= 0, ki < 0, vi >= 0, vi < 0)]
    expected = [both.nonzero()[:, 0].tolist(), (~both).nonzero()[:, 0].tolist(), list(gpu._kinds(has))]
    expected += [x[:, cols].tolist() for cols in (both, ~both) for x in (ki, vi)]
    s = gpu.cuda_prefix_blocks(*pools, k_index, v_index, prefix_len)
    maps = [s.k_sparse, s.v_sparse, s.k_rest, s.v_rest]
    got = [s.sparse.tolist(), s.rest.tolist(), list(s.kinds)] + [m.tolist() for m in maps]
    results.append({"got": got, "expected": expected, "contiguous": all(m.is_contiguous() for m in maps)})

# a small case by hand: a dense entry in one head keeps a block from the kernel; past the pool is refused
k_index = ~torch.arange(14, dtype=torch.int32).view(2, 7)
v_index = ~torch.arange(14, dtype=torch.int32).view(2, 7)
k_index[1, 2] = 0
v_index[0, 4] = 3
pools = [BlockPool.allocate(op, 128, 8, 14, torch.bfloat16) for op in ("k", "v")]

def split(prefix_len):
    try:
        s = gpu.cuda_prefix_blocks(*pools, k_index, v_index, prefix_len)
    except ValueError as e:
        return str(e)
    return [s.sparse.tolist(), s.rest.tolist(), list(s.kinds)]

by_hand = [split(64 * 6 + 5), split(64 * 6), split(64 * 5), split(64 * 4), split(64 * 2), split(63)]
k_index[:, 0], v_index[:, 0] = 5, 6
by_hand.append(split(64 * 2))
v_index[1, 5] = ~14
by_hand += [split(64 * 6), split(64 * 5)]

# several layers at once (different KV heads), as each alone
maps = []
for h_kv, seed in ((2, 7), (3, 8)):
    gen = torch.Generator().manual_seed(seed)
    maps.append(([BlockPool.allocate(op, 128, 4, 99, torch.bfloat16) for op in ("k", "v")],
                 *(torch.where(torch.rand(h_kv, 9, generator=gen) < 0.1, 1, ~torch.arange(9 * h_kv).view(h_kv, 9)).int()
                   for _ in range(2))))
together = gpu.prefix_splits([(*pools, ki, vi) for pools, ki, vi in maps], 64 * 8 + 1)
as_lists = lambda s: [x.tolist() if isinstance(x, torch.Tensor) else list(x) for x in s]  # noqa: E731
layers = [[as_lists(s) for s in together],
          [as_lists(gpu.cuda_prefix_blocks(*pools, ki, vi, 64 * 8 + 1)) for pools, ki, vi in maps]]
print(json.dumps({"random": results, "by_hand": by_hand, "layers": layers}))
"""


def test_prefix_blocks_split_by_kind():
    """``gpu.cuda_prefix_blocks`` (one Triton program, here under the interpreter): the full prefix blocks 2:4 in K and
    V for every KV head go to the kernel; the others, the partial last block among them, stay in order for the Triton
    kernel, with their entries' kinds; an entry of a kernel block past its pool is refused. Random maps (KV heads not
    a power of two, more blocks than one step of the program, sliced maps) against torch; then cases by hand; then
    ``gpu.prefix_splits`` of two layers at once, as each alone."""
    cases = [[2, 7, 64 * 6 + 5, 0.1, 0], [3, 300, 64 * 290, 0.02, 1], [8, 600, 64 * 600 - 1, 0.003, 2],
             [5, 520, 64 * 517, 0.0, 3], [1, 40, 64 * 40, 1.0, 4]]  # KV heads, blocks, prefix, dense share, seed
    r = interpret(PREFIX_BLOCKS, cases)
    for case in r["random"]:
        assert case["got"] == case["expected"] and case["contiguous"]
    assert any(len(case["got"][0]) > 256 for case in r["random"])  # kernel blocks found over more than one step
    assert r["by_hand"] == [
        [[0, 1, 3, 5], [2, 4, 6], [3, 3]],
        [[0, 1, 3, 5], [2, 4], [3, 3]],
        [[0, 1, 3], [2, 4], [3, 3]],
        [[0, 1, 3], [2], [3, 2]],
        [[0, 1], [], [1, 1]],
        [[], [0], [2, 2]],
        [[1], [0], [1, 1]],  # a dense block in every head
        cuda_prefill.REFUSED,  # an entry past the pool: refused, not handed to the kernel
        [[1, 3], [0, 2, 4], [3, 3]],  # that block not used
    ]
    together, alone = r["layers"]
    assert together == alone and together[0] != together[1]


def test_compressed_prefill_reads_dense_keys_from_enough_rows():
    """``gpu.compressed_dense_keys``: a chunk's 2:4 keys read decompressed and stored dense from 2^16 query rows per
    KV head (16384 tokens at 32 / 8 heads, 21846 at 9 / 3)."""
    dense = gpu.compressed_dense_keys
    assert dense(16384, 32, 8) and not dense(16383, 32, 8) and not dense(8192, 32, 8)
    assert dense(21846, 9, 3) and not dense(21845, 9, 3)


def test_compressed_prefill_keys_by_the_chunk_and_its_length(monkeypatch):
    """``gpu.compressed_prefill_keys``: k itself for dense K tiles; for 2:4 ones the chunk's 2:4 blocks below the rule
    and ``chunk_keys`` from it."""
    monkeypatch.setattr(gpu, "chunk_keys", lambda c: ("dense copy", c))
    k, v = (torch.randn(256, 2, 64).half() for _ in range(2))
    dense, sparse = compress_chunk(k, v, 0, 1), compress_chunk(k, v, 1, 1)
    assert gpu.compressed_prefill_keys(k, dense, 4) is k
    short = gpu.compressed_prefill_keys(k, sparse, 4)
    assert short.values is sparse.k_vals and short.meta is sparse.k_meta and short.index is sparse.k_index
    monkeypatch.setattr(gpu, "COMPRESSED_DENSE_KEYS_MIN_ROWS", 512)
    assert gpu.compressed_prefill_keys(k, sparse, 4) == ("dense copy", sparse)
    assert isinstance(gpu.compressed_prefill_keys(k, sparse, 2), cuda_prefill.SparseBlocks)


def test_dense_prefix_keys_from_enough_rows_in_one_part():
    """``gpu.cuda_prefix_dense_keys``: a prefix's keys read dense by default for 2^14 query rows per KV head (4096
    tokens of Llama-3.1-8B's 4 query heads per KV head, 5462 of SmolLM2's 3), in one part only."""
    dense = gpu.cuda_prefix_dense_keys
    assert dense(4096, 32, 8, 1) and not dense(4095, 32, 8, 1) and not dense(8192, 32, 8, 2)
    assert dense(5462, 9, 3, 1) and not dense(5461, 9, 3, 1) and not dense(16383, 8, 8, 1)


def test_auto_rule_takes_long_prefixes_from_fewer_pairs():
    """``gpu.cuda_prefix_worth``: 2^27 query x key pairs from 2^14 keys, or 3 x 2^23 from 40960 keys (a served 64K
    prefix's 65216 2:4 keys from 386 tokens, 128K's from 193); with a given split 3 x 2^23 from 2^14 keys (a served 32K
    prefix's 32448 from 776 tokens) or 64 x 40960 from 40960; never below 2^14 keys."""
    worth = gpu.cuda_prefix_worth
    assert worth(8192, 1 << 14) and not worth(8191, 1 << 14) and not worth(1 << 20, (1 << 14) - 64)
    assert worth(386, 65216) and not worth(385, 65216) and worth(193, 130752) and not worth(192, 130752)
    assert worth(615, 40960) and not worth(614, 40960) and not worth(616, 40896)  # below: the 2^27 rule
    assert worth(3282, 40896)
    # a given split (no host sync in the call): from 64 tokens of 40960 keys, 41 of a served 64K prefix's 65216
    assert worth(64, 40960, given=True) and not worth(63, 40960, given=True) and not worth(64, 40896, given=True)
    assert worth(41, 65216, given=True) and not worth(40, 65216, given=True) and not worth(40, 65216)
    # shorter prefixes, a given split: from 3 x 2^23 pairs (1536 tokens of 2^14 keys, 776 of a served 32K prefix's)
    assert worth(1536, 1 << 14, given=True) and not worth(1535, 1 << 14, given=True) and not worth(1535, 1 << 14)
    assert worth(776, 32448, given=True) and not worth(775, 32448, given=True) and not worth(4096, 32448)
    assert not worth(1 << 20, (1 << 14) - 64, given=True)


def test_builds_exist_for_head_dims_64_128_and_gqa_ratios_1_to_64():
    assert all(cuda_prefill.fits(d, g) for d in (64, 128) for g in range(1, 65))
    assert not any(cuda_prefill.fits(d, g) for d in (64, 128) for g in (0, 65, 128))
    assert not any(cuda_prefill.fits(d, 4) for d in (32, 96, 256))


def test_ctas_per_launch():
    assert cuda_prefill.ctas(8192, 32, 8) == 171 * 8  # 48 tokens of 4 heads per CTA
    assert cuda_prefill.ctas(1, 16, 16) == 16
    assert cuda_prefill.ctas(193, 64, 1) == 65  # G 64: one token per consumer, three per CTA
    assert cuda_prefill.ctas(8192, 9, 3) == 131 * 3  # G 3: 21 tokens per consumer (63 of its 64 rows), 63 per CTA
    assert cuda_prefill.ctas(100, 48, 1) == 34  # G 48: one token per consumer


def test_prefill_attention_checks_its_kernel_everywhere():
    """An unknown ``kernel`` is refused on any machine; off CUDA every kernel choice answers with the reference."""
    from kv_cases import make_prefix

    gen = torch.Generator().manual_seed(9)
    pools_and_maps = make_prefix(2, D, 200, 1.0, 1.0, torch.float32, gen, "cpu")
    q, k, v = (torch.randn(30, h, D, generator=gen) for h in (8, 2, 2))
    with pytest.raises(ValueError, match="kernel must be"):
        gpu.prefill_attention(q, k, v, *pools_and_maps, 200, kernel="tilelang")
    want = ref.prefill_attention(q, k, v, *pools_and_maps, 200)
    for kernel in ("auto", "triton", "cuda"):
        got = gpu.prefill_attention(q, k, v, *pools_and_maps, 200, kernel=kernel)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_operands_of_another_dtype_or_build_are_refused():
    """Before anything is launched: keys, values or out not in the queries' dtype, and a dtype with no build."""
    q, k, v, chunk = compressed(64, 2, 4, 3)
    keys = cuda_prefill.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)
    values = cuda_prefill.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index)
    out, lse = torch.empty_like(q), torch.empty(q.shape[:2])
    for args in ((q.half(), keys, values, out.half()), (q, keys._replace(values=keys.values.half()), values, out),
                 (q, k.half(), values, out), (q, keys, values, out.half())):
        with pytest.raises(ValueError, match="queries' dtype"):
            cuda_prefill.launch(*args[:3], D ** -0.5, None, args[3], lse)
    with pytest.raises(ValueError, match="bf16 and fp16"):
        cuda_prefill.library(4, 128, dtype=torch.float32)
