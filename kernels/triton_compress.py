"""Triton compression kernel: fused magnitude 2:4 selection, values + int16 metadata, block loss.

Same results as the reference: ``mask = element_mask(blocks, operand)``, then
``compress_blocks(blocks, mask, operand)`` (values and metadata bit exact) and
``block_loss(blocks, mask)`` (equal up to float32 summation order).

One program per 64-token block, everything in registers: the block is loaded whole, and the four
elements of every 2:4 group of the operand layout (K: 4 consecutive channels of a token; V: 4
consecutive tokens of a channel) become four ``[ROWS, GROUPS]`` tensors, so the selection is elementwise. Magnitudes are compared as integer
bit patterns (monotonic for IEEE floats), clamped at +inf so NaN ties with inf (the reference's
``nan_to_num(inf)``); ties go to the lower index (the reference's 6-comparison rank). Block ``n``
goes to pool slot ``slots[n]``, nowhere when that is negative (a loss-only pass); its loss (L1 of the
two pruned elements of every group, float32) is always written.

``prune_kernel`` makes the same selection on a chunk's tiles in place in ``[T, H, D]`` (any strides): their losses, or
a copy with the pruned elements of chosen tiles zeroed (a chunk's prefill sparsity), in one launch instead of the
reference's few dozen.
"""

import triton
import triton.language as tl


@triton.jit
def _magnitude(x, BITS: tl.constexpr, ABS: tl.constexpr, INF: tl.constexpr):
    if BITS == 16:
        a = x.to(tl.int16, bitcast=True).to(tl.int32) & ABS
    else:
        a = x.to(tl.int32, bitcast=True) & ABS
    return tl.minimum(a, INF)


@triton.jit
def _load_groups(src, ROWS: tl.constexpr, G: tl.constexpr, D: tl.constexpr, IS_K: tl.constexpr, STRIDE):
    """The four elements of every group of one token-major block at ``src`` (tokens ``STRIDE`` elements apart), each
    ``[ROWS, G]`` (operand row, group): one load, regrouped in registers (four strided loads, one per element,
    measured 2x slower on the H200)."""
    x = tl.load(src + tl.arange(0, 64)[:, None] * STRIDE + tl.arange(0, D)[None, :])
    if IS_K:
        x = tl.reshape(x, (ROWS, G, 2, 2))
    else:  # [4 g + j, c] -> [c, g, j]
        x = tl.reshape(tl.permute(tl.reshape(x, (G, 4, D)), (2, 0, 1)), (ROWS, G, 2, 2))
    even, odd = tl.split(x)
    x0, x2 = tl.split(even)
    x1, x3 = tl.split(odd)
    return x0, x1, x2, x3


@triton.jit
def _store_groups(dst, x0, x1, x2, x3, G: tl.constexpr, D: tl.constexpr, IS_K: tl.constexpr, STRIDE):
    """``_load_groups`` inverted: the four ``[ROWS, G]`` element tensors stored as one token-major block at ``dst``."""
    x = tl.join(tl.join(x0, x2), tl.join(x1, x3))  # [ROWS, G, 2, 2]: element 2 a + b at [..., a, b]
    if IS_K:
        x = tl.reshape(x, (64, D))
    else:  # [c, g, j] -> [4 g + j, c]
        x = tl.reshape(tl.permute(tl.reshape(x, (D, G, 4)), (1, 2, 0)), (64, D))
    tl.store(dst + tl.arange(0, 64)[:, None] * STRIDE + tl.arange(0, D)[None, :], x)


@triton.jit
def _kept(x0, x1, x2, x3, BITS: tl.constexpr, ABS: tl.constexpr, INF: tl.constexpr):
    """Whether each element of a group is kept: the 2 largest magnitudes, ties to the lower index."""
    a0 = _magnitude(x0, BITS, ABS, INF)
    a1 = _magnitude(x1, BITS, ABS, INF)
    a2 = _magnitude(x2, BITS, ABS, INF)
    a3 = _magnitude(x3, BITS, ABS, INF)
    b01 = (a0 >= a1).to(tl.int32)
    b02 = (a0 >= a2).to(tl.int32)
    b03 = (a0 >= a3).to(tl.int32)
    b12 = (a1 >= a2).to(tl.int32)
    b13 = (a1 >= a3).to(tl.int32)
    b23 = (a2 >= a3).to(tl.int32)
    # element i is kept when fewer than 2 others beat it (rank = number beating it)
    return (3 - (b01 + b02 + b03)) < 2, (b01 + 2 - (b12 + b13)) < 2, (b02 + b12 + 1 - b23) < 2, (b03 + b13 + b23) < 2


@triton.jit
def _pruned_l1(x0, x1, x2, x3, k0, k1, k2, k3):
    """The block's loss: L1 of its pruned elements, float32."""
    pruned = (tl.where(k0, 0.0, tl.abs(x0.to(tl.float32))) + tl.where(k1, 0.0, tl.abs(x1.to(tl.float32)))
              + tl.where(k2, 0.0, tl.abs(x2.to(tl.float32))) + tl.where(k3, 0.0, tl.abs(x3.to(tl.float32))))
    return tl.sum(tl.sum(pruned, axis=1), axis=0)


