"""TileLang prefill kernel (Hopper, Trans-Both): a query chunk against mixed dense/2:4-sparse KV blocks.

Same semantics as ``hs_kernels.attention.prefill_attention`` (the oracle); ``prefill_attention``
below has its exact signature and falls back to it where the kernel does not apply.

Form (HieraSparse paper, Trans-Both): per 64-token key tile, ``S^T = K Q^T`` (K the A operand:
``T.gemm_sp`` on 2:4 values + int16 metadata when the block is K-sparse, ``T.gemm`` when dense),
online softmax along the tokens (dim 0 of S^T), then ``O^T += V^T P^T`` with P^T staged in shared
memory as the B operand (``T.gemm_sp`` on the V^T values when V-sparse, ``T.gemm`` on the dense
token-major block read transposed otherwise). Accumulators are O^T ``[D, N]``, float32.

Program ``(q tile, head group)``: ``N = tq * hg`` query rows = ``tq`` consecutive chunk tokens x
``hg`` consecutive query heads of one KV head (GQA: the heads share every K/V tile loaded), row
``n`` = token ``t0 + n // hg``, head ``h0 + n % hg``. The key tiles are walked in four loops:
full prefix blocks (no mask), the partial last prefix block (masked, its rows past the prefix
zeroed so stale pool rows cannot leak NaN), the chunk's tiles strictly below the diagonal (no
mask) and the diagonal tiles (causal mask). The chunk's own tiles come from the dense ``k``/``v``
or, when the caller compressed them (``chunk_*`` arguments of ``prefill_blocks``), from 2:4 slots.

Modes fixed at compile time, per operand: "dense" (every block dense: branch-free loops that
``T.Pipelined`` can double-buffer), "sparse" (every block sparse, same) or "mixed" (per block
branch on the index map entry, not pipelined). Symbolic: chunk length, index-map widths, pool
slot counts; ``prefix_len`` is a runtime value.

Imported only on CUDA (needs ``tilelang``); TileLang reads this file's source, keep it a file.
"""

import functools

import tilelang
import tilelang.language as T

