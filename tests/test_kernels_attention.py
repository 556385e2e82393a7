"""Reference attention: vs a float64 dense oracle on the pruned tensors, decode/prefill/streaming, merge."""

import math

import pytest
import torch
import torch.nn.functional as F

import hs_kernels as hk

TOL = {torch.float32: 1e-3, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def oracle(q, k, v, allowed, scale=None):
    """float64 attention: q [Tq, Hq, D], k/v [Tk, Hkv, D], allowed [Tq, Tk] -> out [Tq, Hq, D], lse [Tq, Hq]."""
    g = q.shape[1] // k.shape[1]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    kk = k.double().repeat_interleave(g, dim=1)
    vv = v.double().repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.double(), kk) * scale
    s = s.masked_fill(~allowed[None], -math.inf)
    lse = torch.logsumexp(s, -1)
    out = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vv)
    return out, lse.transpose(0, 1)


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def causal(tq, tk):
    return torch.arange(tk)[None, :] <= (tk - tq + torch.arange(tq))[:, None]


def shared_pools(caches):
    """Put several sequences' CompressedKV into one pair of pools (as a serving engine would)."""
    pools, indices = [], []
    for op in ("k", "v"):
        ps = [getattr(c, f"{op}_pool") for c in caches]
        pool = hk.BlockPool(op, torch.cat([p.dense for p in ps]), torch.cat([p.values for p in ps]),
                            torch.cat([p.meta for p in ps]))
        max_blocks = max(getattr(c, f"{op}_index").shape[1] for c in caches) + 1
        index = hk.new_index_map(len(caches), caches[0].k_index.shape[0], max_blocks)  # NO_BLOCK padding
        nd = ns = 0
        for b, (c, p) in enumerate(zip(caches, ps)):
            idx = getattr(c, f"{op}_index")
            index[b, :, : idx.shape[1]] = torch.where(idx < 0, idx - ns, idx + nd).int()
            nd, ns = nd + p.num_dense_slots, ns + p.num_sparse_slots
        pools.append(pool)
        indices.append(index)
    return pools, indices


