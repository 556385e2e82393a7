"""Reference attention over HieraSparse blocks (the CPU serving path and the test oracle).

Semantics shared by every function here (GPU kernels must match them):
  * ``softmax(scale * q k^T) v`` with ``scale = sm_scale or 1 / sqrt(D)``; sparse blocks take part
    with their pruned elements as zeros (what 2:4 sparse tensor cores compute);
  * GQA: query head ``h`` reads KV head ``h // (H_q // H_kv)`` (consecutive query heads share a KV
    head, as in HF ``repeat_kv`` and SGLang);
  * math in float32 whatever the input dtype; ``out`` is returned in q's dtype;
  * ``lse`` is float32, natural log: ``lse = log(sum_j exp(scale * q . k_j))`` over the keys the
    query may see, one per query head; ``-inf`` (with ``out = 0``) when it sees none;
  * partial results over disjoint key sets combine exactly with ``merge_attention``.
No Python loops over tokens or heads; only over query tiles (to bound memory) and, for streaming
attention, over the few key blocks a tile sees. A query's result does not depend on how queries
are cut into calls and tiles (see ``_attend``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .format import BLOCK_SIZE, INDEX_DTYPE, check_dtype, check_shape, check_value_dtype
from .pool import BlockPool

_TILE_ELEMS = 1 << 22  # scores held at once per query tile (float32): 16 MiB; 128 MiB on CUDA
_TILE_ELEMS_CUDA = 1 << 25
_KEY_BLOCK = BLOCK_SIZE  # keys per fixed reduction block (see _attend)
_MIN_ROWS = 16  # fewest GEMM rows per KV head (see _attend)


def decode_attention(q: torch.Tensor, k_pool: BlockPool, v_pool: BlockPool,
                     k_index: torch.Tensor, v_index: torch.Tensor, seq_lens: torch.Tensor,
                     sm_scale: float | None = None, pages: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One new token per sequence against its paged, mixed dense/sparse KV (retrieval heads).

    q:        ``[B, H_q, D]`` the new token of each of B sequences.
    k_pool, v_pool: the layer's ``BlockPool`` for K and V.
    k_index, v_index: int32 ``[B, H_kv, max_blocks]``: block ``j`` of KV head ``h`` of sequence
              ``b`` (tokens ``64j .. 64j+63``), format of ``hs_kernels.format``. Entries at
              ``j >= ceil(seq_lens[b] / 64)`` are ignored (any value).
    seq_lens: ``[B]`` integer, tokens in the cache per sequence, the new token's K/V included
              (it is already stored, in a dense block). Rows at ``t >= seq_lens[b]`` of the last
              block are ignored.
    pages:    optional integer ``[B, max_blocks]``: then k_index, v_index are maps ``[num_pages, H_kv]``
              (a serving pool's, one row per page) and block ``j`` of sequence ``b`` is their row
              ``pages[b, j]``, read in place (no gather per call). Entries past a sequence's blocks
              are ignored as above.
    Returns ``out [B, H_q, D]`` (q's dtype) and ``lse [B, H_q]`` (float32).
    """
    check_value_dtype(q, "q")
    if q.dim() != 3:
        raise ValueError(f"q must have shape [batch, H_q, head_dim], got {list(q.shape)}")
    batch = q.shape[0]
    if pages is not None:
        _check_paged_maps(k_index, v_index, pages, batch)
        if pages.numel() and (int(pages.min()) < 0 or int(pages.max()) >= k_index.shape[0]):
            raise ValueError(f"pages must be in [0, {k_index.shape[0]}) (rows of the maps)")
        k_index, v_index = (m[pages.long()].transpose(1, 2) for m in (k_index, v_index))
    h_kv, max_blocks = _check_index_pair(k_index, v_index, (batch, None, None))
    _check_pools(k_pool, v_pool, q.shape[-1])
    _check_gqa(q.shape[1], h_kv)
    check_shape(seq_lens, (batch,), "seq_lens")
    seq_lens = seq_lens.long()
    if batch and (int(seq_lens.min()) < 1 or int(seq_lens.max()) > max_blocks * BLOCK_SIZE):
        raise ValueError(f"seq_lens must be in [1, {max_blocks * BLOCK_SIZE}] (index maps hold {max_blocks} blocks)")
    used = -(-seq_lens // BLOCK_SIZE)  # blocks per sequence
    valid = (torch.arange(max_blocks, device=q.device) < used[:, None])[:, None, :].expand(batch, h_kv, max_blocks)
    k = k_pool.gather(k_index, valid).flatten(2, 3)  # [B, H_kv, max_blocks * 64, D]
    v = v_pool.gather(v_index, valid).flatten(2, 3)
    allowed = (torch.arange(k.shape[2], device=q.device) < seq_lens[:, None])[:, None, :]  # [B, 1, Tk]
    out, lse = _attend(q.unsqueeze(2), k, v, allowed, _scale(sm_scale, q))
    return out.squeeze(2).to(q.dtype), lse.squeeze(2)


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor, v_index: torch.Tensor,
                      prefix_len: int, sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of one sequence's query chunk against its cached prefix plus the chunk itself.

    q:        ``[T, H_q, D]`` queries at positions ``prefix_len .. prefix_len + T - 1``.
    k, v:     ``[T, H_kv, D]`` the chunk's own new keys/values (dense, not read from the pools).
    k_index, v_index: int32 ``[H_kv, nb]`` with ``nb >= ceil(prefix_len / 64)``: the cached prefix
              blocks (mixed dense/sparse) in the pools; entries past the prefix are ignored.
    prefix_len: tokens already cached (0 for the first chunk; need not be a multiple of 64).
    Query ``i`` sees every prefix token and new tokens ``0 .. i``. Chunked prefill (each chunk
    against the blocks of the previous ones) equals one-shot prefill when the prefix is dense.
    Returns ``out [T, H_q, D]`` (q's dtype) and ``lse [T, H_q]`` (float32).
    """
    t, _, d, h_kv, nb = _check_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len)
    used = -(-prefix_len // BLOCK_SIZE)
    valid = (torch.arange(nb, device=q.device) < used).expand(h_kv, nb)
    k_prefix = k_pool.gather(k_index, valid).flatten(1, 2)[:, :prefix_len]  # [H_kv, P, D]
    v_prefix = v_pool.gather(v_index, valid).flatten(1, 2)[:, :prefix_len]
    k_all = torch.cat((k_prefix.float(), k.transpose(0, 1).float()), dim=1)[None]
    v_all = torch.cat((v_prefix.float(), v.transpose(0, 1).float()), dim=1)[None]
    q_pos = prefix_len + torch.arange(t, device=q.device)
    allowed = (torch.arange(prefix_len + t, device=q.device)[None, :] <= q_pos[:, None])[None]
    out, lse = _attend(q.transpose(0, 1)[None], k_all, v_all, allowed, _scale(sm_scale, q))
    return out[0].transpose(0, 1).to(q.dtype), lse[0].transpose(0, 1)


def streaming_attention(q: torch.Tensor, q_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        k_pos: torch.Tensor, sink_tokens: int, window_tokens: int,
                        sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Streaming heads: each query sees only the sink tokens and its recent window (bounded KV).

    q:      ``[B, T, H_q, D]`` (T = 1 for decode), at absolute positions ``q_pos [B, T]`` (int).
    k, v:   ``[B, N, H_kv, D]`` the bounded storage (sink slots, a ring buffer of recent tokens and
            any new tokens, in any order), at absolute positions ``k_pos [B, N]`` (int, -1 = empty).
    A query at position p sees key position j iff ``0 <= j <= p`` and
    (``j < sink_tokens`` or ``j > p - window_tokens``): the window includes the query itself.
    Returns ``out [B, T, H_q, D]`` (q's dtype) and ``lse [B, T, H_q]`` (float32).
    """
    _check_streaming(q, q_pos, k, v, k_pos, sink_tokens, window_tokens)
    qp, kp = q_pos.long()[:, :, None], k_pos.long()[:, None, :]
    allowed = (kp >= 0) & (kp <= qp) & ((kp < sink_tokens) | (kp > qp - window_tokens))  # [B, T, N]
    out, lse = _attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), allowed, _scale(sm_scale, q),
                       positional=False)
    return out.transpose(1, 2).to(q.dtype), lse.transpose(1, 2)


