"""The prefill on Hopper's sparse tensor cores (``cuda/prefill_sp.cu``, wgmma.sp in the paper's Trans-Both form):
query tokens against a sequence whose V blocks are all 2:4 and whose K blocks are all 2:4 or all dense, causally or
without a mask.

The kernel keeps no running maximum: each query row's softmax offset is static, |q| times the longest key of its KV
head (found by the library's first kernel, which also checks the index entries) times the scale, which no score
exceeds (Cauchy-Schwarz), less ``OFFSET_HEADROOM``. Its exponentials flush to zero below 2^-126, so a row whose scores
all lie far below its offset would lose them: the kernel marks the rows whose sum of exponentials ends below
2^-``UNDERFLOW_GAP`` (a NaN log-sum-exp), and those are recomputed on the GPU with a running maximum (``rescue``).

bf16 or fp16: in fp16 the scores are an fp16 GEMM, but P stays bf16 (fp16 cannot hold exponentials up to
2^``OFFSET_HEADROOM``), so V is rounded to bf16 as it is staged, and the output keeps bf16's precision.

Built per GQA ratio, head_dim and dtype (macros ``HS_G``, ``HS_D``, ``HS_FP16``) for sm_90a with the machine's nvcc on first use (``nvcc.library``) and loaded
with ctypes. ``$HS_CUDA_PREFILL_SOURCE`` names another source to build instead (a candidate version, benchmarked
against the shipped one in the same device call).
"""

from __future__ import annotations

import ctypes
import functools
import os
import warnings
from pathlib import Path
from typing import NamedTuple

import torch

from . import nvcc
from .format import BLOCK_SIZE

SOURCE = Path(os.environ.get("HS_CUDA_PREFILL_SOURCE") or Path(__file__).with_name("cuda") / "prefill_sp.cu")
HEAD_DIMS = (64, 128)
ROWS = 64  # query rows per consumer warpgroup: 64 // G tokens x the G query heads of one KV head (the rest unused)
CONSUMERS = 3  # consumer warpgroups per CTA (the source's HS_CONSUMERS)
# Scores more than about 24 (log2) below a row's largest add nothing a bf16 output keeps, and a row's sum of
# exponentials is at most 2^24 (keys) times its largest. So a sum of at least 2^-(126 - 24 - 24) keeps every
# score that counts in range.
UNDERFLOW_GAP = 78
# The bound lies far above real rows' scores: on SmolLM2-135M's activations (real text, 2K-4K tokens) 7 % of the rows'
# log-sum-exps lay more than UNDERFLOW_GAP (log2) below it, the largest gap 166. Lowered by OFFSET_HEADROOM, an
# exponential is at most 2^80, so a row's sum and its P-weighted values stay finite in float32 below 2^48 keys x |v|.
OFFSET_HEADROOM = 80.0
LOG2E = 1.4426950408889634
REFUSED = "every index entry must name a 2:4 slot of its pool (~slot, inside the pool)"
DTYPES = (torch.bfloat16, torch.float16)


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """A CUDA device of compute capability 9.0 (wgmma.sp exists on sm_90a only) and nvcc."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0) and nvcc.find() is not None


def fits(head_dim: int, group: int) -> bool:
    """Whether the kernel has a build for this head_dim and GQA ratio (query heads per KV head): 64 or 128, 1 to 64."""
    return head_dim in HEAD_DIMS and 0 < group <= ROWS


def supports(q: torch.Tensor, h_kv: int) -> bool:
    """Whether ``attend`` runs for queries ``q [T, H_q, D]`` of ``h_kv`` KV heads here (the build aside): bf16 or fp16,
    ``fits``, sm_90."""
    group = q.shape[1] // h_kv if q.dim() == 3 and h_kv > 0 else 0
    return (q.is_cuda and q.dtype in DTYPES and q.shape[1] == group * h_kv and fits(q.shape[-1], group)
            and available())


def ready(q: torch.Tensor, h_kv: int) -> bool:
    """``supports`` the queries, and the library for their GQA ratio, head_dim and dtype is ``built``."""
    return supports(q, h_kv) and built(q.shape[1] // h_kv, q.shape[-1], q.dtype)


def macros(group: int, head_dim: int, dtype: torch.dtype) -> tuple[str, ...]:
    """The source's build macros for ``group`` query heads per KV head at ``head_dim`` in ``dtype`` (``DTYPES``)."""
    if dtype not in DTYPES:
        raise ValueError(f"the CUDA prefill is built for bf16 and fp16, not {dtype}")
    return (f"HS_G={group}", f"HS_D={head_dim}", *(("HS_FP16",) if dtype == torch.float16 else ()))


