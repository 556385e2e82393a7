"""Build and load the CUDA decode kernel on the sparse tensor cores (``cuda/decode_sp.cu``).

The source is compiled with the machine's ``nvcc`` for the GPU's architecture on first use, into
``$HS_KERNELS_CACHE`` (default ``~/.cache/hs_kernels``) under a name that hashes the source and the
architecture (written to a temporary name, then renamed: concurrent builds never load half a file), and
loaded with ctypes. ``available()`` is False without nvcc or on a GPU older than sm_80 (no mma.sp);
``built()`` also needs the build to succeed (what ``kernel="auto"`` asks before it prefers this kernel).
``$HS_CUDA_DECODE_SOURCE`` names another source to build instead (a candidate version, benchmarked
against the shipped one in the same device call).
"""

from __future__ import annotations

import ctypes
import functools
import os
import warnings
from pathlib import Path

import torch

from . import nvcc

SOURCE = Path(os.environ.get("HS_CUDA_DECODE_SOURCE") or Path(__file__).with_name("cuda") / "decode_sp.cu")
HEAD_DIMS = (64, 128)
MAX_GROUP = 8  # query heads per KV group: the 8 columns of one mma tile
SLOTS = (3, 4)  # shared-memory operand slots per warp, as built (cuda/decode_sp.cu)
DEFAULT_SLOTS = 3  # 48 KB per warp at head_dim 128: 4 warps per SM
_ERR_UNSUPPORTED = 1000


@functools.lru_cache(maxsize=None)
def available() -> bool:
    return (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8 and nvcc.find() is not None)


def supports(head_dim: int, group: int) -> bool:
    """Whether the kernel runs here for this head_dim and query heads per KV head (the build aside)."""
    return head_dim in HEAD_DIMS and group <= MAX_GROUP and available()


@functools.lru_cache(maxsize=None)
def built() -> bool:
    """``available()`` and the library builds and loads here; a failed build is reported once, as a warning."""
    if not available():
        return False
    try:
        library()
    except (RuntimeError, OSError) as e:
        warnings.warn(f"the CUDA decode kernel does not build here, the Triton one is used: {e}", stacklevel=2)
        return False
    return True


def build(arch: str, cache: Path | None = None) -> Path:
    """The shared library for ``arch`` (e.g. "sm_90"), compiled unless already in ``cache`` (``nvcc.library``)."""
    return nvcc.library(SOURCE, arch, cache=cache)


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    major, minor = torch.cuda.get_device_capability()
    lib = ctypes.CDLL(str(build(f"sm_{major}{minor}")))
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.hs_decode_sp.restype = i
    lib.hs_decode_sp.argtypes = [i, i, i] + [p] * 14 + [ctypes.c_float] + [i] * 5 + [p]
    lib.hs_decode_sp_resident.restype = i
    lib.hs_decode_sp_resident.argtypes = [i, i, i]
    return lib


@functools.lru_cache(maxsize=None)
def resident_per_sm(head_dim: int, dtype: torch.dtype, slots: int = DEFAULT_SLOTS) -> int:
    """Programs of the kernel for (head_dim, dtype, slots) that one SM runs at once (CUDA's occupancy
    calculator on the built kernel: its registers and shared memory)."""
    n = library().hs_decode_sp_resident(head_dim, int(dtype == torch.bfloat16), slots)
    if n <= 0:
        raise RuntimeError(f"hs_decode_sp_resident failed for head_dim {head_dim}, {dtype}, {slots} slots")
    return n


def _ptr(x: torch.Tensor) -> int:
    return x.data_ptr() if x.numel() else 0  # an empty pool is never read


def launch(q, k_pool, v_pool, k_index, v_index, seq_lens, o_part, lse_part, scale_log2: float, splits: int,
           slots: int = DEFAULT_SLOTS, pages=None, balance: bool = False) -> None:
    """The kernel on checked, contiguous CUDA inputs (``gpu.cuda_decode``); ``slots``: one of ``SLOTS``, the
    operands each warp stages (``slots - 1`` in flight while one is computed); ``pages``: int32 ``[B, blocks]``
    through which the maps ``[num_pages, H_kv]`` are read, or None (maps ``[B, H_kv, blocks]``); ``balance``: half of
    a row's blocks taken by whichever split is ready, counted in the stream's ``balance_counters`` (faster, results
    within rounding from run to run), else each split a fixed range; raises on a CUDA error."""
    batch, h_q, d = q.shape
    h_kv, max_blocks = k_index.shape[1], (k_index if pages is None else pages).shape[-1]
    stream = torch.cuda.current_stream(q.device)
    counters = _ptr(balance_counters(stream, batch * h_kv)) if balance else 0
    rc = library().hs_decode_sp(
        d, int(q.dtype == torch.bfloat16), slots, _ptr(q), _ptr(k_pool.dense), _ptr(k_pool.values), _ptr(k_pool.meta),
        _ptr(v_pool.dense), _ptr(v_pool.values), _ptr(v_pool.meta), _ptr(k_index), _ptr(v_index),
        0 if pages is None else _ptr(pages), _ptr(seq_lens), counters,
        _ptr(o_part), _ptr(lse_part), scale_log2, batch, max_blocks, splits, h_kv, h_q // h_kv, stream.cuda_stream)
    if rc:
        raise RuntimeError(f"hs_decode_sp failed: {'unsupported head_dim or slots' if rc == _ERR_UNSUPPORTED else f'CUDA error {rc}'}")


_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}
_OUTGROWN: list[torch.Tensor] = []  # never freed: a CUDA graph captured with one goes on writing to it


def balance_counters(stream: torch.cuda.Stream, rows: int) -> torch.Tensor:
    """The balanced kernel's counters for ``rows`` (sequence, KV head) rows on ``stream``: int32, two per row, all zero
    between calls (each row's last program puts its two back). One buffer per stream, since calls that share one must
    run in stream order; a CUDA graph keeps the buffer of the stream it was captured on, so one that more rows outgrow
    stays allocated."""
    key = (stream.device_index, stream.cuda_stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < 2 * rows:
        held = 0 if buf is None else buf.numel()
        if buf is not None:
            _OUTGROWN.append(buf)
        # at least doubled, so that the outgrown ones, kept, hold less than the current one
        buf = _COUNTERS[key] = torch.zeros(max(2 * rows, 8192, 2 * held), dtype=torch.int32, device=stream.device)
    return buf


def warm_up(head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
    """Build the library and run the (head_dim, dtype) kernel at the default slots once on a one-block input,
    so that nothing is compiled or loaded later inside a CUDA graph capture."""
    from .pool import BlockPool

    pools = [BlockPool.allocate(op, head_dim, 1, 1, dtype, device) for op in ("k", "v")]
    for pool in pools:
        pool.dense.zero_()
    q = torch.zeros(1, 1, head_dim, dtype=dtype, device=device)
    index = torch.zeros(1, 1, 1, dtype=torch.int32, device=device)
    parts = torch.empty(1, 1, 1, head_dim, device=device), torch.empty(1, 1, 1, device=device)
    launch(q, *pools, index, index, torch.ones(1, dtype=torch.int32, device=device), *parts, 1.0, 1)
    torch.cuda.synchronize(device)