def streaming_keys(first_query: int, num_tokens: int, sink_tokens: int, window_tokens: int,
                   device=None) -> torch.Tensor:
    """Positions of the keys that queries ``first_query .. num_tokens - 1`` may see under
    ``streaming_attention``, ascending: the sink and the first query's window, both widened to whole
    64-token pages, then every later key. In this layout a key's index modulo 64 is its position's
    (the reference then gives a query the same result however a prefill was chunked or cached; the
    extra keys are masked), and the GPU kernel reads only the blocks a tile sees."""
    sink = min(-(-sink_tokens // BLOCK_SIZE) * BLOCK_SIZE, num_tokens)
    first = max(sink, window_start(first_query, window_tokens))
    return torch.cat((torch.arange(sink, device=device), torch.arange(first, num_tokens, device=device)))


def window_start(first_query, window_tokens: int):
    """The page-aligned first key position that a query at ``first_query`` (an int or a tensor) or
    later may see in its window (``streaming_keys`` reads from there, or from the sink's end)."""
    return (first_query - window_tokens + 1) // BLOCK_SIZE * BLOCK_SIZE


def merge_attention(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                    lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two partial attentions of the same queries over disjoint key sets.

    ``out_*``: ``[..., D]``; ``lse_*``: ``[...]`` natural-log LSE as returned by this module.
    Returns ``(out, lse)`` equal to attention over the union (``out`` in out_a's dtype, lse float32);
    a side with ``lse = -inf`` (no keys) contributes nothing.
    """
    if out_a.shape != out_b.shape or lse_a.shape != lse_b.shape or out_a.shape[:-1] != lse_a.shape:
        raise ValueError(f"merge needs out [..., D] and lse [...] of equal shapes, got {list(out_a.shape)}, "
                         f"{list(lse_a.shape)}, {list(out_b.shape)}, {list(lse_b.shape)}")
    la, lb = lse_a.float(), lse_b.float()
    m = torch.maximum(la, lb)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(la - m), torch.exp(lb - m)
    total = wa + wb
    lse = m + torch.log(total)
    denom = torch.where(total > 0, total, torch.ones_like(total))[..., None]
    out = (wa[..., None] * out_a.float() + wb[..., None] * out_b.float()) / denom
    return out.to(out_a.dtype), lse


# ---- internals ----

def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
            scale: float, positional: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """q ``[Bt, H_q, Tq, D]``, k/v ``[Bt, H_kv, Tk, D]``, allowed bool ``[Bt, Tq|1, Tk]`` ->
    out ``[Bt, H_q, Tq, D]`` float32, lse ``[Bt, H_q, Tq]`` float32.

    A query's result depends only on its q and the keys it may see (with their index modulo 64),
    not on how the caller cut the queries into calls or which other keys it passed, so chunked and
    one-shot prefill, cached and cold runs agree bit for bit. A single P.V GEMM over a tile- and
    call-dependent key length (as before) rounds differently per cut; in bf16 serving those fp32
    differences flipped output roundings and cached runs drifted from cold ones. Here P.[V|1] is
    one GEMM per fixed 64-key block (index // 64; the ones column gives the softmax sum), and the
    blocks are added in a fixed structure where a block the query cannot see adds exact zeros:
      * ``positional`` (key index = position, as in prefill and decode: unseen blocks only trail):
        a tile reads blocks 0 .. its last seen one, summed as a pairwise tree over block indices;
      * else (streaming: sink + window, gaps in between): only blocks some query of the tile sees,
        summed one after another in index order.
    The row maximum and exp are exact per element; GEMMs over few queries take another BLAS path,
    so tiles are padded to at least _MIN_ROWS rows per KV head. Query tiles bound memory (their
    size changes no result: unseen blocks add exact zeros)."""
    bt, h_q, tq, d = q.shape
    h_kv, tk = k.shape[1], k.shape[2]
    g = h_q // h_kv
    nb = -(-tk // _KEY_BLOCK)
    pad = nb * _KEY_BLOCK - tk
    qf = (q.float() * scale).reshape(bt, h_kv, g, tq, d)
    kf = k.float() if not pad else torch.cat((k.float(), k.new_zeros(bt, h_kv, pad, d, dtype=torch.float32)), dim=2)
    vf = torch.empty(bt, h_kv, nb * _KEY_BLOCK, d + 1, dtype=torch.float32, device=q.device)
    vf[:, :, :tk, :d] = v
    vf[:, :, :tk, d] = 1.0  # ones column: the block's softmax sum comes out of the same GEMM
    vf[:, :, tk:] = 0.0
    mask = F.pad(allowed, (0, pad), value=False)
    out = torch.zeros(bt, h_kv, g, tq, d, dtype=torch.float32, device=q.device)
    lse = torch.full((bt, h_kv, g, tq), -math.inf, dtype=torch.float32, device=q.device)
    budget = (_TILE_ELEMS_CUDA if q.is_cuda else _TILE_ELEMS) // max(1, bt * h_q)
    if positional or mask.shape[1] == 1:
        tile = max(1, budget // (nb * _KEY_BLOCK))
    else:  # sink + window: n queries see about the widest query's blocks plus n keys
        widest = int(mask.view(bt, -1, nb, _KEY_BLOCK).any(dim=-1).sum(dim=-1).max()) * _KEY_BLOCK
        tile = max(1, int((math.sqrt(widest * widest + 4 * budget) - widest) / 2))
    for start in range(0, tq, tile):
        stop = min(tq, start + tile)
        n = stop - start
        n_pad = max(n, -(-_MIN_ROWS // g))
        m = mask if mask.shape[1] == 1 else F.pad(mask[:, start:stop], (0, 0, 0, n_pad - n), value=False)
        seen = m.view(bt, m.shape[1], nb, _KEY_BLOCK).any(dim=-1).any(dim=1).any(dim=0)
        blocks = torch.nonzero(seen).flatten()
        if not blocks.numel():
            continue  # no query here sees a key: out 0, lse -inf
        if positional:
            keys = slice(0, (int(blocks[-1]) + 1) * _KEY_BLOCK)
        else:
            keys = (blocks[:, None] * _KEY_BLOCK + torch.arange(_KEY_BLOCK, device=q.device)).flatten()
        kb, vb, mb = kf[:, :, keys], vf[:, :, keys], m[..., keys]
        nbs = kb.shape[2] // _KEY_BLOCK
        rows = F.pad(qf[:, :, :, start:stop], (0, 0, 0, n_pad - n)).reshape(bt, h_kv, g * n_pad, d)
        # transposed scores [keys, rows]: both GEMMs then read their operands without copies
        s = torch.matmul(kb, rows.transpose(-1, -2)).view(bt, h_kv, nbs * _KEY_BLOCK, g, n_pad)
        s.masked_fill_(~mb.transpose(1, 2)[:, None, :, None, :], float("-inf"))
        top = s.amax(dim=2)
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)  # rows that see nothing: p = 0
        p = s.sub_(top[:, :, None]).exp_().view(bt, h_kv, nbs, _KEY_BLOCK, g * n_pad)
        part = torch.matmul(vb.view(bt, h_kv, nbs, _KEY_BLOCK, d + 1).transpose(-1, -2), p)  # [.., nbs, D+1, rows]
        if positional:
            while part.shape[2] > 1:  # pairs (2i, 2i + 1); an odd last block is carried (+ exact zero)
                half = part.shape[2] // 2
                pairs = part[:, :, 0:2 * half:2] + part[:, :, 1:2 * half:2]
                part = torch.cat((pairs, part[:, :, 2 * half:]), dim=2) if part.shape[2] % 2 else pairs
            acc = part[:, :, 0]
        else:
            acc = part[:, :, 0].clone()
            for j in range(1, nbs):
                acc += part[:, :, j]
        acc = acc.view(bt, h_kv, d + 1, g, n_pad)[..., :n].permute(0, 1, 3, 4, 2)  # [.., g, n, D+1]
        denom = acc[..., d]
        out[:, :, :, start:stop] = acc[..., :d] / torch.where(denom > 0, denom, torch.ones_like(denom))[..., None]
        lse[:, :, :, start:stop] = top[..., :n] + torch.log(denom)
    return out.view(bt, h_q, tq, d), lse.view(bt, h_q, tq)


def _scale(sm_scale: float | None, q: torch.Tensor) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)


def _check_gqa(h_q: int, h_kv: int) -> None:
    if h_kv < 1 or h_q % h_kv:
        raise ValueError(f"query heads ({h_q}) must be a multiple of KV heads ({h_kv})")


def _check_pools(k_pool: BlockPool, v_pool: BlockPool, head_dim: int) -> None:
    if not isinstance(k_pool, BlockPool) or not isinstance(v_pool, BlockPool):
        raise TypeError("k_pool and v_pool must be BlockPool instances")
    if k_pool.operand != "k" or v_pool.operand != "v":
        raise ValueError(f"k_pool must hold operand 'k' and v_pool 'v', got {k_pool.operand!r}, {v_pool.operand!r}")
    if k_pool.head_dim != head_dim or v_pool.head_dim != head_dim:
        raise ValueError(f"pool head_dim ({k_pool.head_dim}, {v_pool.head_dim}) must equal q head_dim {head_dim}")


def _check_streaming(q, q_pos, k, v, k_pos, sink_tokens, window_tokens) -> None:
    check_value_dtype(q, "q")
    if q.dim() != 4:
        raise ValueError(f"q must have shape [batch, tokens, H_q, head_dim], got {list(q.shape)}")
    b, t, _, d = q.shape
    if k.dim() != 4:
        raise ValueError(f"k must have shape [batch, slots, H_kv, head_dim], got {list(k.shape)}")
    n, h_kv = k.shape[1], k.shape[2]
    for name, x in (("k", k), ("v", v)):
        check_value_dtype(x, name)
        check_shape(x, (b, n, h_kv, d), name)
    _check_gqa(q.shape[2], h_kv)
    for name, x, shape in (("q_pos", q_pos, (b, t)), ("k_pos", k_pos, (b, n))):
        if x.dtype.is_floating_point or x.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor, got {x.dtype}")
        check_shape(x, shape, name)
    for name, val in (("sink_tokens", sink_tokens), ("window_tokens", window_tokens)):
        if not isinstance(val, int) or val < 0:
            raise ValueError(f"{name} must be an int >= 0, got {val!r}")


def _check_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len) -> tuple[int, int, int, int, int]:
    """``prefill_attention``'s argument checks (shared with the GPU kernels); returns T, H_q, D, H_kv, nb."""
    check_value_dtype(q, "q")
    if q.dim() != 3:
        raise ValueError(f"q must have shape [tokens, H_q, head_dim], got {list(q.shape)}")
    t, h_q, d = q.shape
    h_kv, nb = _check_index_pair(k_index, v_index, (None, None))
    for name, x in (("k", k), ("v", v)):
        check_value_dtype(x, name)
        check_shape(x, (t, h_kv, d), name)
    _check_pools(k_pool, v_pool, d)
    _check_gqa(h_q, h_kv)
    if not isinstance(prefix_len, int) or not 0 <= prefix_len <= nb * BLOCK_SIZE:
        raise ValueError(f"prefix_len must be an int in [0, {nb * BLOCK_SIZE}], got {prefix_len!r}")
    return t, h_q, d, h_kv, nb


def _check_paged_maps(k_map: torch.Tensor, v_map: torch.Tensor, pages: torch.Tensor, batch: int) -> tuple[int, int]:
    """``decode_attention``'s maps ``[num_pages, H_kv]`` read through ``pages [B, max_blocks]``: (H_kv, max_blocks)."""
    h_kv = _check_index_pair(k_map, v_map, (None, None))[1]
    if pages.dim() != 2 or pages.shape[0] != batch or pages.dtype.is_floating_point or pages.dtype == torch.bool:
        raise ValueError(f"pages must be an integer tensor [{batch}, max_blocks], got {pages.dtype} {list(pages.shape)}")
    return h_kv, pages.shape[1]


def _check_index_pair(k_index: torch.Tensor, v_index: torch.Tensor, shape: tuple) -> tuple[int, int]:
    check_dtype(k_index, INDEX_DTYPE, "k_index")
    check_dtype(v_index, INDEX_DTYPE, "v_index")
    check_shape(k_index, shape, "k_index")
    check_shape(v_index, tuple(k_index.shape), "v_index")
    return k_index.shape[-2], k_index.shape[-1]
