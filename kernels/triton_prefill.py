"""Triton prefill kernel: a query chunk against its cached prefix of mixed dense/2:4-sparse blocks
plus the chunk itself, causal.

Same semantics as ``hs_kernels.attention.prefill_attention`` (the oracle). Program ``(query tile,
head group)``, heavy (late) tiles first: a tile's ``BLOCK_M`` rows are ``BLOCK_M / HG`` consecutive
query tokens x ``HG`` query heads of one KV group (row ``r``: token ``r // HG``, head ``r % HG``), so
the heads of a group share every K/V tile loaded and a short chunk does not leave rows empty.
Online softmax in base 2 over three key loops:
  * the prefix blocks through the index maps (each entry's dense or sparse copy, as in decode:
    both issued, masked by the entry's sign, so no load sits in a branch; sparse blocks unpacked
    in registers), keys past ``prefix_len`` masked and their V rows read as zeros; with
    ``PREFIX_N`` 128 (dense pools only) two blocks per key tile;
  * the chunk's key tiles (``CHUNK_N`` keys) wholly below the tile's first token (no mask);
  * the rest up to its last token (causal mask).
The chunk's own keys come dense from ``k``/``v`` (the serving backend passes them already pruned); with
``TMA`` these are tensor descriptors ``[T, H_KV * D]`` of ``CHUNK_N x D`` tiles (Hopper's bulk copies).
With ``PREFIX_TMA`` the prefix was densified whole, in per-head order (``densify_kernel`` with ``ALL``: a
block pair of one head is 128 adjacent rows) and ``k_tiles``/``v_tiles`` are descriptors of that copy's 128 x D
tiles, so a pair is one bulk copy at a position known without reading the index maps (else they are None).
With ``SPLIT`` the prefix blocks are divided among the programs of grid axis 2 (``per_split``
blocks each; the last one also takes the partial block and the chunk) and each writes its
normalised partial output and log-sum-exp for ``triton_decode.combine_kernel``: a short chunk
(a question after a cached prefix) then fills the GPU instead of walking the prefix in a few programs.
``K_MODE`` / ``V_MODE`` (1 dense, 2 sparse, 3 both) are chosen from the prefix's entries (the
all-dense and all-sparse kernels read only one copy); ``SELECT`` picks, in mode 3, between the two
copies with a select instead of a branch. ``densify_kernel`` copies the used prefix blocks of every
KV head, of each operand that has 2:4 blocks, into a dense scratch pool once, so that a long chunk's programs read them dense instead of
each unpacking every sparse block again.
"""

import triton
import triton.language as tl

from .triton_blocks import _DENSE, _LN2, BS, load_block, slot_offsets


@triton.jit
def _softmax_step(q, k, v, m_i, l_i, acc, scale_log2, visible, MASKED: tl.constexpr):
    # the scale is folded into exp2's argument (one FMA per score; scale_log2 > 0, so the max commutes with it)
    s = tl.dot(q, tl.trans(k))
    if MASKED:
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s * scale_log2 - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _prefix_block(q, m_i, l_i, acc, scale_log2, j, live, k_dense, k_vals, k_meta, v_dense, v_vals, v_meta,
                  k_index, v_index, index_row, dense_off, dense_t_off, kv_off, km_off, vv_off, vm_off,
                  D: tl.constexpr, K_MODE: tl.constexpr, V_MODE: tl.constexpr, PRMT: tl.constexpr,
                  SELECT: tl.constexpr, MASKED: tl.constexpr):
    """Prefix block ``j`` through the index maps; ``live`` (MASKED) marks its rows in the prefix
    (V rows outside read as zeros: a stale pool row must not meet p = 0 as NaN)."""
    ke = tl.load(k_index + index_row + j)
    ve = tl.load(v_index + index_row + j)
    if MASKED:
        k_mask = live[:, None]
        v_mask = live[None, :]
    else:
        k_mask = True
        v_mask = True
    k = load_block(k_dense, k_vals, k_meta, ke, dense_off, kv_off, km_off, k_mask, BS, D, K_MODE, q.dtype, PRMT, SELECT)
    if V_MODE == _DENSE:
        v = tl.load(v_dense + ve.to(tl.int64) * (BS * D) + dense_off, mask=k_mask, other=0.0)
    else:
        v = tl.trans(load_block(v_dense, v_vals, v_meta, ve, dense_t_off, vv_off, vm_off, v_mask, D, BS, V_MODE,
                                q.dtype, PRMT, SELECT))
        if MASKED:  # a sparse copy has no row mask
            v = tl.where(k_mask, v, 0.0)
    return _softmax_step(q, k, v, m_i, l_i, acc, scale_log2, v_mask, MASKED)


