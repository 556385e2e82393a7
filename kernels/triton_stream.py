"""Triton streaming-attention kernel: queries against sink + recent-window keys (streaming groups).

Same semantics as ``hs_kernels.attention.streaming_attention`` (the oracle): a query at position p
sees key position j iff ``0 <= j <= p`` and (``j < sink`` or ``j > p - window``); keys at
position -1 are empty. Program ``(row tile, KV head, sequence)``; a row is one (query token,
query head of the group) pair, so the group's query heads share every K/V tile and a decode step
(one token, G heads) still fills a tensor-core tile. Keys are read in blocks of 64 indices; a
block whose position range ``[block_lo, block_hi]`` (precomputed) no row of the tile can see is
skipped, so each tile reads only its sink and window, whatever else ``k`` holds. With ``ROWS``, k and v
are storage ``[R, H_KV, D]`` and key n of sequence b lies at row ``rows[b, n]`` (the serving pool's stream
slots, read in place). With ``SPLIT`` (``splits`` > 1: a decode step's few tiles), program ``(row tile, KV head,
sequence x splits + s)`` reads only key blocks ``[s per_split, (s + 1) per_split)`` and writes its partial result
at split s of ``out [B, T, H_q, splits, D]`` / ``lse [B, T, H_q, splits]`` (float32) for a log-sum-exp merge.
Lengths and split counts are runtime values, not specialized: one compile per tile shape serves every request.
Online softmax in base 2; a row that sees no key gets ``out = 0``, ``lse = -inf``.
"""

import triton
import triton.language as tl

from .triton_blocks import _LN2, BS


@triton.jit(do_not_specialize=["t_len", "n_keys", "n_blocks", "splits", "per_split"])
def stream_kernel(q_ptr, qpos_ptr, k_ptr, v_ptr, kpos_ptr, rows_ptr, block_lo, block_hi, out_ptr, lse_ptr,
                  scale_log2, t_len, n_keys, n_blocks, splits, per_split, sink, window, H_KV: tl.constexpr,
                  G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr):
    mt = tl.program_id(0)
    hk = tl.program_id(1)
    b = (tl.program_id(2) // splits).to(tl.int64)
    split = tl.program_id(2) % splits
    h_q = H_KV * G
    r = mt * BLOCK_M + tl.arange(0, BLOCK_M)
    t = r // G
    live = t < t_len
    cols = tl.arange(0, D)
    tok = tl.arange(0, BS)
    q_row = ((b * t_len + t) * h_q + hk * G + r % G) * D
    q = tl.load(q_ptr + q_row[:, None] + cols[None, :], mask=live[:, None], other=0.0)
    qp = tl.load(qpos_ptr + b * t_len + t, mask=live, other=-1)
    q_lo = tl.min(tl.where(live, qp, 2147483647))
    q_hi = tl.max(qp)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    j_lo, j_hi = 0, n_blocks
    if SPLIT:  # a compile-time branch: the unsplit kernel keeps its plain loop (and register allocation)
        j_lo, j_hi = split * per_split, tl.minimum(split * per_split + per_split, n_blocks)
    for j in range(j_lo, j_hi):
        lo = tl.load(block_lo + b * n_blocks + j)
        hi = tl.load(block_hi + b * n_blocks + j)
        if (lo <= q_hi) & ((lo < sink) | (hi > q_lo - window)):
            idx = j * BS + tok
            kp = tl.load(kpos_ptr + b * n_keys + idx, mask=idx < n_keys, other=-1)
            present = kp >= 0
            if ROWS:
                kv_row = (tl.load(rows_ptr + b * n_keys + idx, mask=present, other=0).to(tl.int64) * H_KV + hk) * D
            else:
                kv_row = ((b * n_keys + idx) * H_KV + hk) * D
            k = tl.load(k_ptr + kv_row[:, None] + cols[None, :], mask=present[:, None], other=0.0)
            v = tl.load(v_ptr + kv_row[:, None] + cols[None, :], mask=present[:, None], other=0.0)
            seen = present[None, :] & (kp[None, :] <= qp[:, None]) & (
                (kp[None, :] < sink) | (kp[None, :] > qp[:, None] - window))
            s = tl.where(seen, tl.dot(q, tl.trans(k)) * scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet: p = 0
            alpha = tl.exp2(m_i - m_use)
            p = tl.exp2(s - m_use[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new

    some = l_i > 0
    out = acc / tl.where(some, l_i, 1.0)[:, None]
    lse = tl.where(some, (m_i + tl.log2(tl.where(some, l_i, 1.0))) * _LN2, float("-inf"))
    row = (b * t_len + t) * h_q + hk * G + r % G
    tl.store(out_ptr + (row * splits + split)[:, None] * D + cols[None, :], out.to(out_ptr.dtype.element_ty),
             mask=live[:, None])
    tl.store(lse_ptr + row * splits + split, lse, mask=live)
