"""The CUDA prefix path's split of a cached prefix (``gpu.cuda_prefix_blocks``) in one launch: which blocks go to the
sparse tensor cores, which stay for the Triton part, the kinds of the latter's entries, and each part's entries gathered.
One launch instead of some twenty small torch operations (0.76 ms of host time per call) and four index gathers."""

import triton
import triton.language as tl

HEAD = 6  # out[:HEAD]: 2:4 blocks, refused entry, the rest's K dense, K sparse, V dense, V sparse
_HEAD = tl.constexpr(HEAD)


@triton.jit
def _any(x):
    return tl.max(tl.max(x.to(tl.int32), 1), 0)


@triton.jit
def _classify(k_index, v_index, k_stride, v_stride, used, full, heads, block, H_KV: tl.constexpr):
    """The entries ``[HEADS, BLOCK]`` of ``block`` (padding -1, as 2:4), whether each is a real entry, and whether each
    block goes to the kernel (``both``: whole and 2:4 in K and V for every KV head) or not (``rest``)."""
    entry = (heads < H_KV) & (block < used)[None, :]
    ki = tl.load(k_index + heads * k_stride + block[None, :], mask=entry, other=-1)
    vi = tl.load(v_index + heads * v_stride + block[None, :], mask=entry, other=-1)
    # padding entries read as 2:4 (-1): they change no block's "every head"
    both = (tl.max(((ki >= 0) | (vi >= 0)).to(tl.int32), 0) == 0) & (block < full)
    return ki, vi, entry, both, (block < used) & (both == 0)


@triton.jit(do_not_specialize=["used", "full", "k_slots", "v_slots"])
def prefix_blocks_kernel(k_index, v_index, k_stride, v_stride, used, full, k_slots, v_slots, out, maps,
                         H_KV: tl.constexpr, HEADS: tl.constexpr, BLOCK: tl.constexpr):
    """One program over the ``used`` prefix blocks of the index maps ``[H_KV, >= used]`` (row strides ``k_stride``,
    ``v_stride``; ``HEADS``: ``H_KV`` rounded up to a power of two), ``BLOCK`` blocks a step. A block goes to the
    kernel where it is one of the first ``full`` (whole) blocks and 2:4 in K and V for every KV head. ``out [HEAD + 2
    x used]`` int32: their count ``n``; 1 where such a block's entry lies past ``k_slots`` / ``v_slots`` (else 0);
    whether the other blocks' K entries hold dense ones, sparse ones, then V's likewise (0 / 1); from ``HEAD`` the
    kernel's blocks ascending; from ``HEAD + used`` the other blocks ascending. ``maps [2, H_KV x used]`` int32, K's
    then V's: the kernel's blocks' entries ``[H_KV, n]``, then the other blocks' ``[H_KV, used - n]``, each row-major
    (written in a second pass, once ``n`` is known)."""
    heads = tl.arange(0, HEADS)[:, None]
    n_sparse = tl.zeros((), tl.int32)
    n_rest = tl.zeros((), tl.int32)
    bad = tl.zeros((), tl.int32)
    k_dense = tl.zeros((), tl.int32)
    k_sparse = tl.zeros((), tl.int32)
    v_dense = tl.zeros((), tl.int32)
    v_sparse = tl.zeros((), tl.int32)
    for start in range(0, used, BLOCK):
        block = start + tl.arange(0, BLOCK)
        ki, vi, entry, both, rest = _classify(k_index, v_index, k_stride, v_stride, used, full, heads, block, H_KV)
        past = ((-1 - ki >= k_slots) | (-1 - vi >= v_slots)) & entry & both[None, :]
        bad = tl.maximum(bad, _any(past))
        others = entry & rest[None, :]
        k_dense = tl.maximum(k_dense, _any((ki >= 0) & others))
        k_sparse = tl.maximum(k_sparse, _any((ki < 0) & others))
        v_dense = tl.maximum(v_dense, _any((vi >= 0) & others))
        v_sparse = tl.maximum(v_sparse, _any((vi < 0) & others))
        both_i, rest_i = both.to(tl.int32), rest.to(tl.int32)
        tl.store(out + _HEAD + n_sparse + tl.cumsum(both_i, 0) - 1, block, mask=both)
        tl.store(out + _HEAD + used + n_rest + tl.cumsum(rest_i, 0) - 1, block, mask=rest)
        n_sparse += tl.sum(both_i)
        n_rest += tl.sum(rest_i)
    tl.store(out, n_sparse)
    tl.store(out + 1, bad)
    tl.store(out + 2, k_dense)
    tl.store(out + 3, k_sparse)
    tl.store(out + 4, v_dense)
    tl.store(out + 5, v_sparse)
    n_s = tl.zeros((), tl.int32)
    n_r = tl.zeros((), tl.int32)
    for start in range(0, used, BLOCK):
        block = start + tl.arange(0, BLOCK)
        ki, vi, entry, both, rest = _classify(k_index, v_index, k_stride, v_stride, used, full, heads, block, H_KV)
        both_i, rest_i = both.to(tl.int32), rest.to(tl.int32)
        at_sparse = heads * n_sparse + (n_s + tl.cumsum(both_i, 0) - 1)[None, :]
        at_rest = H_KV * n_sparse + heads * (used - n_sparse) + (n_r + tl.cumsum(rest_i, 0) - 1)[None, :]
        at = tl.where(both[None, :], at_sparse, at_rest)
        tl.store(maps + at, ki, mask=entry)
        tl.store(maps + H_KV * used + at, vi, mask=entry)
        n_s += tl.sum(both_i)
        n_r += tl.sum(rest_i)