@functools.lru_cache(maxsize=None)
def library(group: int, head_dim: int = 128, defines: tuple[str, ...] = (),
            dtype: torch.dtype = torch.bfloat16) -> ctypes.CDLL:
    """The kernel for ``group`` query heads per KV head at ``head_dim`` in ``dtype`` (``macros``; ``defines``: more
    macros, e.g. the source's ablations)."""
    lib = ctypes.CDLL(str(nvcc.library(SOURCE, "sm_90a", (*macros(group, head_dim, dtype), *defines))))
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.hs_prefill_sp.restype = i
    lib.hs_prefill_sp.argtypes = [p] * 8 + [i, i] + [p] * 3 + [i] * 4 + [ctypes.c_float, i] + [ctypes.c_float] * 2 + [p]
    lib.hs_prefill_sp_resident.restype = i
    lib.hs_prefill_sp_resident.argtypes = [i]
    return lib


@functools.lru_cache(maxsize=None)
def resident(group: int, k_dense: bool = False, head_dim: int = 128, dtype: torch.dtype = torch.bfloat16) -> int:
    """CTAs of the attention kernel per SM (the occupancy calculator on the ``group``, ``head_dim``, ``dtype`` build)."""
    return max(1, library(group, head_dim, dtype=dtype).hs_prefill_sp_resident(int(k_dense)))


@functools.lru_cache(maxsize=None)
def built(group: int, head_dim: int = 128, dtype: torch.dtype = torch.bfloat16) -> bool:
    """``available()`` and the library for ``group``, ``head_dim`` and ``dtype`` builds and loads here; a failed build
    is reported once."""
    if not available():
        return False
    try:
        library(group, head_dim, dtype=dtype)
    except (RuntimeError, OSError) as e:
        warnings.warn(f"the CUDA prefill kernel does not build here, another path is used: {e}", stacklevel=2)
        return False
    return True