@triton.jit(do_not_specialize=["t_len", "prefix_len", "nb", "per_split"])  # one compile per variant, not per length
def prefill_kernel(q_ptr, k_ptr, v_ptr, k_dense, k_vals, k_meta, v_dense, v_vals, v_meta, k_index, v_index,
                   k_tiles, v_tiles, out_ptr, lse_ptr, scale_log2, t_len, prefix_len, nb, per_split,
                   H_KV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, HG: tl.constexpr,
                   K_MODE: tl.constexpr, V_MODE: tl.constexpr, PRMT: tl.constexpr, SELECT: tl.constexpr,
                   SPLIT: tl.constexpr, CHUNK_N: tl.constexpr, PREFIX_N: tl.constexpr, TMA: tl.constexpr,
                   PREFIX_TMA: tl.constexpr):
    mx = tl.num_programs(0) - 1 - tl.program_id(0)
    sp = tl.program_id(2)
    last = sp == tl.num_programs(2) - 1
    hk = tl.program_id(1) * HG // G
    h_q = H_KV * G
    r = tl.arange(0, BLOCK_M)
    rows = mx * (BLOCK_M // HG) + r // HG  # query token of each row, in the chunk
    heads = tl.program_id(1) * HG + r % HG
    cols = tl.arange(0, D)
    tok = tl.arange(0, BS)
    q = tl.load(q_ptr + (rows[:, None].to(tl.int64) * h_q + heads[:, None]) * D + cols[None, :],
                mask=(rows < t_len)[:, None], other=0.0)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)

    # prefix blocks
    index_row = hk.to(tl.int64) * nb
    dense_off, dense_t_off, kv_off, km_off, vv_off, vm_off = slot_offsets(D)
    k_vals = k_vals.to(tl.pointer_type(tl.int32))
    k_meta = k_meta.to(tl.pointer_type(tl.int32))
    v_vals = v_vals.to(tl.pointer_type(tl.int32))
    v_meta = v_meta.to(tl.pointer_type(tl.int32))
    full = prefix_len // BS
    lo = sp * per_split
    hi = tl.minimum(full, (sp + 1) * per_split)
    if PREFIX_N == 2 * BS:  # dense pools: two blocks per key tile, gathered through their two entries
        ptok = tl.arange(0, PREFIX_N)
        low_block = ptok < BS
        pair_off = (ptok % BS)[:, None] * D + cols[None, :]
        for j in range(lo, lo + (hi - lo) // 2 * 2, 2):
            if PREFIX_TMA:  # the copy holds block j of KV head hk at slot hk * (prefix blocks) + j: no index load
                row0 = (hk * tl.cdiv(prefix_len, BS) + j) * BS
                k = k_tiles.load([row0, 0])
                v = v_tiles.load([row0, 0])
            else:
                ke = tl.where(low_block, tl.load(k_index + index_row + j), tl.load(k_index + index_row + j + 1))
                ve = tl.where(low_block, tl.load(v_index + index_row + j), tl.load(v_index + index_row + j + 1))
                k = tl.load(k_dense + ke[:, None].to(tl.int64) * (BS * D) + pair_off)
                v = tl.load(v_dense + ve[:, None].to(tl.int64) * (BS * D) + pair_off)
            m_i, l_i, acc = _softmax_step(q, k, v, m_i, l_i, acc, scale_log2, True, False)
        lo = lo + (hi - lo) // 2 * 2  # an odd block left over
    for j in range(lo, hi):
        m_i, l_i, acc = _prefix_block(q, m_i, l_i, acc, scale_log2, j, True, k_dense, k_vals, k_meta, v_dense, v_vals,
                                      v_meta, k_index, v_index, index_row, dense_off, dense_t_off, kv_off, km_off,
                                      vv_off, vm_off, D, K_MODE, V_MODE, PRMT, SELECT, False)
    if last:
        if full * BS < prefix_len:  # the last prefix block, partly filled: rows past the prefix masked
            live = (full * BS + tok) < prefix_len
            m_i, l_i, acc = _prefix_block(q, m_i, l_i, acc, scale_log2, full, live, k_dense, k_vals, k_meta, v_dense,
                                          v_vals, v_meta, k_index, v_index, index_row, dense_off, dense_t_off, kv_off,
                                          km_off, vv_off, vm_off, D, K_MODE, V_MODE, PRMT, SELECT, True)

        # the chunk: key tiles wholly below this query tile's first token, then the rest up to its last
        row_stride = H_KV * D
        ctok = tl.arange(0, CHUNK_N)
        chunk_off = ctok[:, None].to(tl.int64) * row_stride + hk * D + cols[None, :]
        first = mx * (BLOCK_M // HG)
        below = first // CHUNK_N * CHUNK_N
        for c0 in range(0, below, CHUNK_N):
            if TMA:
                k = k_ptr.load([c0, hk * D])
                v = v_ptr.load([c0, hk * D])
            else:
                k = tl.load(k_ptr + c0 * row_stride + chunk_off)
                v = tl.load(v_ptr + c0 * row_stride + chunk_off)
            m_i, l_i, acc = _softmax_step(q, k, v, m_i, l_i, acc, scale_log2, True, False)
        for c0 in range(below, tl.minimum(first + BLOCK_M // HG, t_len), CHUNK_N):
            keys = c0 + ctok
            if TMA:  # rows past the chunk come back zero
                k = k_ptr.load([c0, hk * D])
                v = v_ptr.load([c0, hk * D])
            else:
                inside = (keys < t_len)[:, None]
                k = tl.load(k_ptr + c0 * row_stride + chunk_off, mask=inside, other=0.0)
                v = tl.load(v_ptr + c0 * row_stride + chunk_off, mask=inside, other=0.0)
            visible = (keys[None, :] <= rows[:, None]) & (keys < t_len)[None, :]
            m_i, l_i, acc = _softmax_step(q, k, v, m_i, l_i, acc, scale_log2, visible, True)

    out = acc / l_i[:, None]
    valid = rows < t_len
    row = rows.to(tl.int64) * h_q + heads
    if SPLIT:  # partials [T * H_q, splits, D] / [T * H_q, splits]
        row = row * tl.num_programs(2) + sp
    tl.store(out_ptr + row[:, None] * D + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=valid[:, None])
    tl.store(lse_ptr + row, (m_i + tl.log2(l_i)) * _LN2, mask=valid)


@triton.jit(do_not_specialize=["nb", "head_stride"])  # one compile per variant, not per prefix length
def densify_kernel(k_dense, k_vals, k_meta, v_dense, v_vals, v_meta, k_index, v_index, k_out, v_out, nb,
                   tok_stride, head_stride, D: tl.constexpr, K_MODE: tl.constexpr, V_MODE: tl.constexpr,
                   PRMT: tl.constexpr, ALL: tl.constexpr):
    """Program ``(block j, KV head h)``: the blocks of entries ``k_index[h, j]`` / ``v_index[h, j]``,
    token-major, into ``k_out`` / ``v_out`` as tokens ``64 j ..`` of head ``h``: element ``c`` of token ``i`` at
    ``h head_stride + i tok_stride + c`` (rows as stored, stale ones included: the prefill masks them). An operand
    whose entries are all dense is copied only with ``ALL``."""
    j = tl.program_id(0)
    h = tl.program_id(1)
    dense_off, dense_t_off, kv_off, km_off, vv_off, vm_off = slot_offsets(D)
    tok = (j * BS + tl.arange(0, BS)).to(tl.int64)
    dst = h.to(tl.int64) * head_stride + tok[:, None] * tok_stride + tl.arange(0, D)[None, :]
    if ALL or K_MODE != _DENSE:
        ke = tl.load(k_index + h.to(tl.int64) * nb + j)
        k = load_block(k_dense, k_vals.to(tl.pointer_type(tl.int32)), k_meta.to(tl.pointer_type(tl.int32)), ke,
                       dense_off, kv_off, km_off, True, BS, D, K_MODE, k_out.dtype.element_ty, PRMT)
        tl.store(k_out + dst, k)
    if ALL or V_MODE != _DENSE:
        ve = tl.load(v_index + h.to(tl.int64) * nb + j)
        v = load_block(v_dense, v_vals.to(tl.pointer_type(tl.int32)), v_meta.to(tl.pointer_type(tl.int32)), ve,
                       dense_t_off, vv_off, vm_off, True, D, BS, V_MODE, v_out.dtype.element_ty, PRMT)
        tl.store(v_out + dst, tl.trans(v))