@triton.jit
def compress_kernel(blocks, slots, values, meta, loss, stride_h, stride_c, stride_t, D: tl.constexpr,
                    IS_K: tl.constexpr, IN_PLACE: tl.constexpr, BITS: tl.constexpr, ABS: tl.constexpr,
                    INF: tl.constexpr):
    """blocks ``[H, C, 64, D]`` token-major: IN_PLACE, with any strides but the last (a chunk's ``[T, H, D]`` tiles
    read in place), else contiguous ``[N, 64, D]`` as ``H = 1`` (a pool's; its constant strides take about half the
    registers); program ``(c, h)``: block ``n = h C + c``. slots ``[N]`` int32; values ``[S, ROWS, LEN / 2]`` and meta
    ``[S, ROWS, LEN / 16]`` int16 (the sparse pool, operand layout); loss ``[N]`` float32."""
    ROWS: tl.constexpr = 64 if IS_K else D
    LEN: tl.constexpr = D if IS_K else 64
    G: tl.constexpr = LEN // 4
    c = tl.program_id(0)
    h = tl.program_id(1)
    n = h * tl.num_programs(0) + c
    if IN_PLACE:
        x0, x1, x2, x3 = _load_groups(blocks + h.to(tl.int64) * stride_h + c.to(tl.int64) * stride_c, ROWS, G, D, IS_K,
                                      stride_t)
    else:
        x0, x1, x2, x3 = _load_groups(blocks + n.to(tl.int64) * (64 * D), ROWS, G, D, IS_K, D)
    k0, k1, k2, k3 = _kept(x0, x1, x2, x3, BITS, ABS, INF)
    idx0 = tl.where(k0, 0, tl.where(k1, 1, 2))
    idx1 = tl.where(k3, 3, tl.where(k2, 2, 1))
    v0 = tl.where(k0, x0, tl.where(k1, x1, x2))
    v1 = tl.where(k3, x3, tl.where(k2, x2, x1))
    tl.store(loss + n, _pruned_l1(x0, x1, x2, x3, k0, k1, k2, k3))

    slot = tl.load(slots + n)
    keep = slot >= 0
    slot = tl.maximum(slot, 0).to(tl.int64)
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, 2 * G)[None, :]
    tl.store(values + slot * (ROWS * 2 * G) + r * (2 * G) + c, tl.reshape(tl.join(v0, v1), (ROWS, 2 * G)), mask=keep)
    g = tl.arange(0, G)[None, :]
    nib = (idx0 | (idx1 << 2)) << ((g % 4) * 4)  # group 4m + j at bits 4j of metadata word m
    words = tl.sum(tl.reshape(nib, (ROWS, G // 4, 4)), axis=2)
    w = tl.arange(0, G // 4)[None, :]
    tl.store(meta + slot * (ROWS * (G // 4)) + r * (G // 4) + w, words.to(tl.int16), mask=keep)


@triton.jit(do_not_specialize=["tiles"])  # one compile per model and operand, not per chunk length
def prune_kernel(x, sparse, out, loss, tiles, stride_t, stride_h, D: tl.constexpr, IS_K: tl.constexpr,
                 APPLY: tl.constexpr, BITS: tl.constexpr, ABS: tl.constexpr, INF: tl.constexpr):
    """x ``[T, H, D]`` (strides ``stride_t``, ``stride_h``, 1) from its first tile; program ``(c, h)``: tile ``c`` of head
    ``h``. APPLY: where ``sparse[h, c]`` (uint8 ``[H, tiles]``), the tile's pruned elements are zeroed in ``out``
    (contiguous ``[T, H, D]``, x's copy); else ``loss[h, c]`` (float32 ``[H, tiles]``) is written."""
    ROWS: tl.constexpr = 64 if IS_K else D
    LEN: tl.constexpr = D if IS_K else 64
    G: tl.constexpr = LEN // 4
    c = tl.program_id(0)
    h = tl.program_id(1)
    n = h * tiles + c
    if APPLY:
        if tl.load(sparse + n) == 0:
            return
    x0, x1, x2, x3 = _load_groups(x + c.to(tl.int64) * 64 * stride_t + h * stride_h, ROWS, G, D, IS_K, stride_t)
    k0, k1, k2, k3 = _kept(x0, x1, x2, x3, BITS, ABS, INF)
    if APPLY:
        _store_groups(out + (c.to(tl.int64) * 64 * tl.num_programs(1) + h) * D, tl.where(k0, x0, 0.0),
                      tl.where(k1, x1, 0.0), tl.where(k2, x2, 0.0), tl.where(k3, x3, 0.0), G, D, IS_K,
                      tl.num_programs(1) * D)
    else:
        tl.store(loss + n, _pruned_l1(x0, x1, x2, x3, k0, k1, k2, k3))