def ctas(t: int, h_q: int, h_kv: int) -> int:
    """CTAs of one attention launch for ``t`` query tokens: ``ROWS`` rows (tokens x query heads of one KV head) per
    consumer, ``CONSUMERS`` consumers per CTA, one CTA column per KV head."""
    tokens = CONSUMERS * (ROWS // (h_q // h_kv))
    return -(-t // tokens) * h_kv


class SparseBlocks(NamedTuple):
    """One operand's blocks, every one 2:4: entries ``index [H_kv, nb]`` (``~slot``) into a pool's ``values`` (K:
    ``[slots, 64, D / 2]``, V: ``[slots, D, 32]``) and ``meta`` (int16)."""

    values: torch.Tensor
    meta: torch.Tensor
    index: torch.Tensor


def attend(q: torch.Tensor, k: SparseBlocks | torch.Tensor, v: SparseBlocks, scale: float, q_pos0: int | None = None,
           out: torch.Tensor | None = None, lse: torch.Tensor | None = None, fallback: bool = True,
           defines: tuple[str, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q [T, H_q, D]`` (bf16 or fp16, D 64 or 128, on an sm_90 GPU: ``supports``) over the ``64 nb`` tokens
    whose V blocks are ``v``'s (2:4) and whose keys are ``k``: 2:4 blocks too, or the dense keys ``[64 nb, H_kv, D]``,
    all in q's dtype.

    q_pos0: None, every query sees every key; else query ``i`` sits at position ``q_pos0 + i`` of the sequence and sees
    the keys at or before it (``0 <= q_pos0``, ``q_pos0 + T <= 64 nb``).
    Returns ``out [T, H_q, D]`` (q's dtype) and ``lse [T, H_q]`` float32 (natural log), into the buffers given if any.
    fallback: recompute the rows whose static offset lay too far above their scores (``UNDERFLOW_GAP``); False only
    to see what the kernel alone gives (those rows' ``lse`` then is NaN). Raises ValueError on an entry that is not a
    2:4 slot of its pool, or dense keys of another length."""
    t, h_q, d = q.shape
    h_kv, nb = v.index.shape
    if q_pos0 is not None and not (0 <= q_pos0 and q_pos0 + t <= BLOCK_SIZE * nb):
        raise ValueError(f"queries at {q_pos0} .. {q_pos0 + t - 1} do not fit a sequence of {nb} blocks")
    if isinstance(k, torch.Tensor) and k.shape != (BLOCK_SIZE * nb, h_kv, d):
        raise ValueError(f"dense keys must have shape {[BLOCK_SIZE * nb, h_kv, d]}, got {list(k.shape)}")
    q = q.contiguous()
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty(t, h_q, dtype=torch.float32, device=q.device) if lse is None else lse
    k = k.contiguous() if isinstance(k, torch.Tensor) else k._replace(index=k.index.contiguous())
    v = v._replace(index=v.index.contiguous())
    work = launch(q, k, v, scale, q_pos0, out, lse, defines)
    settle(q, k, v, work, scale, q_pos0, out, lse, fallback)
    return out, lse


def settle(q, k: SparseBlocks | torch.Tensor, v: SparseBlocks, work, scale: float, q_pos0: int | None,
           out: torch.Tensor, lse: torch.Tensor, fallback: bool = True) -> None:
    """``launch``'s results (``work``: what it returned) made final, with one host sync: ``fallback``, the rows it
    marked with a NaN ``lse`` recomputed (``rescue``); ValueError where it refused an index entry."""
    if fallback:
        rescue(q, k, v, work, scale, q_pos0, out, lse, marked=True)
    if work[-1].item():
        raise ValueError(REFUSED)


def rescue(q, k: SparseBlocks | torch.Tensor, v: SparseBlocks, work, scale: float, q_pos0: int | None,
           out: torch.Tensor, lse: torch.Tensor, other: tuple[torch.Tensor, torch.Tensor] | None = None,
           marked: bool = False, count: torch.Tensor | None = None) -> None:
    """``launch``'s lost rows recomputed in place on the GPU, with a running maximum (``triton_rescue``), no host sync.

    Lost: ``lse`` NaN (the kernel's mark) or, unless ``marked`` (only the marks count), ``lse`` more than
    ``UNDERFLOW_GAP`` (log2) below the kernel's static offset (``work``: what ``launch`` returned; ``OFFSET_HEADROOM``
    below the bound), where exponentials the kernel flushed to zero may have counted; ``lse`` may be the merge of
    ``launch``'s parts (``flag=False``) with other keys', given as ``other`` (``out``, ``lse`` of the same rows), which
    is then merged into the recomputed rows. Every row becomes NaN where ``launch`` refused an index entry. ``count``
    (``[1]`` int32 on q's device, for tests and probes): the recomputed rows are added to it."""
    import triton

    from . import triton_rescue

    t, h_q, d = q.shape
    h_kv, nb = v.index.shape
    dense = isinstance(k, torch.Tensor)
    # the pointers a variant does not read are V's
    k_dense, k_vals, k_meta, k_index = (k, v.values, v.meta, v.index) if dense else (v.values, *k)
    tok = 16  # rows per program: the least tl.dot takes
    triton_rescue.rescue_kernel[(-(-t // tok), h_kv)](
        q, k_dense, k_vals, k_meta, v.values, v.meta, k_index, v.index, work, *(other or (out, lse)), out, lse,
        work if count is None else count,  # an unread pointer where nothing is counted
        scale * LOG2E, OFFSET_HEADROOM, UNDERFLOW_GAP, t, nb, 0 if q_pos0 is None else q_pos0,
        H_KV=h_kv, G=h_q // h_kv, G_P2=triton.next_power_of_2(h_q // h_kv), D=d, TOK=tok, K_DENSE=dense,
        CAUSAL=q_pos0 is not None, MARKED=marked,
        OTHER=other is not None, COUNT=count is not None, PRMT=q.is_cuda)


def launch(q, k: SparseBlocks | torch.Tensor, v: SparseBlocks, scale: float, q_pos0: int | None,
           out: torch.Tensor, lse: torch.Tensor, defines: tuple[str, ...] = (), splits: int = 1,
           flag: bool = True) -> torch.Tensor:
    """The library's kernels on ``attend``'s contiguous arguments, no host sync: the longest key of each KV head into
    the returned ``work [H_kv + 1]`` int32 (float bits), ``work[H_kv]`` set to 1 where an index entry is not a 2:4 slot
    of its pool (nothing else is then done), then the attention. ``splits`` (without a mask; 1 to ``nb``): the blocks in
    that many consecutive parts, part ``z`` attended into ``out[z]`` / ``lse[z]`` (``out [splits, T, H_q, D]``, ``lse
    [splits, T, H_q]``, to be merged by log-sum-exp). ``flag``: rows whose sum of exponentials underflowed get a NaN
    ``lse``; False: a part keeps what it summed (out 0, lse -inf where nothing), for callers that look at the merged
    ``lse`` (``rescue``). Raises ValueError where the keys, values or ``out`` are not in q's dtype."""
    t, h_q, d = q.shape
    h_kv, nb = v.index.shape
    if any(x.dtype != q.dtype for x in (k if isinstance(k, torch.Tensor) else k.values, v.values, out)):
        raise ValueError(f"keys, values and out must be in the queries' dtype ({q.dtype})")
    if not 1 <= splits <= (nb if q_pos0 is None else 1):
        raise ValueError(f"splits must be 1 .. {nb} without a mask, 1 with one, got {splits}")
    if out.numel() != splits * t * h_q * d or lse.numel() != splits * t * h_q or not (
            out.is_contiguous() and lse.is_contiguous()):
        raise ValueError(f"out and lse must be contiguous [{splits}, {t}, {h_q}, {d}] and [{splits}, {t}, {h_q}]")
    work = torch.empty(h_kv + 1, dtype=torch.int32, device=q.device)
    dense = isinstance(k, torch.Tensor)
    k_ptrs = (k.data_ptr(), None, None, None, 0) if dense else (
        None, k.values.data_ptr(), k.meta.data_ptr(), k.index.data_ptr(), k.values.shape[0])
    rc = library(h_q // h_kv, d, defines, q.dtype).hs_prefill_sp(
        q.data_ptr(), *k_ptrs[:3], v.values.data_ptr(), v.meta.data_ptr(), k_ptrs[3], v.index.data_ptr(), k_ptrs[4],
        v.values.shape[0], work.data_ptr(), out.data_ptr(), lse.data_ptr(), t, h_kv, nb, splits, scale * LOG2E,
        -1 if q_pos0 is None else q_pos0, 2.0 ** -UNDERFLOW_GAP if flag else 0.0, OFFSET_HEADROOM,
        torch.cuda.current_stream(q.device).cuda_stream)
    if rc:
        raise RuntimeError(f"hs_prefill_sp failed: CUDA error {rc}")
    return work
