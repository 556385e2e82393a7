"""Triton kernel of ``write_tokens`` (``hs_kernels.store``): program (token, listed head) copies that head's K and V
rows to their slots; a negative slot writes nothing and sets the error flag."""

import triton
import triton.language as tl

from .triton_blocks import BS


@triton.jit
def write_kernel(locs, heads, k, v, k_slots, v_slots, k_dest, v_dest, errors,
                 k_st, k_sh, v_st, v_sh, ks_p, ks_h, vs_p, vs_h,
                 kd_s, kd_r, kd_e, vd_s, vd_r, vd_e,
                 D: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1).to(tl.int64)
    loc = tl.load(locs + t).to(tl.int64)
    page, row = loc // BS, loc % BS
    h = tl.load(heads + i).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    in_d = d < D
    ks = tl.load(k_slots + page * ks_p + i * ks_h).to(tl.int64)
    vs = tl.load(v_slots + page * vs_p + i * vs_h).to(tl.int64)
    x = tl.load(k + t * k_st + h * k_sh + d, mask=in_d)
    tl.store(k_dest + ks * kd_s + row * kd_r + i * kd_e + d, x.to(k_dest.dtype.element_ty), mask=in_d & (ks >= 0))
    x = tl.load(v + t * v_st + h * v_sh + d, mask=in_d)
    tl.store(v_dest + vs * vd_s + row * vd_r + i * vd_e + d, x.to(v_dest.dtype.element_ty), mask=in_d & (vs >= 0))
    tl.atomic_max(errors, 1, mask=(ks < 0) | (vs < 0))