def make_qkv(t, h_q, h_kv, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, h_q, d, generator=g).to(dtype)
    k = (torch.randn(t, h_kv, d, generator=g) * 2).to(dtype)
    v = torch.randn(t, h_kv, d, generator=g).to(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h_q, h_kv, d", [(8, 2, 128), (9, 3, 64), (4, 1, 256), (2, 2, 64)])
def test_prefill_mixed_blocks_vs_float64_oracle(dtype, h_q, h_kv, d):
    t_prefix, t_new = 900, 100
    q, k, v = make_qkv(t_prefix + t_new, h_q, h_kv, d, dtype)
    c = hk.compress_sequence(k[:t_prefix], v[:t_prefix], hk.SparsityConfig(0.5, 1.0, 64, 128))
    assert hk.is_sparse(c.k_index).any() and hk.is_sparse(c.v_index).any() and not hk.is_sparse(c.k_index).all()
    kd, vd = c.dense_kv()
    out, lse = hk.prefill_attention(q[t_prefix:], k[t_prefix:], v[t_prefix:], c.k_pool, c.v_pool,
                                    c.k_index, c.v_index, t_prefix)
    k_seen, v_seen = torch.cat([kd, k[t_prefix:]]), torch.cat([vd, v[t_prefix:]])
    ref_out, ref_lse = oracle(q[t_prefix:], k_seen, v_seen, causal(t_new, t_prefix + t_new))
    assert out.dtype == dtype and out.shape == (t_new, h_q, d) and lse.dtype == torch.float32
    assert rel_err(out, ref_out) < TOL[dtype]
    assert rel_err(lse, ref_lse) < TOL[dtype]
    # the pruned tensors really differ from the originals (the test is not vacuous)
    assert not torch.equal(kd, k[:t_prefix]) and not torch.equal(vd, v[:t_prefix])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_batch_ragged_vs_float64_oracle(dtype):
    h_q, h_kv, d = 8, 2, 128
    lens = [700, 1000, 450]
    seqs = [make_qkv(n, h_q, h_kv, d, dtype, seed=i) for i, n in enumerate(lens)]
    caches = [hk.compress_sequence(k, v, hk.SparsityConfig(1.0, 0.5)) for _, k, v in seqs]
    (k_pool, v_pool), (k_index, v_index) = shared_pools(caches)
    q = torch.stack([s[0][-1] for s in seqs])  # last token of each sequence
    out, lse = hk.decode_attention(q, k_pool, v_pool, k_index, v_index, torch.tensor(lens))
    assert out.shape == (3, h_q, d) and lse.shape == (3, h_q)
    for b, c in enumerate(caches):
        kd, vd = c.dense_kv()
        ref_out, ref_lse = oracle(q[b : b + 1], kd, vd, torch.ones(1, lens[b], dtype=torch.bool))
        assert rel_err(out[b], ref_out[0]) < TOL[dtype]
        assert rel_err(lse[b], ref_lse[0]) < TOL[dtype]


def test_decode_through_pages_equals_decode_on_gathered_maps():
    """A serving pool's maps ``[num_pages, H_kv]`` read through each sequence's pages give the maps
    ``[B, H_kv, blocks]`` decode's result bit for bit."""
    from kv_cases import make_case, paged

    gen = torch.Generator().manual_seed(3)
    k_pool, v_pool, k_index, v_index, sl = make_case(3, 2, 64, [1, 300, 700], 0.5, 0.5, torch.float32, gen, "cpu")
    k_map, v_map, pages = paged(k_index, v_index, gen)
    assert torch.equal(k_map[pages.long()].transpose(1, 2), k_index)
    q = torch.randn(3, 8, 64, generator=gen)
    want = hk.decode_attention(q, k_pool, v_pool, k_index, v_index, sl)
    got = hk.decode_attention(q, k_pool, v_pool, k_map, v_map, sl, pages=pages)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_decode_ignores_rows_past_seq_len_and_equals_prefill_last_row():
    h_q, h_kv, d = 4, 2, 64
    q, k, v = make_qkv(333, h_q, h_kv, d, torch.float32)
    c = hk.compress_sequence(k, v, hk.SparsityConfig(1.0, 1.0, 64, 64))
    c.k_pool.dense[c.k_index[0, -1]] = 1e4  # garbage would sit past token 333 in the last dense block...
    c.k_pool.dense[c.k_index[0, -1], : 333 - 320] = k[320:, 0]  # ...but the live rows are intact
    out, lse = hk.decode_attention(q[-1:], c.k_pool, c.v_pool, c.k_index[None], c.v_index[None], torch.tensor([333]))
    p_out, p_lse = hk.prefill_attention(q[-1:], k[-1:], v[-1:], c.k_pool, c.v_pool, c.k_index, c.v_index, 332)
    torch.testing.assert_close(out, p_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse, p_lse, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sparsity_zero_equals_plain_dense_attention(dtype):
    h_q, h_kv, d, t = 8, 2, 128, 500
    q, k, v = make_qkv(t, h_q, h_kv, d, dtype)
    c = hk.compress_sequence(k, v, hk.SparsityConfig(0.0, 0.0))
    kd, vd = c.dense_kv()
    assert torch.equal(kd, k) and torch.equal(vd, v) and not hk.is_sparse(c.k_index).any()
    empty = torch.zeros(h_kv, 0, dtype=torch.int32)
    out, _ = hk.prefill_attention(q, k, v, c.k_pool, c.v_pool, empty, empty, 0)
    sdpa = F.scaled_dot_product_attention(q.transpose(0, 1).float(), k.transpose(0, 1).float(),
                                          v.transpose(0, 1).float(), is_causal=True, enable_gqa=True)
    # same math in float32; only the final rounding to q's dtype may differ (default tolerances per dtype)
    torch.testing.assert_close(out, sdpa.transpose(0, 1).to(dtype), rtol=1e-4 if dtype == torch.float32 else None,
                               atol=1e-5 if dtype == torch.float32 else None)
    dec, _ = hk.decode_attention(q[-1:], c.k_pool, c.v_pool, c.k_index[None], c.v_index[None], torch.tensor([t]))
    torch.testing.assert_close(dec, out[-1:])


def test_chunked_prefill_equals_one_shot():
    h_q, h_kv, d = 6, 2, 64
    q, k, v = make_qkv(600, h_q, h_kv, d, torch.float32)
    empty = torch.zeros(h_kv, 0, dtype=torch.int32)
    k_pool0, v_pool0 = hk.BlockPool.allocate("k", d, 0, 0, torch.float32), hk.BlockPool.allocate("v", d, 0, 0, torch.float32)
    one_shot, one_lse = hk.prefill_attention(q, k, v, k_pool0, v_pool0, empty, empty, 0)
    outs, lses, start = [], [], 0
    for stop in (200, 330, 600):  # chunk boundaries not on block boundaries
        if start:
            c = hk.compress_sequence(k[:start], v[:start], hk.SparsityConfig(0.0, 0.0))
            pools, idx = (c.k_pool, c.v_pool), (c.k_index, c.v_index)
        else:
            pools, idx = (k_pool0, v_pool0), (empty, empty)
        o, l = hk.prefill_attention(q[start:stop], k[start:stop], v[start:stop], *pools, *idx, start)
        outs.append(o)
        lses.append(l)
        start = stop
    torch.testing.assert_close(torch.cat(outs), one_shot, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.cat(lses), one_lse, rtol=1e-5, atol=1e-6)


def test_chunked_prefill_on_sparse_prefix_vs_oracle():
    h_q, h_kv, d = 8, 4, 128
    q, k, v = make_qkv(1024, h_q, h_kv, d, torch.float32, seed=5)
    c = hk.compress_sequence(k[:768], v[:768], hk.SparsityConfig(1.0, 1.0, 64, 256))
    kd, vd = c.dense_kv()
    out, lse = hk.prefill_attention(q[768:], k[768:], v[768:], c.k_pool, c.v_pool, c.k_index, c.v_index, 768)
    ref_out, ref_lse = oracle(q[768:], torch.cat([kd, k[768:]]), torch.cat([vd, v[768:]]), causal(256, 1024))
    assert rel_err(out, ref_out) < 1e-3 and rel_err(lse, ref_lse) < 1e-3


def streaming_mask(q_pos, k_pos, sink, window):
    allowed = torch.zeros(len(q_pos), len(k_pos), dtype=torch.bool)
    for i, p in enumerate(q_pos.tolist()):
        for j, kp in enumerate(k_pos.tolist()):
            allowed[i, j] = 0 <= kp <= p and (kp < sink or kp > p - window)
    return allowed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_streaming_decode_bounded_ring_buffer_vs_oracle(dtype):
    h_q, h_kv, d, sink, window, n = 4, 2, 64, 8, 16, 100
    q, k, v = make_qkv(n, h_q, h_kv, d, dtype, seed=7)
    # bounded storage: 8 sink slots + a 16-slot ring buffer holding tokens 84..99 (rotated), 1 empty slot
    recent = torch.arange(n - window, n)
    ring = torch.roll(recent, 5)
    k_pos = torch.cat([torch.arange(sink), ring, torch.tensor([-1])])
    kk = torch.cat([k[:sink], k[ring], torch.zeros(1, h_kv, d, dtype=dtype)])
    vv = torch.cat([v[:sink], v[ring], torch.full((1, h_kv, d), 1e3).to(dtype)])
    out, lse = hk.streaming_attention(q[-1:][None], torch.tensor([[n - 1]]), kk[None], vv[None], k_pos[None], sink, window)
    assert out.shape == (1, 1, h_q, d) and lse.shape == (1, 1, h_q)
    ref_out, ref_lse = oracle(q[-1:], k, v, streaming_mask(torch.tensor([n - 1]), torch.arange(n), sink, window))
    assert rel_err(out[0], ref_out) < TOL[dtype] and rel_err(lse[0], ref_lse) < TOL[dtype]


def test_streaming_prefill_chunk_vs_oracle():
    h_q, h_kv, d, sink, window = 6, 3, 128, 4, 32
    q, k, v = make_qkv(120, h_q, h_kv, d, torch.float32, seed=8)
    q_pos, k_pos = torch.arange(60, 120), torch.arange(120)
    out, lse = hk.streaming_attention(q[60:][None], q_pos[None], k[None], v[None], k_pos[None], sink, window)
    ref_out, ref_lse = oracle(q[60:], k, v, streaming_mask(q_pos, k_pos, sink, window))
    assert rel_err(out[0], ref_out) < 1e-3 and rel_err(lse[0], ref_lse) < 1e-3


def test_merge_of_disjoint_partials_equals_full_attention():
    h_q, h_kv, d, n = 4, 2, 64, 200
    q, k, v = make_qkv(n, h_q, h_kv, d, torch.float32, seed=9)
    pos = torch.arange(n)
    first = torch.where(pos % 3 == 0, pos, -1)  # disjoint key subsets via empty (-1) positions
    second = torch.where(pos % 3 != 0, pos, -1)
    args = lambda kp: (q[-5:][None], pos[-5:][None], k[None], v[None], kp[None], n, n)  # noqa: E731
    oa, la = hk.streaming_attention(*args(first))
    ob, lb = hk.streaming_attention(*args(second))
    full_o, full_l = hk.streaming_attention(*args(pos))
    mo, ml = hk.merge_attention(oa, la, ob, lb)
    torch.testing.assert_close(mo, full_o, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ml, full_l, rtol=1e-5, atol=1e-6)
    # an empty side (no visible keys: lse = -inf, out = 0) contributes nothing
    eo, el = hk.streaming_attention(*args(torch.full((n,), -1)))
    assert torch.isinf(el).all() and (eo == 0).all()
    mo2, ml2 = hk.merge_attention(full_o, full_l, eo, el)
    torch.testing.assert_close(mo2, full_o)
    torch.testing.assert_close(ml2, full_l)
    none_o, none_l = hk.merge_attention(eo, el, eo, el)
    assert (none_o == 0).all() and torch.isinf(none_l).all()


def test_sm_scale_is_honoured():
    q, k, v = make_qkv(70, 2, 1, 64, torch.float32, seed=10)
    c = hk.compress_sequence(k, v)
    out, lse = hk.decode_attention(q[-1:], c.k_pool, c.v_pool, c.k_index[None], c.v_index[None], torch.tensor([70]), sm_scale=0.3)
    ref_out, ref_lse = oracle(q[-1:], k, v, torch.ones(1, 70, dtype=torch.bool), scale=0.3)
    assert rel_err(out, ref_out) < 1e-5 and rel_err(lse, ref_lse) < 1e-5


# ---- chunk invariance: a query's result must not depend on how the queries were cut into calls ----
# (bf16 serving compares cached runs, prefill resumed after a cached prefix, with cold runs, one chunk:
# fp32 results that differ in the last bit flip bf16 roundings, and over 30 layers outputs drift apart)

def _chunked_prefill(q, k, v, cuts, s_k=0.0, s_v=0.0):
    """Prefill in chunks ending at ``cuts``, each chunk against the compressed blocks of the previous ones."""
    h_kv, d = k.shape[1], k.shape[2]
    outs, lses, start = [], [], 0
    for stop in cuts:
        if start:
            c = hk.compress_sequence(k[:start], v[:start], hk.SparsityConfig(s_k, s_v, 64, 64))
            pools, idx = (c.k_pool, c.v_pool), (c.k_index, c.v_index)
        else:
            empty = torch.zeros(h_kv, 0, dtype=torch.int32)
            pools = (hk.BlockPool.allocate("k", d, 0, 0, k.dtype), hk.BlockPool.allocate("v", d, 0, 0, k.dtype))
            idx = (empty, empty)
        o, l = hk.prefill_attention(q[start:stop], k[start:stop], v[start:stop], *pools, *idx, start)
        outs.append(o)
        lses.append(l)
        start = stop
    return torch.cat(outs), torch.cat(lses)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h_q, h_kv, d", [(6, 2, 64), (4, 4, 128)])
def test_prefill_bitwise_independent_of_chunking(dtype, h_q, h_kv, d):
    n = 1100
    q, k, v = make_qkv(n, h_q, h_kv, d, dtype, seed=11)
    one_shot = _chunked_prefill(q, k, v, [n])
    # a cached prefix of 1024 (page-aligned, as the radix cache gives), odd cuts, and 1-2 token chunks
    for cuts in ([1024, n], [130, 777, 1024, n], [64, 65, 67, 900, n]):
        out, lse = _chunked_prefill(q, k, v, cuts)
        assert torch.equal(out, one_shot[0]), cuts
        assert torch.equal(lse, one_shot[1]), cuts


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_on_compressed_prefix_bitwise_equals_one_shot_on_pruned_keys(dtype):
    # hs cold: the whole prompt in one chunk, its blocks pruned in flight; hs cached: the prefix read
    # from 2:4-compressed blocks, the rest prefilled. Same pruned values, so the same bits.
    h_q, h_kv, d, p, n = 6, 2, 64, 768, 900
    q, k, v = make_qkv(n, h_q, h_kv, d, dtype, seed=12)
    c = hk.compress_sequence(k[:p], v[:p], hk.SparsityConfig(1.0, 1.0, 64, 64))
    assert hk.is_sparse(c.k_index).any() and hk.is_sparse(c.v_index).any()
    kd, vd = c.dense_kv()
    cold = _chunked_prefill(q, torch.cat([kd, k[p:]]), torch.cat([vd, v[p:]]), [n])
    hot = hk.prefill_attention(q[p:], k[p:], v[p:], c.k_pool, c.v_pool, c.k_index, c.v_index, p)
    assert torch.equal(hot[0], cold[0][p:]) and torch.equal(hot[1], cold[1][p:])


def test_decode_bitwise_independent_of_batch_and_equal_to_prefill_row():
    h_q, h_kv, d = 8, 2, 128
    lens = [300, 1000]
    seqs = [make_qkv(n, h_q, h_kv, d, torch.bfloat16, seed=20 + i) for i, n in enumerate(lens)]
    caches = [hk.compress_sequence(k, v, hk.SparsityConfig(0.0, 0.0)) for _, k, v in seqs]
    (k_pool, v_pool), (k_index, v_index) = shared_pools(caches)
    q = torch.stack([s[0][-1] for s in seqs])
    both, both_lse = hk.decode_attention(q, k_pool, v_pool, k_index, v_index, torch.tensor(lens))
    alone, alone_lse = hk.decode_attention(q[:1], k_pool, v_pool, k_index[:1], v_index[:1], torch.tensor(lens[:1]))
    assert torch.equal(both[:1], alone) and torch.equal(both_lse[:1], alone_lse)
    q0, k0, v0 = seqs[0]
    row, row_lse = _chunked_prefill(q0, k0, v0, [lens[0]])
    assert torch.equal(alone[0], row[-1]) and torch.equal(alone_lse[0], row_lse[-1])


@pytest.mark.parametrize("sink, window", [(64, 64), (100, 200)])
def test_streaming_bitwise_same_for_cold_and_cached_key_layouts(sink, window):
    # cold: one chunk, every key passed; cached: queries from 1024, keys = sink + window before 1024,
    # both widened to whole pages (hk.streaming_keys, as the hs backend passes them)
    h_q, h_kv, d, p, n = 6, 2, 64, 1024, 1150
    q, k, v = make_qkv(n, h_q, h_kv, d, torch.bfloat16, seed=13)
    pos = torch.arange(n)
    cold = hk.streaming_attention(q[None], pos[None], k[None], v[None], pos[None], sink, window)
    kpos = hk.streaming_keys(p, n, sink, window)
    hot = hk.streaming_attention(q[None, p:], pos[None, p:], k[None, kpos], v[None, kpos], kpos[None], sink, window)
    assert torch.equal(hot[0], cold[0][:, p:]) and torch.equal(hot[1], cold[1][:, p:])
