"""Triton building blocks shared by the decode and prefill kernels: reading one 64-token block of
an operand through its index-map entry, dense or 2:4 sparse (unpacked in registers)."""

import triton
import triton.language as tl

LOG2E = 1.4426950408889634
DENSE, SPARSE = 1, 2  # pool kinds (K_MODE / V_MODE bits)
# globals a kernel reads must be constexpr
BS = tl.constexpr(64)  # tokens per block
_LN2 = tl.constexpr(0.6931471805599453)
_DENSE = tl.constexpr(DENSE)
_SPARSE = tl.constexpr(SPARSE)


@triton.jit
def slot_offsets(D: tl.constexpr):
    """Element offsets within one pool slot: a dense slot [64, D] token-major and read as V^T [D, 64];
    a 2:4 slot read as int32 words, K's values and metadata (rows: tokens) and V^T's (rows: channels)."""
    tok = tl.arange(0, BS)
    cols = tl.arange(0, D)
    dense_off = tok[:, None] * D + cols[None, :]
    dense_t_off = tok[None, :] * D + cols[:, None]
    kv_off = tok[:, None] * (D // 4) + tl.arange(0, D // 4)[None, :]
    km_off = tok[:, None] * (D // 32) + tl.arange(0, D // 32)[None, :]
    vv_off = cols[:, None] * (BS // 4) + tl.arange(0, BS // 4)[None, :]
    vm_off = cols[:, None] * (BS // 32) + tl.arange(0, BS // 32)[None, :]
    return dense_off, dense_t_off, kv_off, km_off, vv_off, vm_off


@triton.jit
def unpack_24(vals, meta, ROWS: tl.constexpr, LEN: tl.constexpr, DTYPE: tl.constexpr, PRMT: tl.constexpr):
    """2:4 operand rows -> dense ``[ROWS, LEN]`` of DTYPE, zeros at the pruned positions.

    vals: int32 ``[ROWS, LEN/4]``, one word per group: its kept values ``v0 | v1 << 16``.
    meta: int32 ``[ROWS, LEN/32]``, eight group nibbles ``idx0 | idx1 << 2`` per word (two int16).
    A group's four outputs are two words, each a byte permutation of its value word and zero
    (``prmt``). Half j's selector byte is 0x10 (v0) if j == idx0, 0x32 (v1) if j == idx1, else
    0x44 (zero), so ``0x44444444 ^ 0x54 << 8 idx0 ^ 0x76 << 8 idx1`` holds all four.
    ``PRMT=False`` computes the same with selects (Triton's CPU interpreter cannot run PTX).
    """
    nib = tl.reshape((meta[:, :, None] >> (tl.arange(0, 8) * 4)[None, None, :]) & 15, (ROWS, LEN // 4))
    sel = 0x44444444 ^ (0x54 << ((nib & 3) * 8)) ^ (0x76 << ((nib >> 2) * 8))
    if PRMT:
        w01, w23 = tl.inline_asm_elementwise(
            "{ .reg .b32 z, t; mov.b32 z, 0; shr.b32 t, $3, 16; prmt.b32 $0, $2, z, $3; prmt.b32 $1, $2, z, t; }",
            "=r,=r,r,r", [vals, sel], dtype=(tl.int32, tl.int32), is_pure=True, pack=1)
        h0, h1, h2, h3 = w01, w01 >> 16, w23, w23 >> 16
    else:
        lo, hi = vals & 0xFFFF, (vals >> 16) & 0xFFFF
        h0 = tl.where((sel & 0xFF) == 0x10, lo, 0)
        h1 = tl.where(((sel >> 8) & 0xFF) == 0x10, lo, tl.where(((sel >> 8) & 0xFF) == 0x32, hi, 0))
        h2 = tl.where(((sel >> 16) & 0xFF) == 0x10, lo, tl.where(((sel >> 16) & 0xFF) == 0x32, hi, 0))
        h3 = tl.where(((sel >> 24) & 0xFF) == 0x32, hi, 0)
    halves = tl.join(tl.join(h0, h2), tl.join(h1, h3))  # [.., 2, 2] flattens to h0 h1 h2 h3
    return tl.reshape(halves.to(tl.int16).to(DTYPE, bitcast=True), (ROWS, LEN))


@triton.jit
def load_block(dense, vals, meta, e, dense_off, vals_off, meta_off, mask, ROWS: tl.constexpr, LEN: tl.constexpr,
           MODE: tl.constexpr, DTYPE: tl.constexpr, PRMT: tl.constexpr, SELECT: tl.constexpr = False):
    """Operand rows ``[ROWS, LEN]`` (K: ``[64, D]``, V^T: ``[D, 64]``) of index-map entry ``e``: its
    dense slot read through ``dense_off`` (rows under ``mask``) or its sparse slot unpacked. With
    both kinds in the pool, both copies are issued, masked (a masked-off copy moves no bytes), so no
    load sits in a branch and the pipeliner keeps them in flight; only the math branches."""
    if MODE == _DENSE:
        x = tl.load(dense + e.to(tl.int64) * (ROWS * LEN) + dense_off, mask=mask, other=0.0)
    else:
        sp = (-e - 1).to(tl.int64)
        w = tl.load(vals + sp * (ROWS * LEN // 4) + vals_off, mask=e < 0, other=0)
        m = tl.load(meta + sp * (ROWS * LEN // 32) + meta_off, mask=e < 0, other=0)
        if MODE == _SPARSE:
            x = unpack_24(w, m, ROWS, LEN, DTYPE, PRMT)
        else:
            d = tl.load(dense + tl.maximum(e, 0).to(tl.int64) * (ROWS * LEN) + dense_off,
                        mask=mask & (e >= 0), other=0.0)
            if SELECT:  # both computed, no branch
                x = tl.where(e < 0, unpack_24(w, m, ROWS, LEN, DTYPE, PRMT), d)
            elif e < 0:
                x = unpack_24(w, m, ROWS, LEN, DTYPE, PRMT)
            else:
                x = d
    return x
