"""Triton decode kernel: one new token per sequence against mixed dense/2:4-sparse KV blocks.

Same semantics as ``hs_kernels.attention.decode_attention`` (the oracle). Split-KV: program
``(split, kv_head, seq)`` walks its share of the sequence's 64-token blocks through the index maps,
(read in place through the sequence's pages where the maps are a pool's, ``PAGED``),
with the ``H_q / H_kv`` query heads of the KV group packed as the rows of one tile; online softmax
in base 2; ``combine`` merges the splits by log-sum-exp.

Decode is bandwidth-bound, so the only thing that matters is moving the stored bytes at full speed.
Each block iteration issues *both* the dense and the sparse loads of K and V, masked by the sign of
the index-map entry: a masked-off load moves no bytes, and with no load inside a branch Triton's
pipeliner keeps the next blocks' copies in flight while this one is computed (the TileLang kernel's
load/branch/barrier loop could not: docs/kernels.md); only the math branches on the entry. Sparse
blocks are unpacked in registers (the pruned positions become zeros) and go through the same
``tl.dot`` as dense ones.
``K_MODE`` / ``V_MODE`` (1 dense, 2 sparse, 3 both) compile out the loads a pool cannot need.
``ROWS`` > 1 (an extend's tokens as decode rows, ``groups``): program ``(split, kv_head, tile)`` takes ``ROWS``
consecutive rows and walks each run of equal group ids among them once, through the run's first row's pages, every
key masked by its own row's length.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from .triton_blocks import _DENSE, _LN2, BS, load_block, slot_offsets


@triton.jit(do_not_specialize=["batch"])
def decode_kernel(q_ptr, k_dense, k_vals, k_meta, v_dense, v_vals, v_meta, k_index, v_index, seq_lens, pages, groups,
                  o_part, lse_part, scale_log2, max_blocks, splits, batch,
                  H_KV: tl.constexpr, G: tl.constexpr, BLOCK_H: tl.constexpr, D: tl.constexpr,
                  K_MODE: tl.constexpr, V_MODE: tl.constexpr, PRMT: tl.constexpr, PAGED: tl.constexpr,
                  ROWS: tl.constexpr = 1):
    sx = tl.program_id(0)
    hx = tl.program_id(1)
    bx = tl.program_id(2)
    # tile row m: query head m % G of row bx * ROWS + m // G
    m = tl.arange(0, BLOCK_H)
    row = bx * ROWS + m // G
    used = (m < ROWS * G) & (row < batch)
    cols = tl.arange(0, D)
    tok = tl.arange(0, BS)
    head = hx * G + m % G
    q = tl.load(q_ptr + (row * H_KV * G + head)[:, None] * D + cols[None, :], mask=used[:, None], other=0.0)
    if ROWS == 1:
        n_groups = 1
    else:
        # runs of equal group ids share their blocks: each is walked once for all its rows
        gid = tl.load(groups + row, mask=used, other=-1)
        prev = tl.load(groups + row - 1, mask=used & (m >= G), other=-1)
        starts = used & (m % G == 0) & ((m < G) | (gid != prev))
        run = tl.cumsum(starts.to(tl.int32), 0) - 1
        n_groups = tl.sum(starts.to(tl.int32), 0)
        lens = tl.load(seq_lens + row, mask=used, other=0)

    m_i = tl.full((BLOCK_H,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_H,), tl.float32)
    acc = tl.zeros((BLOCK_H, D), tl.float32)
    dense_off, dense_t_off, kv_off, km_off, vv_off, vm_off = slot_offsets(D)
    # sparse slots read as int32 words: one per group of values, one per 8 groups of metadata
    k_vals = k_vals.to(tl.pointer_type(tl.int32))
    k_meta = k_meta.to(tl.pointer_type(tl.int32))
    v_vals = v_vals.to(tl.pointer_type(tl.int32))
    v_meta = v_meta.to(tl.pointer_type(tl.int32))
    for gx in range(n_groups):
        if ROWS == 1:
            first = bx
            seq_len = tl.load(seq_lens + bx)
        else:
            member = used & (run == gx)
            first = tl.min(tl.where(member, row, batch), 0)
            seq_len = tl.max(tl.where(member, lens, 0), 0)
        n_blocks = tl.cdiv(seq_len, BS)
        per = tl.cdiv(n_blocks, splits)
        start = sx * per
        stop = tl.minimum(start + per, n_blocks)
        # PAGED: the maps are [num_pages, H_KV], block j's row is pages[first, j]; else [B, H_KV, max_blocks]
        index_row = first.to(tl.int64) * max_blocks if PAGED else (first * H_KV + hx).to(tl.int64) * max_blocks
        for j in range(start, stop):
            if PAGED:
                at = tl.load(pages + index_row + j).to(tl.int64) * H_KV + hx
            else:
                at = index_row + j
            ke = tl.load(k_index + at)
            ve = tl.load(v_index + at)
            pos = j * BS + tok
            live = pos < seq_len
            k = load_block(k_dense, k_vals, k_meta, ke, dense_off, kv_off, km_off, True, BS, D, K_MODE, q.dtype, PRMT)
            s = tl.dot(q, tl.trans(k)) * scale_log2
            if ROWS == 1:
                keep = live[None, :]
            else:  # another run's rows, and each row's keys past its own length: no weight
                keep = member[:, None] & (pos[None, :] < lens[:, None])
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # a grouped row may have seen no key yet (another run's, a split past its end)
            m_safe = m_new if ROWS == 1 else tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
            # rows past the sequence end (last block, always dense) may hold stale data: masked.
            # A dense-only pool is read token-major (measured faster); otherwise as V^T, like sparse slots.
            if V_MODE == _DENSE:
                v = tl.load(v_dense + ve.to(tl.int64) * (BS * D) + dense_off, mask=live[:, None], other=0.0)
            else:
                v = tl.trans(load_block(v_dense, v_vals, v_meta, ve, dense_t_off, vv_off, vm_off, live[None, :], D,
                                        BS, V_MODE, q.dtype, PRMT))
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)

    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * _LN2, float("-inf"))
    part = (row * H_KV * G + head) * splits + sx
    tl.store(o_part + part[:, None] * D + cols[None, :], out, mask=used[:, None])
    tl.store(lse_part + part, lse, mask=used)


@triton.jit(do_not_specialize=["splits"])
def combine_kernel(o_part, lse_part, out, lse_out, splits, o_row, o_split, l_row, l_split, D: tl.constexpr,
                   SPLITS_P2: tl.constexpr, DEPENDENT: tl.constexpr = False):
    """Program per (seq, query head): log-sum-exp merge of its ``splits`` partial results, split ``s`` of row ``r`` at
    ``o_part + r o_row + s o_split`` (``lse_part`` likewise). ``DEPENDENT``: launched as a programmatic dependent of
    the kernel that writes the partials (sm_90), so it waits for that grid here."""
    if DEPENDENT:
        gdc_wait()
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, SPLITS_P2)
    cols = tl.arange(0, D)
    lse = tl.load(lse_part + row * l_row + s * l_split, mask=s < splits, other=float("-inf"))
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m_safe)
    total = tl.sum(w, 0)
    o = tl.load(o_part + row * o_row + (s.to(tl.int64) * o_split)[:, None] + cols[None, :], mask=(s < splits)[:, None],
                other=0.0)
    res = tl.sum(w[:, None] * o, 0) / tl.where(total > 0, total, 1.0)
    tl.store(out + row * D + cols, res.to(out.dtype.element_ty))
    tl.store(lse_out + row, tl.where(total > 0, m_safe + tl.log(total), float("-inf")))


@triton.jit(do_not_specialize=["rows", "splits"])
def combine_rows_kernel(o_part, lse_part, out, lse_out, rows, splits, o_row, o_split, l_row, l_split, D: tl.constexpr,
                        SPLITS_P2: tl.constexpr, ROWS: tl.constexpr):
    """``combine_kernel`` for many rows (a prefill's tokens x heads): a program per ``ROWS`` of the ``rows`` rows,
    which reads one split's ``[ROWS, D]`` partials at a time."""
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    live = row < rows
    s = tl.arange(0, SPLITS_P2)
    lse = tl.load(lse_part + row[:, None] * l_row + s[None, :] * l_split, mask=live[:, None] & (s < splits)[None, :],
                  other=float("-inf"))
    m = tl.max(lse, 1)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    total = tl.sum(tl.exp(lse - m_safe[:, None]), 1)
    cols = tl.arange(0, D)
    acc = tl.zeros([ROWS, D], dtype=tl.float32)
    for i in range(splits):
        w = tl.exp(tl.load(lse_part + row * l_row + i * l_split, mask=live, other=float("-inf")) - m_safe)
        o = tl.load(o_part + row[:, None] * o_row + i * o_split + cols[None, :], mask=live[:, None], other=0.0)
        acc += w[:, None] * o
    res = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(out + row[:, None] * D + cols[None, :], res.to(out.dtype.element_ty), mask=live[:, None])
    tl.store(lse_out + row, tl.where(total > 0, m_safe + tl.log(total), float("-inf")), mask=live)