BS = 64  # tokens per block / key tile
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _kernel(h_q, h_kv, d, dtype, hg, tq, threads, k_mode, v_mode, ck_mode, cv_mode, stages, p_major="mn",
            softmax="column"):
    """k_mode / v_mode: prefix blocks; ck_mode / cv_mode: the chunk's tiles ("dense" = straight
    from k/v, "sparse" / "mixed" = through chunk index maps into chunk 2:4 slots).
    softmax: "column" (S^T staged in shared memory and re-read with whole columns per thread, so
    the statistics need no cross-warp reduction) or "warp" (reduced on the GEMM fragment: one
    cross-warp AllReduce per column)."""
    g = h_q // h_kv
    n = tq * hg
    parts = threads // n if softmax == "column" else 1  # threads sharing one column of S^T
    if softmax == "column" and (threads % n or BS % parts):
        raise ValueError(f"softmax='column' needs the query rows ({n}) to divide the threads ({threads})")
    p_shape = (BS, n) if p_major == "mn" else (n, BS)
    acc = "float32"
    t_len = T.dynamic("t_len")
    nb = T.dynamic("nb")
    nbc = T.dynamic("nbc")
    nd_k = T.dynamic("nd_k")
    ns_k = T.dynamic("ns_k")
    nd_v = T.dynamic("nd_v")
    ns_v = T.dynamic("ns_v")
    nc_k = T.dynamic("nc_k")
    nc_v = T.dynamic("nc_v")

    # One cross-warp AllReduce per column (batch 1). TileLang 0.1.11's batched AllReduce (batch > 1,
    # one barrier pair for all columns) sizes its shared workspace for one column only: the extra
    # columns overran it (illegal address on the H200 with 256 threads; overlap with live stage
    # buffers seen in the 128-thread source).
    red_batch = 1

    # ---------------- loads (one macro per source; the mode picks branch-free or branching)
    @T.macro
    def load_k_pool(e, mode, k_dense, k_vals, k_meta, k_s, kv_s, km_s):
        if mode == "dense":
            T.copy(k_dense[e, 0:BS, 0:d], k_s)
        elif mode == "sparse":
            T.copy(k_vals[-e - 1, 0:BS, 0:d // 2], kv_s)
            T.copy(k_meta[-e - 1, 0:BS, 0:d // 16], km_s)
        else:
            if e >= 0:
                T.copy(k_dense[e, 0:BS, 0:d], k_s)
            else:
                T.copy(k_vals[-e - 1, 0:BS, 0:d // 2], kv_s)
                T.copy(k_meta[-e - 1, 0:BS, 0:d // 16], km_s)

    @T.macro
    def load_v_pool(e, mode, v_dense, v_vals, v_meta, v_s, vv_s, vm_s):
        if mode == "dense":
            T.copy(v_dense[e, 0:BS, 0:d], v_s)
        elif mode == "sparse":
            T.copy(v_vals[-e - 1, 0:d, 0:BS // 2], vv_s)
            T.copy(v_meta[-e - 1, 0:d, 0:BS // 16], vm_s)
        else:
            if e >= 0:
                T.copy(v_dense[e, 0:BS, 0:d], v_s)
            else:
                T.copy(v_vals[-e - 1, 0:d, 0:BS // 2], vv_s)
                T.copy(v_meta[-e - 1, 0:d, 0:BS // 16], vm_s)

    @T.macro
    def load_k_chunk(c, e, mode, hk, k_new, kc_vals, kc_meta, k_s, kv_s, km_s):
        if mode == "dense":
            T.copy(k_new[c * BS:c * BS + BS, hk, 0:d], k_s)
        elif mode == "sparse":
            T.copy(kc_vals[-e - 1, 0:BS, 0:d // 2], kv_s)
            T.copy(kc_meta[-e - 1, 0:BS, 0:d // 16], km_s)
        else:
            if e >= 0:
                T.copy(k_new[c * BS:c * BS + BS, hk, 0:d], k_s)
            else:
                T.copy(kc_vals[-e - 1, 0:BS, 0:d // 2], kv_s)
                T.copy(kc_meta[-e - 1, 0:BS, 0:d // 16], km_s)

    @T.macro
    def load_v_chunk(c, e, mode, hk, v_new, vc_vals, vc_meta, v_s, vv_s, vm_s):
        if mode == "dense":
            T.copy(v_new[c * BS:c * BS + BS, hk, 0:d], v_s)
        elif mode == "sparse":
            T.copy(vc_vals[-e - 1, 0:d, 0:BS // 2], vv_s)
            T.copy(vc_meta[-e - 1, 0:d, 0:BS // 16], vm_s)
        else:
            if e >= 0:
                T.copy(v_new[c * BS:c * BS + BS, hk, 0:d], v_s)
            else:
                T.copy(vc_vals[-e - 1, 0:d, 0:BS // 2], vv_s)
                T.copy(vc_meta[-e - 1, 0:d, 0:BS // 16], vm_s)

    # ---------------- GEMMs (S^T = K Q^T; O^T += V^T P^T)
    @T.macro
    def gemm_s(e, mode, k_s, kv_s, km_s, q_s, acc_s):
        if mode == "dense":
            T.gemm(k_s, q_s, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
        elif mode == "sparse":
            T.gemm_sp(kv_s, km_s, q_s, acc_s, transpose_B=True, clear_accum=True,
                      policy=T.GemmWarpPolicy.FullCol)
        else:
            if e >= 0:
                T.gemm(k_s, q_s, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
            else:
                T.gemm_sp(kv_s, km_s, q_s, acc_s, transpose_B=True, clear_accum=True,
                          policy=T.GemmWarpPolicy.FullCol)

    @T.macro
    def gemm_o(e, mode, v_s, vv_s, vm_s, p_s, acc_o):
        if mode == "dense":
            T.gemm(v_s, p_s, acc_o, transpose_A=True, transpose_B=p_major != "mn", policy=T.GemmWarpPolicy.FullCol)
        elif mode == "sparse":
            T.gemm_sp(vv_s, vm_s, p_s, acc_o, transpose_B=p_major != "mn", policy=T.GemmWarpPolicy.FullCol)
        else:
            if e >= 0:
                T.gemm(v_s, p_s, acc_o, transpose_A=True, transpose_B=p_major != "mn", policy=T.GemmWarpPolicy.FullCol)
            else:
                T.gemm_sp(vv_s, vm_s, p_s, acc_o, transpose_B=p_major != "mn", policy=T.GemmWarpPolicy.FullCol)

    # ---------------- online softmax along the tokens (dim 0 of S^T), base 2
    @T.macro
    def softmax_and_stage(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_s):
        T.copy(m_cur, m_prev)
        T.reduce_max(acc_s, m_cur, dim=0, clear=False, batch=red_batch)
        for i in T.Parallel(n):
            # a column that has seen no key yet keeps m = -inf: rescale 0 instead of NaN
            rescale[i] = T.if_then_else(m_cur[i] == -T.infinity(acc), 0.0, T.exp2(m_prev[i] - m_cur[i]))
        for r, i in T.Parallel(BS, n):
            acc_s[r, i] = T.exp2(acc_s[r, i] - T.if_then_else(m_cur[i] == -T.infinity(acc), 0.0, m_cur[i]))
        T.reduce_sum(acc_s, col_sum, dim=0, batch=red_batch)
        for i in T.Parallel(n):
            l_sum[i] = l_sum[i] * rescale[i] + col_sum[i]
        for c, i in T.Parallel(d, n):
            acc_o[c, i] *= rescale[i]
        if p_major == "mn":
            T.copy(acc_s, p_s)  # stmatrix: P^T as a token-major [64, N] B operand
        else:
            for r, i in T.Parallel(BS, n):
                p_s[i, r] = T.cast(acc_s[r, i], dtype)

    # Thread n * part + i owns rows part * BS / parts .. of column i: the statistics are (nearly)
    # thread-local. The shared staging row is padded by 8 floats: the accumulator's float2 stores
    # of 4 rows x 4 column pairs per half-warp then fall in distinct banks.
    col_layout = T.Fragment((BS, n), forward_thread_fn=lambda r, i: i + n * (r // (BS // parts)),
                            forward_index_fn=lambda r, i: r % (BS // parts))

    @T.macro
    def softmax_columns(acc_s, acc_o, m_col, m_prev, rescale_col, col_sum, l_col, p_s, s_sh, s_col,
                        rescale_sh, rescale):
        T.copy(acc_s, s_sh[0:BS, 0:n])
        T.copy(s_sh[0:BS, 0:n], s_col)
        T.copy(m_col, m_prev)
        T.reduce_max(s_col, m_col, dim=0, clear=False)
        for i in T.Parallel(n):
            rescale_col[i] = T.if_then_else(m_col[i] == -T.infinity(acc), 0.0, T.exp2(m_prev[i] - m_col[i]))
        for r, i in T.Parallel(BS, n):
            s_col[r, i] = T.exp2(s_col[r, i] - T.if_then_else(m_col[i] == -T.infinity(acc), 0.0, m_col[i]))
        T.reduce_sum(s_col, col_sum, dim=0)
        for i in T.Parallel(n):
            l_col[i] = l_col[i] * rescale_col[i] + col_sum[i]
        T.copy(rescale_col, rescale_sh)
        # P^T is stored before O^T is rescaled: the two never hold registers at the same time
        if p_major == "mn":
            T.copy(s_col, p_s)
        else:
            for r, i in T.Parallel(BS, n):
                p_s[i, r] = T.cast(s_col[r, i], dtype)
        T.copy(rescale_sh, rescale)
        for c, i in T.Parallel(d, n):
            acc_o[c, i] *= rescale[i]

    @T.macro
    def softmax_step(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_s, s_sh, s_col, rescale_sh, rescale_o):
        if softmax == "column":
            softmax_columns(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_s, s_sh, s_col, rescale_sh,
                            rescale_o)
        else:
            softmax_and_stage(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_s)

    @T.macro
    def zero_tail_rows(ve, mode, valid, v_s, vv_s, vm_s):
        """Rows >= valid of the staged V tile are stale pool rows: zero them (P is 0 there,
        but 0 * NaN would still be NaN)."""
        if mode != "sparse":
            if mode == "dense" or ve >= 0:
                for r, c in T.Parallel(BS, d):
                    if r >= valid:
                        v_s[r, c] = T.cast(0, dtype)
        if mode != "dense":
            if mode == "sparse" or ve < 0:
                for c, p in T.Parallel(d, BS // 2):
                    nib = (T.cast(vm_s[c, p // 8], "int32") >> ((p // 2) % 4 * 4)) & 15
                    tok = (p // 2) * 4 + T.if_then_else(p % 2 == 0, nib & 3, nib >> 2)
                    if tok >= valid:
                        vv_s[c, p] = T.cast(0, dtype)


    @T.prim_func
    def prefill(
        q: T.Tensor((t_len, h_q, d), dtype),
        k_new: T.Tensor((t_len, h_kv, d), dtype),
        v_new: T.Tensor((t_len, h_kv, d), dtype),
        k_dense: T.Tensor((nd_k, BS, d), dtype),
        k_vals: T.Tensor((ns_k, BS, d // 2), dtype),
        k_meta: T.Tensor((ns_k, BS, d // 16), "int16"),
        v_dense: T.Tensor((nd_v, BS, d), dtype),
        v_vals: T.Tensor((ns_v, d, BS // 2), dtype),
        v_meta: T.Tensor((ns_v, d, BS // 16), "int16"),
        k_index: T.Tensor((h_kv, nb), "int32"),
        v_index: T.Tensor((h_kv, nb), "int32"),
        kc_index: T.Tensor((h_kv, nbc), "int32"),
        vc_index: T.Tensor((h_kv, nbc), "int32"),
        kc_vals: T.Tensor((nc_k, BS, d // 2), dtype),
        kc_meta: T.Tensor((nc_k, BS, d // 16), "int16"),
        vc_vals: T.Tensor((nc_v, d, BS // 2), dtype),
        vc_meta: T.Tensor((nc_v, d, BS // 16), "int16"),
        params: T.Tensor((2,), "int32"),  # prefix_len, unused
        scale_log2: T.Tensor((1,), acc),
        out: T.Tensor((t_len, h_q, d), dtype),
        lse: T.Tensor((t_len, h_q), acc),
    ):
        n_qt = T.ceildiv(t_len, tq)
        with T.Kernel(n_qt, h_q // hg, threads=threads) as (bx, by):
            q_s = T.alloc_shared((n, d), dtype)
            k_s = T.alloc_shared((BS, d), dtype)
            kv_s = T.alloc_shared((BS, d // 2), dtype)
            km_s = T.alloc_shared((BS, d // 16), "int16")
            v_s = T.alloc_shared((BS, d), dtype)
            vv_s = T.alloc_shared((d, BS // 2), dtype)
            vm_s = T.alloc_shared((d, BS // 16), "int16")
            p_s = T.alloc_shared(p_shape, dtype)
            o_s = T.alloc_shared((d, n), dtype)
            # separate staging buffers for the two pipelined loops (the pipeliner multi-buffers
            # them; a buffer shared with another loop kept its single-stage layout and failed to lower)
            k_a_s = T.alloc_shared((BS, d), dtype)
            kv_a_s = T.alloc_shared((BS, d // 2), dtype)
            km_a_s = T.alloc_shared((BS, d // 16), "int16")
            v_a_s = T.alloc_shared((BS, d), dtype)
            vv_a_s = T.alloc_shared((d, BS // 2), dtype)
            vm_a_s = T.alloc_shared((d, BS // 16), "int16")
            p_a_s = T.alloc_shared(p_shape, dtype)
            k_c_s = T.alloc_shared((BS, d), dtype)
            kv_c_s = T.alloc_shared((BS, d // 2), dtype)
            km_c_s = T.alloc_shared((BS, d // 16), "int16")
            v_c_s = T.alloc_shared((BS, d), dtype)
            vv_c_s = T.alloc_shared((d, BS // 2), dtype)
            vm_c_s = T.alloc_shared((d, BS // 16), "int16")
            p_c_s = T.alloc_shared(p_shape, dtype)
            acc_s = T.alloc_fragment((BS, n), acc)
            acc_o = T.alloc_fragment((d, n), acc)
            m_cur = T.alloc_fragment((n,), acc)
            m_prev = T.alloc_fragment((n,), acc)
            rescale = T.alloc_fragment((n,), acc)
            col_sum = T.alloc_fragment((n,), acc)
            l_sum = T.alloc_fragment((n,), acc)
            s_sh = T.alloc_shared((BS, n + 8), acc)  # softmax "column" only, as the three below
            s_col = T.alloc_fragment((BS, n), acc)
            rescale_sh = T.alloc_shared((n,), acc)
            rescale_o = T.alloc_fragment((n,), acc)
            if softmax == "column":
                T.annotate_layout({s_col: col_layout})

            qt = n_qt - 1 - bx  # longest (latest) query tiles first: better tail balance
            t0 = qt * tq
            h0 = by * hg
            hk = h0 // g
            prefix_len = params[0]
            sl2 = scale_log2[0]
            n_full = prefix_len // BS
            tail = prefix_len % BS
            t_last = T.min(t0 + tq, t_len) - 1
            c_unmasked = (t0 + 1) // BS  # chunk tiles entirely at or below every row's token
            c_end = t_last // BS + 1

            for i, c in T.Parallel(n, d):
                q_s[i, c] = T.if_then_else(t0 + i // hg < t_len, q[t0 + i // hg, h0 + i % hg, c], T.cast(0, dtype))
            T.fill(acc_o, 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, -T.infinity(acc))

            # ---- 1) full prefix blocks: every row sees every token
            for j in T.Pipelined(n_full, num_stages=stages if (k_mode != "mixed" and v_mode != "mixed") else 0):
                load_k_pool(k_index[hk, j], k_mode, k_dense, k_vals, k_meta, k_a_s, kv_a_s, km_a_s)
                load_v_pool(v_index[hk, j], v_mode, v_dense, v_vals, v_meta, v_a_s, vv_a_s, vm_a_s)
                gemm_s(k_index[hk, j], k_mode, k_a_s, kv_a_s, km_a_s, q_s, acc_s)
                for r, i in T.Parallel(BS, n):
                    acc_s[r, i] = acc_s[r, i] * sl2
                softmax_step(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_a_s, s_sh, s_col,
                             rescale_sh, rescale_o)
                gemm_o(v_index[hk, j], v_mode, v_a_s, vv_a_s, vm_a_s, p_a_s, acc_o)

            # ---- 2) the partial last prefix block: rows < tail
            if tail > 0:
                ke = k_index[hk, n_full]
                ve = v_index[hk, n_full]
                load_k_pool(ke, k_mode, k_dense, k_vals, k_meta, k_s, kv_s, km_s)
                load_v_pool(ve, v_mode, v_dense, v_vals, v_meta, v_s, vv_s, vm_s)
                T.sync_threads()
                zero_tail_rows(ve, v_mode, tail, v_s, vv_s, vm_s)
                gemm_s(ke, k_mode, k_s, kv_s, km_s, q_s, acc_s)
                for r, i in T.Parallel(BS, n):
                    acc_s[r, i] = T.if_then_else(r < tail, acc_s[r, i] * sl2, -T.infinity(acc))
                softmax_step(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_s, s_sh, s_col,
                             rescale_sh, rescale_o)
                gemm_o(ve, v_mode, v_s, vv_s, vm_s, p_s, acc_o)

            # ---- 3) chunk tiles strictly below every row of this query tile
            for c in T.Pipelined(c_unmasked, num_stages=stages if (ck_mode != "mixed" and cv_mode != "mixed") else 0):
                load_k_chunk(c, kc_index[hk, c], ck_mode, hk, k_new, kc_vals, kc_meta, k_c_s, kv_c_s, km_c_s)
                load_v_chunk(c, vc_index[hk, c], cv_mode, hk, v_new, vc_vals, vc_meta, v_c_s, vv_c_s, vm_c_s)
                gemm_s(kc_index[hk, c], ck_mode, k_c_s, kv_c_s, km_c_s, q_s, acc_s)
                for r, i in T.Parallel(BS, n):
                    acc_s[r, i] = acc_s[r, i] * sl2
                softmax_step(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_c_s, s_sh, s_col,
                             rescale_sh, rescale_o)
                gemm_o(vc_index[hk, c], cv_mode, v_c_s, vv_c_s, vm_c_s, p_c_s, acc_o)

            # ---- 4) diagonal tiles: key token c*64 + r visible to row i iff <= its token
            for c in T.serial(c_unmasked, c_end):
                kce = kc_index[hk, c]
                vce = vc_index[hk, c]
                load_k_chunk(c, kce, ck_mode, hk, k_new, kc_vals, kc_meta, k_s, kv_s, km_s)
                load_v_chunk(c, vce, cv_mode, hk, v_new, vc_vals, vc_meta, v_s, vv_s, vm_s)
                gemm_s(kce, ck_mode, k_s, kv_s, km_s, q_s, acc_s)
                for r, i in T.Parallel(BS, n):
                    acc_s[r, i] = T.if_then_else(c * BS + r <= t0 + i // hg, acc_s[r, i] * sl2, -T.infinity(acc))
                softmax_step(acc_s, acc_o, m_cur, m_prev, rescale, col_sum, l_sum, p_s, s_sh, s_col,
                             rescale_sh, rescale_o)
                gemm_o(vce, cv_mode, v_s, vv_s, vm_s, p_s, acc_o)

            # ---------------- epilogue: O = O^T / l, staged transposed through shared memory
            if softmax == "column":
                T.copy(l_sum, rescale_sh)
                T.copy(rescale_sh, rescale_o)
                for c, i in T.Parallel(d, n):
                    acc_o[c, i] = acc_o[c, i] / rescale_o[i]
            else:
                for c, i in T.Parallel(d, n):
                    acc_o[c, i] = acc_o[c, i] / l_sum[i]
            T.copy(acc_o, o_s)
            for i in T.Parallel(n):
                if t0 + i // hg < t_len:
                    lse[t0 + i // hg, h0 + i % hg] = (T.log2(l_sum[i]) + m_cur[i]) * LN2
            for i, c in T.Parallel(n, d):
                if t0 + i // hg < t_len:
                    out[t0 + i // hg, h0 + i % hg, c] = o_s[c, i]

    return prefill


MODES = ("dense", "sparse", "mixed")


@functools.lru_cache(maxsize=None)
def get_kernel(h_q: int, h_kv: int, head_dim: int, dtype: str, k_mode: str = "mixed", v_mode: str = "mixed",
               ck_mode: str = "dense", cv_mode: str = "dense", rows: int = 128, threads: int = 256,
               stages: int = 2, p_major: str = "k", softmax: str = "column", target=None):
    """Compiled prefill kernel; cached per process (and on disk by TileLang). ``rows`` = query rows
    per program (tq tokens x hg heads of one KV group)."""
    hg = head_group(h_q, h_kv, rows)
    # TMA lowering and warp specialization off (as TileLang's own sparse GEMM tests run): the
    # pipeliner then double-buffers the copies with cp.async
    cfg = {tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
           tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}
    return tilelang.compile(_kernel(h_q, h_kv, head_dim, dtype, hg, rows // hg, threads, k_mode, v_mode,
                                    ck_mode, cv_mode, stages, p_major, softmax), target=target or "cuda",
                            pass_configs=cfg)


def head_group(h_q: int, h_kv: int, rows: int = 128) -> int:
    """Query heads per program: the largest power of two dividing the GQA group, at most rows / 4."""
    g = h_q // h_kv
    hg = 1
    while g % (hg * 2) == 0 and hg * 2 <= rows // 4:
        hg *= 2
    return hg


# ---------------------------------------------------------------- Python entry points
# (torch is imported here, not at the top: the kernel above is what TileLang parses)
import torch  # noqa: E402

from . import attention as _ref  # noqa: E402
from .format import BLOCK_SIZE, META_DTYPE, sparse_shapes  # noqa: E402
from .gpu import _entry_kinds, _nonempty, _with_column  # noqa: E402
from .pool import BlockPool  # noqa: E402
from .triton_blocks import DENSE, SPARSE  # noqa: E402

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
_MODE_NAMES = {DENSE: "dense", SPARSE: "sparse", DENSE | SPARSE: "mixed"}  # of gpu._entry_kinds
HEAD_DIMS = (64, 128)
# Defaults: the only spill-free tiling of the column softmax at 128 rows is two warpgroups (ptxas, sm_90:
# 212 registers; one warpgroup spills 2.5-6 KB in either softmax form); K-major P^T is written with
# 16-byte stores from the column layout (token-major: 16-bit stores).
ROWS = 128
THREADS = 256
# a chunk whose K and V tiles are all 2:4: 64 rows x one warpgroup, 1.16x faster there on the H200 (slower elsewhere)
SPARSE_ROWS, SPARSE_THREADS = 64, 128
STAGES = 2
P_MAJOR = "k"
SOFTMAX = "column"


def tile(ck_mode: str, cv_mode: str, rows: int | None = None, threads: int | None = None) -> tuple[int, int]:
    """``(rows, threads)`` of a call: those given, else the defaults for the chunk's tile modes."""
    all_sparse = ck_mode == cv_mode == "sparse"
    rows = rows or (SPARSE_ROWS if all_sparse else ROWS)
    return rows, threads or (SPARSE_THREADS if all_sparse and rows == SPARSE_ROWS else THREADS)


def supported(q, k, v, k_pool, v_pool) -> bool:
    """Whether ``prefill_attention`` runs the TileLang kernel for these inputs (else the reference)."""
    return (
        torch.cuda.is_available() and isinstance(q, torch.Tensor) and q.is_cuda and q.dim() == 3
        and q.dtype in _DTYPES and q.shape[-1] in HEAD_DIMS and q.shape[0] > 0
        and isinstance(k_pool, BlockPool) and isinstance(v_pool, BlockPool)
        and k_pool.dtype == q.dtype and v_pool.dtype == q.dtype and k_pool.dense.is_cuda
        and isinstance(k, torch.Tensor) and k.dtype == q.dtype and v.dtype == q.dtype
        and k.dim() == 3 and k.shape[1] >= 1 and q.shape[1] % k.shape[1] == 0
    )


def block_modes(k_index: torch.Tensor, v_index: torch.Tensor, used: int) -> tuple[str, str]:
    """("dense" | "sparse" | "mixed") for the K and V entries of the first ``used`` blocks (one host sync)."""
    return tuple(_MODE_NAMES[kind] for kind in _entry_kinds(k_index, v_index, used))


def prefill_blocks(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, sm_scale=None, chunk=None,
                   modes=None, rows=None, threads=None, stages=None, p_major=None, softmax=None, out=None, lse=None):
    """The kernel behind ``prefill_attention`` with its knobs exposed (benchmarks, tests).

    chunk: None (the chunk's own tiles dense, from ``k``/``v``) or ``ChunkBlocks`` (``chunk_blocks.compress_chunk``):
      chunk tile ``c`` (tokens ``64c .. 64c+63`` of the chunk) is read from 2:4 slots where its chunk
      index entry is < 0, from ``k``/``v`` otherwise.
    modes: (k_mode, v_mode) of the prefix, default from the index maps (one host sync).
    out, lse: optional preallocated outputs (every element is written).
    No bounds check of the used index entries against the pools on this path (the reference raises).
    """
    t, h_q, d, h_kv, nb = _ref._check_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len)
    used = -(-prefix_len // BLOCK_SIZE)
    k_mode, v_mode = modes or block_modes(k_index, v_index, used)
    dev = q.device
    if chunk is None:
        ck_mode = cv_mode = "dense"
        kc_index = vc_index = torch.zeros((h_kv, 1), dtype=torch.int32, device=dev)
        (kvs, kms), (vvs, vms) = sparse_shapes("k", d), sparse_shapes("v", d)
        kc_vals = torch.zeros((1, *kvs), dtype=q.dtype, device=dev)
        kc_meta = torch.zeros((1, *kms), dtype=META_DTYPE, device=dev)
        vc_vals = torch.zeros((1, *vvs), dtype=q.dtype, device=dev)
        vc_meta = torch.zeros((1, *vms), dtype=META_DTYPE, device=dev)
    else:
        ck_mode, cv_mode = chunk.k_mode, chunk.v_mode
        kc_index, vc_index = chunk.k_index, chunk.v_index
        kc_vals, kc_meta, vc_vals, vc_meta = chunk.k_vals, chunk.k_meta, chunk.v_vals, chunk.v_meta
    scale = _ref._scale(sm_scale, q)
    kernel = get_kernel(h_q, h_kv, d, _DTYPES[q.dtype], k_mode, v_mode, ck_mode, cv_mode,
                        *tile(ck_mode, cv_mode, rows, threads), STAGES if stages is None else stages,
                        p_major or P_MAJOR, softmax or SOFTMAX)
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty((t, h_q), dtype=torch.float32, device=dev) if lse is None else lse
    params = torch.tensor([prefix_len, 0], dtype=torch.int32, device=dev)
    scale_log2 = torch.full((1,), scale * LOG2E, dtype=torch.float32, device=dev)
    kernel(q.contiguous(), k.contiguous(), v.contiguous(),
           _nonempty(k_pool.dense), _nonempty(k_pool.values), _nonempty(k_pool.meta),
           _nonempty(v_pool.dense), _nonempty(v_pool.values), _nonempty(v_pool.meta),
           _with_column(k_index), _with_column(v_index),
           _nonempty(kc_index), _nonempty(vc_index),
           _nonempty(kc_vals), _nonempty(kc_meta), _nonempty(vc_vals), _nonempty(vc_meta),
           params, scale_log2, out, lse)
    return out, lse


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor, v_index: torch.Tensor,
                      prefix_len: int, sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``hs_kernels.attention.prefill_attention`` on the TileLang kernel where supported, else the
    reference (CPU, float32, head_dim 256). ``hs_kernels.gpu.prefill_attention`` is the dispatching
entry point (it also honours ``HS_KERNELS_NO_GPU``). The chunk's own keys/values are used
    dense, as in the reference."""
    if not supported(q, k, v, k_pool, v_pool):
        return _ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, sm_scale)
    return prefill_blocks(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, sm_scale)
