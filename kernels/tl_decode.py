"""TileLang decode kernel: one new token per sequence against mixed dense/2:4-sparse KV blocks.

Same semantics as ``hs_kernels.attention.decode_attention`` (the oracle). Split-KV: program
``(split, kv_head, seq)`` walks its share of the sequence's 64-token blocks through the index map,
with the ``H_q / H_kv`` query heads of the KV group packed as the rows of one tile (padded to
``block_h``); each block is loaded dense or as 2:4 values + int16 metadata and decompressed in
shared memory (decode is bandwidth-bound: only the bytes moved matter, not the tensor-core rate);
the online softmax keeps a running max and sum; the per-split results are combined by
log-sum-exp (``combine``).

Shapes fixed at compile time: ``h_q, h_kv, head_dim, dtype, block_h``; the batch, the index-map
width, the pool slot counts and the number of splits are symbolic (one compiled kernel serves
every batch, pool size and split count).

Imported only on CUDA (needs ``tilelang``); TileLang reads this file's source, keep it a file.
"""


import functools
import math

import tilelang
import tilelang.language as T

BS = 64  # tokens per block
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _kernel(h_q: int, h_kv: int, head_dim: int, dtype: str, block_h: int, threads: int = 128):
    g = h_q // h_kv
    d = head_dim
    batch = T.dynamic("batch")
    max_blocks = T.dynamic("max_blocks")
    nd_k = T.dynamic("nd_k")
    ns_k = T.dynamic("ns_k")
    nd_v = T.dynamic("nd_v")
    ns_v = T.dynamic("ns_v")
    splits = T.dynamic("splits")
    acc = "float32"

    @T.macro
    def unpack(vals_s, meta_s, out_s):
        """2:4 values [R, L/2] + int16 nibble words [R, L/16] (2:4 along each row), staged in shared
        memory by vectorized copies -> dense ``out_s [R, L]``. K: R = tokens, L = head_dim; V: R = head_dim
        (channel-major, consumed as V^T), L = tokens. (Reading the values straight from global memory
        instead, scalar loads, measured 1.8x slower at S_K = S_V = 1: NOTES_GPU.md.)"""
        for r, e in T.Parallel(out_s.shape[0], out_s.shape[1]):
            nib = (T.cast(meta_s[r, e // 16], "int32") >> ((e // 4) % 4 * 4)) & 15
            pos = e % 4
            out_s[r, e] = T.if_then_else(
                pos == (nib & 3), vals_s[r, (e // 4) * 2],
                T.if_then_else(pos == (nib >> 2), vals_s[r, (e // 4) * 2 + 1], T.cast(0, dtype)))

    @T.prim_func
    def decode(
        q: T.Tensor((batch, h_q, d), dtype),
        k_dense: T.Tensor((nd_k, BS, d), dtype),
        k_vals: T.Tensor((ns_k, BS, d // 2), dtype),
        k_meta: T.Tensor((ns_k, BS, d // 16), "int16"),
        v_dense: T.Tensor((nd_v, BS, d), dtype),
        v_vals: T.Tensor((ns_v, d, BS // 2), dtype),
        v_meta: T.Tensor((ns_v, d, BS // 16), "int16"),
        k_index: T.Tensor((batch, h_kv, max_blocks), "int32"),
        v_index: T.Tensor((batch, h_kv, max_blocks), "int32"),
        seq_lens: T.Tensor((batch,), "int32"),
        scale_log2: T.Tensor((1,), acc),
        o_part: T.Tensor((batch, h_q, splits, d), acc),
        lse_part: T.Tensor((batch, h_q, splits), acc),
    ):
        with T.Kernel(splits, h_kv, batch, threads=threads) as (sx, hx, bx):
            q_s = T.alloc_shared((block_h, d), dtype)
            k_s = T.alloc_shared((BS, d), dtype)
            v_s = T.alloc_shared((BS, d), dtype)
            vt_s = T.alloc_shared((d, BS), dtype)
            kv_s = T.alloc_shared((BS, d // 2), dtype)
            km_s = T.alloc_shared((BS, d // 16), "int16")
            vv_s = T.alloc_shared((d, BS // 2), dtype)
            vm_s = T.alloc_shared((d, BS // 16), "int16")
            p_s = T.alloc_shared((block_h, BS), dtype)
            acc_s = T.alloc_fragment((block_h, BS), acc)
            acc_o = T.alloc_fragment((block_h, d), acc)
            m_cur = T.alloc_fragment((block_h,), acc)
            m_prev = T.alloc_fragment((block_h,), acc)
            rescale = T.alloc_fragment((block_h,), acc)
            row_sum = T.alloc_fragment((block_h,), acc)
            l_sum = T.alloc_fragment((block_h,), acc)

            sl2 = scale_log2[0]
            seq_len = seq_lens[bx]
            n_blocks = T.ceildiv(seq_len, BS)
            per = T.ceildiv(n_blocks, splits)
            start = sx * per
            count = T.max(T.min(per, n_blocks - start), 0)

            for i, c in T.Parallel(block_h, d):
                q_s[i, c] = T.if_then_else(i < g, q[bx, hx * g + i, c], T.cast(0, dtype))
            T.fill(acc_o, 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, -T.infinity(acc))

            for jb in T.serial(count):
                j = start + jb
                ke = k_index[bx, hx, j]
                ve = v_index[bx, hx, j]
                # ---- K block -> k_s (token-major [64, D])
                if ke >= 0:
                    T.copy(k_dense[ke, 0:BS, 0:d], k_s)
                else:
                    T.copy(k_vals[-ke - 1, 0:BS, 0:d // 2], kv_s)
                    T.copy(k_meta[-ke - 1, 0:BS, 0:d // 16], km_s)
                    unpack(kv_s, km_s, k_s)
                # ---- V block -> v_s (dense, token-major [64, D]) or vt_s (sparse: 2:4 along tokens)
                if ve >= 0:
                    T.copy(v_dense[ve, 0:BS, 0:d], v_s)
                else:  # decompressed channel-major (contiguous along tokens), consumed as V^T below
                    T.copy(v_vals[-ve - 1, 0:d, 0:BS // 2], vv_s)
                    T.copy(v_meta[-ve - 1, 0:d, 0:BS // 16], vm_s)
                    unpack(vv_s, vm_s, vt_s)
                # ---- scores and online softmax (base 2)
                T.gemm(q_s, k_s, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
                for i, t in T.Parallel(block_h, BS):
                    acc_s[i, t] = T.if_then_else(j * BS + t < seq_len, acc_s[i, t] * sl2, -T.infinity(acc))
                T.copy(m_cur, m_prev)
                T.reduce_max(acc_s, m_cur, dim=1, clear=False)
                for i in T.Parallel(block_h):
                    rescale[i] = T.exp2(m_prev[i] - m_cur[i])
                for i, t in T.Parallel(block_h, BS):
                    acc_s[i, t] = T.exp2(acc_s[i, t] - m_cur[i])
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_h):
                    l_sum[i] = l_sum[i] * rescale[i] + row_sum[i]
                for i, c in T.Parallel(block_h, d):
                    acc_o[i, c] *= rescale[i]
                T.copy(acc_s, p_s)
                if ve >= 0:
                    T.gemm(p_s, v_s, acc_o, policy=T.GemmWarpPolicy.FullCol)
                else:
                    T.gemm(p_s, vt_s, acc_o, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)

            for i, c in T.Parallel(block_h, d):
                if i < g:
                    o_part[bx, hx * g + i, sx, c] = T.if_then_else(l_sum[i] > 0, acc_o[i, c] / l_sum[i], 0.0)
            for i in T.Parallel(block_h):
                if i < g:
                    lse_part[bx, hx * g + i, sx] = T.if_then_else(
                        l_sum[i] > 0, (T.log2(l_sum[i]) + m_cur[i]) * LN2, -T.infinity(acc))

    return decode


@functools.lru_cache(maxsize=None)
def get_kernel(h_q: int, h_kv: int, head_dim: int, dtype: str, threads: int = 128):
    """Compiled decode kernel for one (heads, head_dim, dtype); cached per process (and on disk by TileLang)."""
    g = h_q // h_kv
    block_h = max(16, 1 << math.ceil(math.log2(g)))
    return tilelang.compile(_kernel(h_q, h_kv, head_dim, dtype, block_h, threads), target="cuda")
