"""The CUDA prefill's lost rows recomputed on the GPU (``cuda_prefill.rescue``): a row whose scores all lie far below
the kernel's static softmax offset may have had every exponential flushed to zero. Such rows are rare on real
activations (4 of 184320 over SmolLM2's layers: docs/kernels.md), so each program first
tests its rows and returns at once where none is lost; the others attend with a running maximum (float32 sums) over
the same 2:4 blocks (as ``triton_prefill`` does), with no host sync."""

import triton
import triton.language as tl

from .triton_blocks import _LN2, _SPARSE, BS, LOG2E, load_block, slot_offsets
from .triton_prefill import _softmax_step

_LOG2E = tl.constexpr(LOG2E)


@triton.jit
def _attend_rows(q, hk, tok, k_dense, k_vals, k_meta, v_vals, v_meta, k_index, v_index, scale_log2, nb, q_pos0,
                 H_KV: tl.constexpr, D: tl.constexpr, TOK: tl.constexpr, K_DENSE: tl.constexpr,
                 CAUSAL: tl.constexpr, PRMT: tl.constexpr):
    """``(out, lse)``: queries ``q [TOK, D]`` of KV head ``hk`` over its ``nb`` blocks (causally: token ``tok`` at
    position ``q_pos0 + tok``), float32, lse natural."""
    dense_off, dense_t_off, kv_off, km_off, vv_off, vm_off = slot_offsets(D)
    k_vals = k_vals.to(tl.pointer_type(tl.int32))
    k_meta = k_meta.to(tl.pointer_type(tl.int32))
    v_vals = v_vals.to(tl.pointer_type(tl.int32))
    v_meta = v_meta.to(tl.pointer_type(tl.int32))
    keys = tl.arange(0, BS)
    cols = tl.arange(0, D)
    m_i = tl.full((TOK,), float("-inf"), tl.float32)
    l_i = tl.zeros((TOK,), tl.float32)
    acc = tl.zeros((TOK, D), tl.float32)
    stop = nb
    if CAUSAL:  # key 0 is visible to every row, so no row's maximum stays -inf
        stop = tl.minimum(nb, (q_pos0 + tl.max(tok)) // BS + 1)
    for j in range(0, stop):
        if K_DENSE:
            k = tl.load(k_dense + ((keys + j * BS)[:, None].to(tl.int64) * H_KV + hk) * D + cols[None, :])
        else:
            k = load_block(k_vals, k_vals, k_meta, tl.load(k_index + hk * nb + j), dense_off, kv_off, km_off, True,
                           BS, D, _SPARSE, q.dtype, PRMT)
        v = tl.trans(load_block(v_vals, v_vals, v_meta, tl.load(v_index + hk * nb + j), dense_t_off, vv_off, vm_off,
                                True, D, BS, _SPARSE, q.dtype, PRMT))
        visible = (keys + j * BS)[None, :] <= (q_pos0 + tok)[:, None]
        m_i, l_i, acc = _softmax_step(q, k, v, m_i, l_i, acc, scale_log2, visible, CAUSAL)
    return acc / l_i[:, None], (m_i + tl.log2(l_i)) * _LN2


@triton.jit(do_not_specialize=["t_len", "nb", "q_pos0"])
def rescue_kernel(q_ptr, k_dense, k_vals, k_meta, v_vals, v_meta, k_index, v_index, work, other_out, other_lse,
                  out_ptr, lse_ptr, count, scale_log2, headroom, gap, t_len, nb, q_pos0,
                  H_KV: tl.constexpr, G: tl.constexpr, G_P2: tl.constexpr, D: tl.constexpr, TOK: tl.constexpr,
                  K_DENSE: tl.constexpr, CAUSAL: tl.constexpr, MARKED: tl.constexpr, OTHER: tl.constexpr,
                  COUNT: tl.constexpr, PRMT: tl.constexpr):
    """Program (token tile, KV head): its rows' ``out``/``lse`` replaced where lost, for each of the KV head's ``G``
    query heads in turn (a program per query head ran about 90 us on a 32K chunk of Llama's 32 heads, launch-bound,
    where nothing is lost; ``MARKED``: the G heads' marks are read at once first, ``G_P2`` the power of two from G).
    Lost: ``lse`` NaN (the kernel's mark) or, unless ``MARKED`` (only the marks count), ``lse`` (log2) more than
    ``gap`` below the offset ``|q| x work[hk] (the longest key, float bits) x scale_log2 - headroom``. ``OTHER``: the
    rows' attention over other keys (``other_out``, ``other_lse``) merged into the recomputed part. Where
    ``work[H_KV]`` is set (the launch refused an index entry and computed nothing) every row becomes NaN. ``COUNT``:
    lost rows added to ``count``."""
    hk = tl.program_id(1)
    tok = tl.program_id(0) * TOK + tl.arange(0, TOK)
    in_t = tok < t_len
    cols = tl.arange(0, D)
    refused = tl.load(work + H_KV) != 0
    todo = G
    if MARKED:  # the G heads' marks in one load: most programs find none and stop here
        heads = tl.arange(0, G_P2)
        marks = tl.load(lse_ptr + tok[:, None].to(tl.int64) * (H_KV * G) + hk * G + heads[None, :],
                        mask=in_t[:, None] & (heads < G)[None, :], other=0.0)
        todo = tl.where(refused | (tl.sum((marks != marks).to(tl.int32)) > 0), G, 0)
    for h in range(hk * G, hk * G + todo):
        row = tok.to(tl.int64) * (H_KV * G) + h
        q_off = row[:, None] * D + cols[None, :]
        lse = tl.load(lse_ptr + row, mask=in_t, other=0.0)
        lost = in_t & (lse != lse)
        if not MARKED:
            qf = tl.load(q_ptr + q_off, mask=in_t[:, None], other=0.0).to(tl.float32)
            bound = tl.sqrt(tl.sum(qf * qf, 1)) * tl.load(work + hk).to(tl.float32, bitcast=True) * scale_log2
            lost = lost | (in_t & (lse * _LOG2E < bound - headroom - gap))
        n_lost = tl.sum(lost.to(tl.int32))
        if refused:
            tl.store(out_ptr + q_off, tl.full((TOK, D), float("nan"), tl.float32).to(out_ptr.dtype.element_ty),
                     mask=in_t[:, None])
            tl.store(lse_ptr + row, tl.full((TOK,), float("nan"), tl.float32), mask=in_t)
        elif n_lost > 0:
            q = tl.load(q_ptr + q_off, mask=in_t[:, None], other=0.0)
            out, lse = _attend_rows(q, hk, tok, k_dense, k_vals, k_meta, v_vals, v_meta, k_index, v_index,
                                    scale_log2, nb, q_pos0, H_KV, D, TOK, K_DENSE, CAUSAL, PRMT)
            if OTHER:
                lse_o = tl.load(other_lse + row, mask=in_t, other=float("-inf"))
                top = tl.maximum(lse, lse_o)
                w = tl.exp(lse - top)
                w_o = tl.exp(lse_o - top)
                o_o = tl.load(other_out + q_off, mask=in_t[:, None], other=0.0).to(tl.float32)
                out = (out * w[:, None] + o_o * w_o[:, None]) / (w + w_o)[:, None]
                lse = top + tl.log(w + w_o)
            tl.store(out_ptr + q_off, out.to(out_ptr.dtype.element_ty), mask=lost[:, None])
            tl.store(lse_ptr + row, lse, mask=lost)
            if COUNT:
                tl.atomic_add(count, n_lost)
