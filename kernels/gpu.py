"""CUDA entry points: the GPU kernels behind the reference's signatures, chosen automatically.

``decode_attention`` has the reference's signature (``hs_kernels.attention.decode_attention``) and
returns the same results; on CUDA float16/bfloat16 inputs of a supported shape it runs the CUDA kernel
on the sparse tensor cores (``cuda_decode``) where ``cuda_decode_supported``, else the Triton kernel
(``triton_decode``); anything else runs the reference.
``prefill_attention`` likewise runs the Triton prefill kernel (``triton_prefill``), with a chunk's cached 2:4
prefix blocks on the CUDA Trans-Both kernel on the sparse tensor cores (``cuda_prefix_prefill``) where that pays.
``prefill_compressed_attention`` (the paper's prefill: the chunk's own tiles compressed first) runs the CUDA
Trans-Both kernel on the sparse tensor cores (``cuda_prefill``) where every tile of V is 2:4 (2:4 keys read pruned,
stored dense), else the reference.
``streaming_attention`` (sink + window, the streaming groups) runs ``triton_stream``; ``write_tokens`` (new
tokens into the pools) ``triton_store``.
``compress_magnitude`` is the fused pruner + compressor (Triton ``triton_compress``), with a PyTorch fallback.
``triton`` is imported lazily, only on CUDA: this module imports on any machine. Kernels are compiled once per
(heads, head_dim, dtype, pool kinds) and cached per process; the batch, context length, pool sizes and split count
are runtime values.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import NamedTuple

import torch

from . import attention as _ref
from . import cuda_decode as cd
from . import cuda_prefill as cp
from . import store as _store
from .compressor import compress_blocks
from .format import BLOCK_SIZE, META_DTYPE, check_blocks, check_operand, sparse_shapes
from .pool import BlockPool
from .pruner import block_loss, element_mask

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
_HEAD_DIMS = (64, 128, 256)
_MAX_GROUP = 64
DECODE_KERNELS = PREFILL_KERNELS = ("auto", "triton", "cuda")


def _gpu_allowed() -> bool:
    return os.environ.get("HS_KERNELS_NO_GPU") != "1" and torch.cuda.is_available()


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    """True when CUDA is usable and ``triton`` is installed (``HS_KERNELS_NO_GPU=1`` forces False)."""
    return _gpu_allowed() and importlib.util.find_spec("triton") is not None


def kernels_cover(head_dim: int, dtype: torch.dtype, group: int) -> bool:
    """Whether the GPU kernels take attention of this head_dim, dtype and GQA ratio (query heads per KV head): float16 or
    bfloat16, head_dim 64, 128 or 256, at most 64 query heads per KV head. Else every call runs the reference."""
    return dtype in _DTYPES and head_dim in _HEAD_DIMS and 0 < group <= _MAX_GROUP


def decode_supported(q: torch.Tensor, k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor,
                     pages: torch.Tensor | None = None) -> bool:
    """Whether ``decode_attention`` runs the GPU kernel for these inputs (else the reference)."""
    return (
        triton_available() and q.is_cuda and q.dim() == 3 and q.dtype in _DTYPES
        and isinstance(k_pool, BlockPool) and isinstance(v_pool, BlockPool)
        and k_pool.dtype == q.dtype and v_pool.dtype == q.dtype and k_pool.dense.is_cuda
        and q.shape[-1] in _HEAD_DIMS and k_index.dim() == (3 if pages is None else 2) and k_index.shape[1] >= 1
        and q.shape[1] % k_index.shape[1] == 0 and q.shape[1] // k_index.shape[1] <= _MAX_GROUP
    )


SPLIT_OVERHEAD_BLOCKS = 2  # a split's fixed cost (Q, entries, partials, combine) in blocks' time, fitted below


@functools.lru_cache(maxsize=None)
def wave_splits(programs: int, blocks: int, resident: int, overhead: int = SPLIT_OVERHEAD_BLOCKS) -> int:
    """Splits of ``blocks`` KV blocks for each of ``programs`` (sequence, KV head) pairs, when the GPU
    runs ``resident`` programs at once: the fewest that minimise (waves of programs) x (blocks per split
    + ``overhead``), the time of a kernel whose last wave may run part-empty (it picks the CUDA decode's best
    measured split count or one within 2 % of it: docs/kernels.md)."""
    best_cost, best = None, 1
    for asked in range(1, blocks + 1):
        per = -(-blocks // asked)
        splits = -(-blocks // per)  # the splits that get blocks
        cost = -(-programs * splits // resident) * (per + overhead)
        if best_cost is None or cost < best_cost:
            best_cost, best = cost, splits
    return best


def cuda_decode_splits(batch: int, h_kv: int, max_blocks: int, q: torch.Tensor, slots: int = cd.DEFAULT_SLOTS) -> int:
    """Default split count of the CUDA decode: ``wave_splits`` with the built kernel's residency."""
    resident = cd.resident_per_sm(q.shape[-1], q.dtype, slots)
    return wave_splits(batch * h_kv, max_blocks, _sm_count(q.device) * resident)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=None)
def _sm_major(device: torch.device) -> int:  # asked on every decode step and prefill call: once per device
    return torch.cuda.get_device_capability(device)[0]


def triton_decode_splits(batch: int, h_kv: int, max_blocks: int, sms: int, tile_rows: int = 1) -> int:
    """Default split count of the Triton decode: about 4 programs per SM over all (split, KV head,
    sequence), at least 8 blocks per split: at or within 1 % of the best measured, where ``wave_splits`` picked a
    count 27 % slower at S = 1/1.
    ``tile_rows`` > 1 (grouped rows, ``batch`` counting tiles): about 2 programs per SM, the two that fit one (245
    registers x 4 warps, 84 KB of shared memory), down to one block per split. Their programs wait on each block's
    loads, so more of them in flight pays and a longer walk does not (one tile of a 4K prefix: 24.2 us at 65
    splits against 47.6 at the one-row rule, on an H100; docs/kernels.md)."""
    per_sm, min_blocks = (4, 8) if tile_rows == 1 else (2, 1)
    splits = max(1, (per_sm * sms) // max(1, batch * h_kv))
    return max(1, min(splits, max(1, max_blocks // min_blocks)))


def prefill_splits(programs: int, full_blocks: int, device: torch.device) -> int:
    """Prefix splits for a prefill of ``programs`` (query tile, head) programs: enough for about two
    programs per SM, at least 16 full blocks (1024 keys) per split; 1 when the chunk fills the GPU."""
    if device.type != "cuda":
        return 1
    sms = _sm_count(device)
    if programs >= 2 * sms:
        return 1
    return max(1, min(-(-2 * sms // programs), full_blocks // 16))


def prefill_split_plan(programs: int, full_blocks: int, device: torch.device,
                       splits: int | None = None) -> tuple[int, int]:
    """``(splits, blocks per split)`` of a prefill: ``splits`` asked for (default ``prefill_splits``),
    at most one per full prefix block and none left empty."""
    return even_split(full_blocks, prefill_splits(programs, full_blocks, device) if splits is None else splits)


def even_split(blocks: int, splits: int) -> tuple[int, int]:
    """``(splits, blocks per split)`` of ``blocks`` shared by at most ``splits`` programs, at most one per block,
    none left empty (1 split of 0 blocks when there are none)."""
    splits = max(1, min(blocks, splits))
    per_split = -(-blocks // splits)
    return (max(1, -(-blocks // per_split)) if blocks else 1), per_split


@functools.lru_cache(maxsize=64)
def _placeholder(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Zeros standing in for an empty tensor, which no kernel reads: kept, not allocated on every call (a memset
    launch each)."""
    return torch.zeros(shape, dtype=dtype, device=device)


def _nonempty(x: torch.Tensor) -> torch.Tensor:
    """A pool tensor with at least one slot (an empty pool is never read, but needs a pointer)."""
    return x.contiguous() if x.shape[0] else _placeholder((1, *x.shape[1:]), x.dtype, x.device)


def _with_column(index: torch.Tensor) -> torch.Tensor:
    """An index map with at least one column (an empty prefix is never read, but needs a pointer;
    TileLang also checks packed strides)."""
    return index.contiguous() if index.shape[-1] else _placeholder((*index.shape[:-1], 1), index.dtype, index.device)


def _pool_kinds(pool: BlockPool) -> int:
    """Which loads the kernel needs for this pool: dense (1), sparse (2) or both (3)."""
    from .triton_blocks import DENSE, SPARSE

    return (DENSE if pool.dense.shape[0] else 0) | (SPARSE if pool.values.shape[0] else 0) or DENSE


def cuda_decode_supported(q: torch.Tensor, k_index: torch.Tensor) -> bool:
    """Whether ``decode_attention(..., kernel="cuda")`` can run the sparse-tensor-core kernel: head_dim
    64 / 128, at most 8 query heads per KV group, nvcc on the machine (``cuda_decode``). ``k_index``: the
    maps ``[B, H_kv, blocks]``, or ``[num_pages, H_kv]`` read through pages."""
    return cd.supports(q.shape[-1], q.shape[1] // k_index.shape[1])


def decode_attention(q: torch.Tensor, k_pool: BlockPool, v_pool: BlockPool,
                     k_index: torch.Tensor, v_index: torch.Tensor, seq_lens: torch.Tensor,
                     sm_scale: float | None = None, num_splits: int | None = None,
                     num_warps: int = 2, num_stages: int | None = None, kernel: str = "auto",
                     pages: torch.Tensor | None = None, groups: torch.Tensor | None = None,
                     balance: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``hs_kernels.attention.decode_attention`` on a GPU kernel where supported (see module doc); ``pages``
    as there (the kernels read the maps through them; pages are not range-checked on the GPU path).
    ``groups`` (with ``pages``; a hint, same results): integer ``[B]``, where consecutive rows with equal values
    are one sequence's queries at successive lengths and share their pages (an extend's tokens run as decode rows).
    Under "auto" the Triton kernel then reads such rows' blocks once for up to ``decode_tile_rows`` rows; the CUDA
    kernel, asked for, reads each row's itself.
    ``balance`` (the CUDA kernel): the splits share half of each row's blocks, taken by whichever is ready, where a row
    has at least 8 blocks a split (0.5-2.5 % faster at B = 8, 32K on an H100; the sum's order, so the results within
    rounding, varies from run to run); False: fixed ranges, bitwise reproducible.

    ``kernel``: "auto" (the CUDA kernel where ``cuda_decode_supported`` and it builds, else Triton), "cuda"
    (raises ValueError where not supported, and the build's error where it does not build) or "triton". ``num_splits`` (optional) overrides the split-KV count;
    ``num_warps`` / ``num_stages`` are the Triton kernel's launch options (``triton_decode``'s defaults). No host
    synchronisation on the GPU path (seq_lens are not range-checked there: they must lie in ``[1, 64 * max_blocks]``).
    """
    if kernel not in DECODE_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(DECODE_KERNELS)}, got {kernel!r}")
    if not decode_supported(q, k_pool, v_pool, k_index, pages):
        return _ref.decode_attention(q, k_pool, v_pool, k_index, v_index, seq_lens, sm_scale, pages)
    batch, h_q, d = q.shape
    if pages is None:
        h_kv, max_blocks = _ref._check_index_pair(k_index, v_index, (batch, None, None))
    else:
        h_kv, max_blocks = _ref._check_paged_maps(k_index, v_index, pages, batch)
    _ref._check_pools(k_pool, v_pool, d)
    _ref._check_gqa(h_q, h_kv)
    if seq_lens.shape != (batch,):
        raise ValueError(f"seq_lens must have shape [{batch}], got {list(seq_lens.shape)}")
    scale = _ref._scale(sm_scale, q)
    if groups is not None and pages is None:
        raise ValueError("groups needs pages (rows of one sequence share their pages)")
    use_cuda = (kernel == "cuda" or kernel == "auto" and groups is None and cd.built()) and cuda_decode_supported(q, k_index)
    if kernel == "cuda" and not use_cuda:
        raise ValueError(f"kernel='cuda' needs nvcc and head_dim in {cd.HEAD_DIMS} with at most {cd.MAX_GROUP} "
                         f"query heads per KV head, got head_dim {d} and {h_q // h_kv}")
    if use_cuda:
        splits = num_splits or cuda_decode_splits(batch, h_kv, max_blocks, q)
        return cuda_decode(q, k_pool, v_pool, k_index, v_index, seq_lens, scale, splits, pages=pages, balance=balance)
    rows = 1 if groups is None else decode_tile_rows(h_q // h_kv, d)
    splits = num_splits or triton_decode_splits(-(-batch // rows), h_kv, max_blocks, _sm_count(q.device), rows)
    return triton_decode(q, k_pool, v_pool, k_index, v_index, seq_lens, scale, splits, num_warps, num_stages,
                         pages=pages, groups=groups, tile_rows=rows)


def cuda_decode(q, k_pool, v_pool, k_index, v_index, seq_lens, scale: float, splits: int, parts=None,
                slots: int = cd.DEFAULT_SLOTS, dependent: bool | None = None, pages=None, balance: bool = True):
    """Launch the CUDA decode (``cuda_decode``) on checked inputs, then Triton's combine; ``parts`` as
    ``triton_decode``; ``slots``: ``cuda_decode.launch``'s. ``dependent``: the combine launched as a programmatic
    dependent of the decode (it is scheduled while the decode's last programs run; default on sm_90 and newer).
    ``pages``, ``balance``: as ``decode_attention``'s."""
    from .triton_blocks import LOG2E

    batch, h_q, d = q.shape
    o_part, lse_part = parts or (torch.empty(batch, h_q, splits, d, dtype=torch.float32, device=q.device),
                                 torch.empty(batch, h_q, splits, dtype=torch.float32, device=q.device))
    cd.launch(q.contiguous(), k_pool, v_pool, k_index.contiguous(), v_index.contiguous(),
              seq_lens.to(torch.int32).contiguous(), o_part, lse_part, scale * LOG2E, splits, slots,
              None if pages is None else pages.to(torch.int32).contiguous(), balance=balance)
    dependent = _sm_major(q.device) >= 9 if dependent is None else dependent
    return _combine(q, o_part, lse_part, splits, dependent)


def _combine(q, o_part, lse_part, splits: int, dependent: bool = False):
    """Decode's per-split partials ``[B, H_q, splits, ...]`` merged into new ``out [B, H_q, D]`` / ``lse``."""
    if splits == 1:
        return o_part[:, :, 0].to(q.dtype), lse_part[:, :, 0]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    _merge_splits(o_part, lse_part, out, lse, dependent)
    return out, lse


# a merge of many rows (a prefill's tokens x heads) takes combine_rows_kernel: one row per program leaves it bound by
# the count of programs (2^18 rows at 8K tokens); at least COMBINE_PROGRAMS programs, at most COMBINE_ROWS rows each
COMBINE_ROWS_FROM = 4096
COMBINE_PROGRAMS = 1024
COMBINE_ROWS = 16


def _merge_splits(o_part, lse_part, out, lse, dependent: bool = False, rows_per_program: int | None = None) -> None:
    """The log-sum-exp merge of partials ``[R1, R2, splits, D]`` / ``[R1, R2, splits]`` (any split stride; R1 and R2
    flatten to one row index, D unit-strided) into ``out [R1, R2, D]`` / ``lse [R1, R2]`` (decode: sequences x heads;
    prefill: tokens x heads). ``triton_decode.combine_kernel`` below ``COMBINE_ROWS_FROM`` rows (``dependent``: as a
    programmatic dependent launch of the kernel just launched, sm_90 griddepcontrol), else (or where
    ``rows_per_program`` is given, a power of two) ``combine_rows_kernel`` with that many rows per program (default
    ``combine_rows``)."""
    from . import triton_decode as td

    splits, d = o_part.shape[-2:]
    rows = out.shape[0] * out.shape[1]
    if o_part.stride(0) != o_part.shape[1] * o_part.stride(1) or o_part.stride(3) != 1 or (
            lse_part.stride(0) != lse_part.shape[1] * lse_part.stride(1)):
        raise ValueError("partials must flatten to [rows, splits, D] with D unit-strided")
    strides = (o_part.stride(1), o_part.stride(2), lse_part.stride(1), lse_part.stride(2))
    if rows_per_program or (rows >= COMBINE_ROWS_FROM and not dependent):
        per = rows_per_program or combine_rows(rows)
        td.combine_rows_kernel[(-(-rows // per),)](o_part, lse_part, out, lse, rows, splits, *strides, D=d,
                                                   SPLITS_P2=_next_pow2(splits), ROWS=per)
        return
    pdl = {"launch_pdl": True, "DEPENDENT": True} if dependent else {}
    td.combine_kernel[(rows,)](o_part, lse_part, out, lse, splits, *strides, D=d, SPLITS_P2=_next_pow2(splits), **pdl)


def combine_rows(rows: int) -> int:
    """Rows per program of ``combine_rows_kernel``: the most, up to ``COMBINE_ROWS``, that leave ``COMBINE_PROGRAMS``
    programs."""
    per = 1
    while per < COMBINE_ROWS and rows // (2 * per) >= COMBINE_PROGRAMS:
        per *= 2
    return per


TILE_ELEMENTS = 64 * 128  # a grouped decode program's accumulator: 64 query rows at head_dim 128 (no spill at 256)
TILE_WARPS = 4  # its warps at least: that accumulator does not fit two


def decode_tile_rows(group: int, head_dim: int) -> int:
    """Rows of one sequence that a grouped Triton decode program takes (``decode_attention``'s ``groups``): the
    most, a power of two, whose ``group`` query heads each fill at most 64 tile rows and ``TILE_ELEMENTS``
    accumulators; at least 1."""
    rows = 1
    while 2 * rows * group <= min(64, TILE_ELEMENTS // head_dim):
        rows *= 2
    return rows


def decode_stages(tile_rows: int, head_dim: int) -> int:
    """Default pipeline stages of the Triton decode: 3 for grouped rows up to head_dim 128, 0.5-3 % faster than 2 in
    all eight shapes of benchmarks/kernels/probes/grouped_decode.py with the same shared memory (H100); else 2 (one
    row a program; grouped rows at d 256, whose spills 3 stages double)."""
    return 3 if tile_rows > 1 and head_dim <= 128 else 2


def decode_launch(tile_rows: int, head_dim: int, num_warps: int, num_stages: int | None = None) -> tuple[int, int]:
    """The Triton decode's ``(num_warps, num_stages)`` for ``tile_rows`` rows a program: the warps asked for, at least
    ``TILE_WARPS`` for grouped rows; the stages asked for, else ``decode_stages``."""
    warps = num_warps if tile_rows == 1 else max(num_warps, TILE_WARPS)
    return warps, num_stages or decode_stages(tile_rows, head_dim)


def triton_decode(q, k_pool, v_pool, k_index, v_index, seq_lens, scale: float, splits: int,
                  num_warps: int = 2, num_stages: int | None = None, parts=None, pages=None, groups=None,
                  tile_rows: int | None = None):
    """Launch the Triton decode (+ combine) on checked inputs. Also runs under Triton's CPU
    interpreter (``TRITON_INTERPRET=1``, CPU tensors), which is how CI tests the kernel (there with
    the select form of the 2:4 unpack: the interpreter cannot run PTX).
    ``parts``: optional per-split workspace ``(o_part [B, H_q, splits, D], lse_part [B, H_q, splits])``
    float32 (tests pass poisoned buffers to see that every element is written). ``groups`` (with ``pages``):
    ``decode_attention``'s; a program then takes ``tile_rows`` rows (default ``decode_tile_rows``), launched with
    ``decode_launch``'s options."""
    from . import triton_decode as td
    from .triton_blocks import LOG2E

    batch, h_q, d = q.shape
    h_kv, max_blocks = k_index.shape[1], (k_index if pages is None else pages).shape[-1]
    g = h_q // h_kv
    rows = 1 if groups is None else tile_rows or decode_tile_rows(g, d)
    warps, stages = decode_launch(rows, d, num_warps, num_stages)
    o_part, lse_part = parts or (torch.empty(batch, h_q, splits, d, dtype=torch.float32, device=q.device),
                                 torch.empty(batch, h_q, splits, dtype=torch.float32, device=q.device))
    td.decode_kernel[(splits, h_kv, -(-batch // rows))](
        q.contiguous(), _nonempty(k_pool.dense), _nonempty(k_pool.values), _nonempty(k_pool.meta),
        _nonempty(v_pool.dense), _nonempty(v_pool.values), _nonempty(v_pool.meta),
        k_index.contiguous(), v_index.contiguous(), seq_lens.to(torch.int32).contiguous(),
        k_index if pages is None else pages.to(torch.int32).contiguous(),
        seq_lens if groups is None else groups.to(torch.int32).contiguous(),
        o_part, lse_part, scale * LOG2E, max_blocks, splits, batch,
        H_KV=h_kv, G=g, BLOCK_H=max(16, _next_pow2(rows * g)), D=d,
        K_MODE=_pool_kinds(k_pool), V_MODE=_pool_kinds(v_pool), PRMT=q.is_cuda, PAGED=pages is not None, ROWS=rows,
        num_warps=warps, num_stages=stages)
    return _combine(q, o_part, lse_part, splits)


def prefill_supported(q: torch.Tensor, k: torch.Tensor, k_pool: BlockPool, v_pool: BlockPool) -> bool:
    """Whether ``prefill_attention`` runs the GPU kernel for these inputs (else the reference)."""
    return (
        triton_available() and q.is_cuda and q.dim() == 3 and q.dtype in _DTYPES and q.shape[0] > 0
        and isinstance(k_pool, BlockPool) and isinstance(v_pool, BlockPool)
        and k_pool.dtype == q.dtype and v_pool.dtype == q.dtype and k_pool.dense.is_cuda
        and q.shape[-1] in _HEAD_DIMS and k.dim() == 3 and k.shape[1] >= 1
        and q.shape[1] % k.shape[1] == 0
    )


def prefill_launch(head_dim: int) -> tuple[int, int, int]:
    """Default ``(block_m, num_warps, num_stages)`` of the Triton prefill: 128 rows x 8 warps x 3 stages,
    the fastest measured on the H200 at head_dim 128 (docs/kernels.md). At head_dim 256 that tile
    needs 256 KB of shared memory and the H200 has 227 KB per block, so 64 rows x 4 warps (224 KB), the
    tiling the GPU tests run there (``python -m hs_kernels.resources`` prints both)."""
    return (64, 4, 3) if head_dim > 128 else (128, 8, 3)


# programs reading each prefix block from which copying a 2:4 prefix dense first pays (measured: docs/kernels.md)
DENSIFY_MIN_READERS = {"mixed": 2, "sparse": 4}
# block reads (readers x used prefix blocks) that pay back the copy's fixed cost, by what the prefix holds
DENSIFY_MIN_BLOCK_READS = {"dense": 1 << 13, "mixed": 1 << 10, "sparse": 1 << 12}
DENSIFY_MAX_BYTES = 1 << 30  # the transient dense copy of one call's prefix (K and V) at most


def prefill_chunk_n(prefix_len: int, block_m: int, tma: bool = False) -> int:
    """Default keys per tile of the chunk's own keys: 128 without a prefix (the one-shot prefill, 5 %
    faster on the H200) or through TMA (4 x 8K chunked: faster at 16 of 18 same-call A/B rows, by up to 3.1 %, 1 %
    slower at most), 64 after a prefix with pointer loads (128 was 2-7 % slower there; docs/kernels.md)."""
    return 128 if (prefix_len == 0 or tma) and block_m >= 128 else 64


def prefill_prefix_n(block_m: int) -> int:
    """Default keys per tile of a dense or densified prefix: two blocks (128) where the query tile has 128
    rows (on the H200, 4 x 8K chunked: 19.8 ms against 21.3 with one block a tile over a dense prefix, 20.6 against
    23.1 over a densified 2:4 one), else one."""
    return 128 if block_m >= 128 else 64


# chunk tokens from which the chunk's keys come through TMA: long chunks gain, short ones pay the descriptors' host cost
TMA_MIN_TOKENS = 1024


def prefill_tma(k: torch.Tensor, v: torch.Tensor) -> bool:
    """Default of ``tma``: the chunk's keys and values ``[T, H_kv, D]`` read through Hopper's tensor memory
    accelerator (``triton_prefill``) on sm_90 and later, for chunks of at least ``TMA_MIN_TOKENS``, where
    both are 16-byte aligned, as TMA requires (their rows then are: D is 64, 128 or 256)."""
    return (k.is_cuda and k.shape[0] >= TMA_MIN_TOKENS and _sm_major(k.device) >= 9
            and k.data_ptr() % 16 == 0 and v.data_ptr() % 16 == 0)


def prefix_copy_fits(h_kv: int, used: int, head_dim: int, itemsize: int) -> bool:
    """Whether a dense copy of ``used`` prefix blocks of ``h_kv`` KV heads (K and V) fits ``DENSIFY_MAX_BYTES``."""
    return 2 * h_kv * used * BLOCK_SIZE * head_dim * itemsize <= DENSIFY_MAX_BYTES


def prefix_kind(k_mode: int, v_mode: int) -> str:
    """"dense", "mixed" or "sparse": what a prefix whose K and V entries have kinds ``k_mode``, ``v_mode``
    (``_entry_kinds``; dense 1, sparse 2, both 3) holds, as ``DENSIFY_MIN_READERS`` and ``DENSIFY_MIN_BLOCK_READS``
    name it."""
    from .triton_blocks import DENSE, SPARSE

    if not (k_mode | v_mode) & SPARSE:
        return "dense"
    return "mixed" if DENSE | SPARSE in (k_mode, v_mode) else "sparse"


def prefix_copy_pays(readers: int, kind: str, h_kv: int, used: int, head_dim: int, itemsize: int) -> bool:
    """Whether copying ``used`` prefix blocks of ``kind`` (``prefix_kind``) dense first, each read by ``readers``
    programs, can pay: at least ``DENSIFY_MIN_BLOCK_READS`` block reads, and the copy fits (``prefix_copy_fits``)."""
    return readers * used >= DENSIFY_MIN_BLOCK_READS[kind] and prefix_copy_fits(h_kv, used, head_dim, itemsize)


def prefill_densify(readers: int, kind: str, h_kv: int, used: int, head_dim: int, itemsize: int) -> bool:
    """Default of ``densify`` for a prefix with 2:4 blocks (``kind`` "mixed": K's or V's entries both dense
    and sparse, or "sparse"): when at least ``DENSIFY_MIN_READERS`` programs read each prefix block (query tiles x
    head groups of one KV head) and the copy pays (``prefix_copy_pays``)."""
    return readers >= DENSIFY_MIN_READERS[kind] and prefix_copy_pays(readers, kind, h_kv, used, head_dim, itemsize)


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor, v_index: torch.Tensor,
                      prefix_len: int, sm_scale: float | None = None, block_m: int | None = None,
                      num_warps: int | None = None, num_stages: int | None = None, select: bool = False,
                      chunk_n: int | None = None, heads: int | None = None, densify: bool | None = None,
                      prefix_n: int | None = None, tma: bool | None = None,
                      kernel: str = "auto", split: PrefixSplit | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``hs_kernels.attention.prefill_attention`` on the GPU kernels where supported (CUDA float16/bfloat16,
    head_dim 64/128/256), else the reference.

    ``kernel``: "triton", the Triton kernel (``triton_prefill``) over the whole prefix; "cuda", the prefix blocks
    that are 2:4 in K and V for every KV head on the sparse tensor cores (``cuda_prefill``, no mask: every query
    sees them), the chunk and the other prefix blocks on the Triton kernel, the two merged by log-sum-exp
    (``cuda_prefix_prefill``; raises ValueError where ``cuda_prefill.supports`` refuses the queries or no such block
    exists); "auto", "cuda" where such blocks hold enough keys and query tokens x keys (``cuda_prefix_worth``, with
    the lower bar of a given split), else "triton". ``split``: the prefix's ``PrefixSplit`` found beforehand
    (``prefix_splits``, the same maps), so that the CUDA path makes no host sync. ``block_m``, ``num_warps``,
    ``num_stages``, ``select``, ``chunk_n``, ``heads``, ``densify``, ``prefix_n`` and ``tma`` are the Triton
    kernel's launch options (``triton_prefill``; defaults: ``prefill_launch``).
    No bounds check of the used index entries against the pools on the Triton path (the reference and the CUDA
    kernel raise)."""
    if kernel not in PREFILL_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(PREFILL_KERNELS)}, got {kernel!r}")
    if not prefill_supported(q, k, k_pool, v_pool):
        return _ref.prefill_attention(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, sm_scale)
    _ref._check_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len)
    scale = _ref._scale(sm_scale, q)
    options = dict(block_m=block_m, num_warps=num_warps, num_stages=num_stages, select=select, chunk_n=chunk_n,
                   heads=heads, densify=densify, prefix_n=prefix_n, tma=tma)
    if kernel == "cuda" and not cuda_prefix_supported(q, k_pool, v_pool, k_index, prefix_len):
        raise ValueError("kernel='cuda' needs bf16 or fp16 queries of head_dim 64 or 128 with a GQA ratio of 1 to "
                         f"{cp.ROWS} on sm_90 with nvcc, 2:4 slots in both pools and a full prefix block")
    given = split is not None
    if given and len(split.sparse) + len(split.rest) != -(-prefix_len // BLOCK_SIZE):
        raise ValueError(f"split: {len(split.sparse)} + {len(split.rest)} blocks, not the {prefix_len}-token prefix's")
    if kernel == "cuda" or (kernel == "auto" and cuda_prefix_pays(q, k_pool, v_pool, k_index, prefix_len, given)):
        split = split if given else cuda_prefix_blocks(k_pool, v_pool, k_index, v_index, prefix_len)
        blocks = len(split.sparse)
        if blocks and (kernel == "cuda" or cuda_prefix_worth(q.shape[0], BLOCK_SIZE * blocks, given)):
            return cuda_prefix_prefill(q, k, v, k_pool, v_pool, prefix_len, scale, split, **options)
        if kernel == "cuda":
            raise ValueError("kernel='cuda' found no prefix block that is 2:4 in K and V for every KV head")
    return triton_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len, scale, **options)


# "auto" takes the CUDA prefix path where its gain, which grows with query tokens x prefix keys, beats its fixed host
# work (a sync, the Triton part, the merge, the rescue); the bars and their measurements: docs/kernels.md
CUDA_PREFIX_MIN_WAVES = 4
CUDA_PREFIX_MIN_KEYS = 1 << 14
CUDA_PREFIX_MIN_PAIRS = 1 << 27
CUDA_PREFIX_LONG_KEYS = 5 << 13
CUDA_PREFIX_LONG_MIN_PAIRS = 3 << 23
CUDA_PREFIX_GIVEN_MIN_PAIRS = 64 * CUDA_PREFIX_LONG_KEYS
CUDA_PREFIX_GIVEN_PAIRS = 3 << 23
# dense keys (``prefix_keys``) pay once the chunk's query rows per KV head outweigh the copy (it grows with the prefix)
CUDA_PREFIX_DENSE_KEYS_MIN_ROWS = 1 << 14
CUDA_PREFIX_SPLIT_OVERHEAD_BLOCKS = 9  # a CTA's fixed cost (Q, the pipeline's fill, its part's output) in blocks


def cuda_prefix_supported(q: torch.Tensor, k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor,
                          prefix_len: int) -> bool:
    """Whether the CUDA prefill can take prefix blocks here (no host sync): ``cuda_prefill.supports`` the queries,
    it builds, both pools hold 2:4 slots and the prefix has a full block."""
    h_kv = k_index.shape[0]
    return (_gpu_allowed() and prefix_len >= BLOCK_SIZE and k_pool.values.shape[0] > 0 and v_pool.values.shape[0] > 0
            and cp.ready(q, h_kv))


def cuda_prefix_pays(q: torch.Tensor, k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor,
                     prefix_len: int, given: bool = False) -> bool:
    """The part of the "auto" rule known without a host sync: ``cuda_prefix_worth`` of the prefix's full blocks (``given``:
    for a caller that finds the split beforehand, ``prefix_splits``), and ``cuda_prefix_supported``."""
    return (cuda_prefix_worth(q.shape[0], BLOCK_SIZE * (prefix_len // BLOCK_SIZE), given)
            and cuda_prefix_supported(q, k_pool, v_pool, k_index, prefix_len))


def cuda_prefix_worth(t: int, keys: int, given: bool = False) -> bool:
    """Whether ``keys`` prefix keys for ``t`` query tokens reach ``CUDA_PREFIX_MIN_KEYS`` and ``CUDA_PREFIX_MIN_PAIRS``,
    or ``CUDA_PREFIX_LONG_KEYS`` and ``CUDA_PREFIX_LONG_MIN_PAIRS``; where the split is ``given`` (the call makes no host
    sync), ``CUDA_PREFIX_GIVEN_PAIRS`` and ``CUDA_PREFIX_GIVEN_MIN_PAIRS`` instead."""
    pairs = t * keys
    if given:
        return ((keys >= CUDA_PREFIX_MIN_KEYS and pairs >= CUDA_PREFIX_GIVEN_PAIRS)
                or (keys >= CUDA_PREFIX_LONG_KEYS and pairs >= CUDA_PREFIX_GIVEN_MIN_PAIRS))
    return ((keys >= CUDA_PREFIX_MIN_KEYS and pairs >= CUDA_PREFIX_MIN_PAIRS)
            or (keys >= CUDA_PREFIX_LONG_KEYS and pairs >= CUDA_PREFIX_LONG_MIN_PAIRS))


def cuda_prefix_dense_keys(t: int, h_q: int, h_kv: int, splits: int) -> bool:
    """Whether ``cuda_prefix_prefill`` reads the prefix's 2:4 keys from a dense copy by default: in one part, for
    ``t`` query tokens of at least ``CUDA_PREFIX_DENSE_KEYS_MIN_ROWS`` query rows per KV head."""
    return splits == 1 and t * (h_q // h_kv) >= CUDA_PREFIX_DENSE_KEYS_MIN_ROWS


def cuda_prefix_splits(t: int, h_q: int, h_kv: int, blocks: int, device: torch.device, head_dim: int = 128,
                       dtype: torch.dtype = torch.bfloat16) -> int:
    """Parts of the ``blocks`` 2:4 prefix blocks that the CUDA kernel attends for ``t`` query tokens: 1 where its
    CTAs fill ``CUDA_PREFIX_MIN_WAVES`` waves, else ``wave_splits`` of the CTAs with
    ``CUDA_PREFIX_SPLIT_OVERHEAD_BLOCKS``."""
    ctas, slots = cp.ctas(t, h_q, h_kv), _sm_count(device) * cp.resident(h_q // h_kv, head_dim=head_dim, dtype=dtype)
    if ctas >= CUDA_PREFIX_MIN_WAVES * slots:
        return 1
    return wave_splits(ctas, blocks, slots, CUDA_PREFIX_SPLIT_OVERHEAD_BLOCKS)


class PrefixSplit(NamedTuple):
    """A cached prefix's blocks as the CUDA prefix path splits them: ``sparse``, the full blocks 2:4 in K and V for
    every KV head (to the sparse tensor cores), ``rest``, the others, the partial last one among them (to the Triton
    kernel), each ascending, int32 on the maps' device; ``kinds``, those of the rest's K and V entries (``_kinds``);
    the K and V maps' entries of ``sparse`` and of ``rest``, ``[H_kv, blocks]`` each, contiguous (gathered by the same
    launch, so that the calls that read them make no gather of their own)."""
    sparse: torch.Tensor
    rest: torch.Tensor
    kinds: tuple[int, int]
    k_sparse: torch.Tensor
    v_sparse: torch.Tensor
    k_rest: torch.Tensor
    v_rest: torch.Tensor


def cuda_prefix_blocks(k_pool: BlockPool, v_pool: BlockPool, k_index: torch.Tensor, v_index: torch.Tensor,
                       prefix_len: int) -> PrefixSplit:
    """The ``PrefixSplit`` of one layer's maps (``prefix_splits``): one launch, one host sync."""
    return prefix_splits([(k_pool, v_pool, k_index, v_index)], prefix_len)[0]


def prefix_splits(layers, prefix_len: int) -> list[PrefixSplit]:
    """The ``PrefixSplit`` of each layer's ``(k_pool, v_pool, k_index, v_index)`` over the same ``prefix_len`` tokens:
    one launch each (``triton_prefix_blocks``), one host sync for all. A caller that knows every layer's maps before
    the layers run (a serving backend, per forward) passes each layer's to ``prefill_attention(split=...)``, whose calls
    then make no host sync. Raises ValueError where an entry of a ``sparse`` block lies past its pool."""
    from .triton_prefix_blocks import HEAD, prefix_blocks_kernel

    used, device = -(-prefix_len // BLOCK_SIZE), layers[0][2].device
    heads = [k_index.shape[0] for _, _, k_index, _ in layers]
    out = torch.empty(len(layers), HEAD + 2 * used, dtype=torch.int32, device=device)
    maps = torch.empty(2 * used * sum(heads), dtype=torch.int32, device=device).split([2 * used * h for h in heads])
    for row, layer_maps, (k_pool, v_pool, k_index, v_index) in zip(out, maps, layers):
        k_index, v_index = k_index.contiguous(), v_index.contiguous()
        prefix_blocks_kernel[(1,)](k_index, v_index, k_index.stride(0), v_index.stride(0), used,
                                   prefix_len // BLOCK_SIZE, k_pool.values.shape[0], v_pool.values.shape[0], row,
                                   layer_maps, H_KV=k_index.shape[0], HEADS=_next_pow2(k_index.shape[0]), BLOCK=256)
    splits = []
    for row, layer_maps, h, (n, bad, *has) in zip(out, maps, heads, out[:, :HEAD].tolist()):
        if bad:
            raise ValueError(cp.REFUSED)
        k_maps, v_maps = layer_maps.view(2, h * used)
        splits.append(PrefixSplit(row[HEAD:HEAD + n], row[HEAD + used:HEAD + 2 * used - n], _kinds(has),
                                  k_maps[:h * n].view(h, n), v_maps[:h * n].view(h, n),
                                  k_maps[h * n:].view(h, used - n), v_maps[h * n:].view(h, used - n)))
    return splits


def cuda_prefix_prefill(q, k, v, k_pool, v_pool, prefix_len: int, scale: float, split: PrefixSplit,
                        splits: int | None = None, dense_keys: bool | None = None,
                        **options) -> tuple[torch.Tensor, torch.Tensor]:
    """``prefill_attention`` on checked inputs as parts merged by log-sum-exp, by the prefix's ``split``
    (``cuda_prefix_blocks``): its ``sparse`` blocks (2:4 in K and V for every KV head) by the CUDA kernel without a
    mask, in ``splits`` parts (default ``cuda_prefix_splits``), and the chunk after its ``rest`` blocks (ascending; the
    partial last block, if any, last) by the Triton kernel with ``options``. ``dense_keys``: the kernel reads those
    blocks' keys from a dense copy (``prefix_keys``; one part only), as the one-shot prefill reads its 2:4 keys;
    default ``cuda_prefix_dense_keys``. No host sync: rows that the kernel's static offset may have lost are recomputed
    on the GPU (``cuda_prefill.rescue``); every row is NaN where an entry of a ``sparse`` block is not a slot of its
    pool (``cuda_prefix_blocks`` raises there)."""
    t, h_q, d = q.shape
    h_kv, blocks = split.k_sparse.shape
    if splits is None and not dense_keys:
        splits = cuda_prefix_splits(t, h_q, h_kv, blocks, q.device, d, q.dtype)
    if dense_keys is None:
        dense_keys = cuda_prefix_dense_keys(t, h_q, h_kv, splits)
    if dense_keys and splits not in (None, 1):
        raise ValueError(f"dense keys are read in one part, not {splits}")
    splits = 1 if dense_keys else splits
    part_out = torch.empty(splits + 1, t, h_q, d, dtype=q.dtype, device=q.device)
    part_lse = torch.empty(splits + 1, t, h_q, dtype=torch.float32, device=q.device)
    keys = (prefix_keys(k_pool, split.k_sparse) if dense_keys
            else cp.SparseBlocks(k_pool.values, k_pool.meta, split.k_sparse))
    values = cp.SparseBlocks(v_pool.values, v_pool.meta, split.v_sparse)
    q = q.contiguous()
    # the CUDA part is launched first, the Triton part's host work (much Python) then runs while the GPU is busy
    work = cp.launch(q, keys, values, scale, None, part_out[:splits], part_lse[:splits], splits=splits, flag=False)
    triton_prefill(q, k, v, k_pool, v_pool, split.k_rest, split.v_rest, prefix_len - BLOCK_SIZE * blocks, scale,
                   out=part_out[splits], lse=part_lse[splits], kinds=split.kinds, **options)
    out = torch.empty_like(q)
    lse = torch.empty(t, h_q, dtype=torch.float32, device=q.device)
    _merge_splits(part_out.permute(1, 2, 0, 3), part_lse.permute(1, 2, 0), out, lse)  # [t, h_q, part, ...]
    cp.rescue(q, keys, values, work, scale, None, out, lse, other=(part_out[splits], part_lse[splits]))
    return out, lse


def prefix_keys(k_pool: BlockPool, k_index: torch.Tensor) -> torch.Tensor:
    """The keys of the blocks that ``k_index [H_kv, n]`` names in ``k_pool`` (dense or 2:4 entries), dense and
    token-major as the CUDA prefill reads dense keys: ``[64 n, H_kv, D]``, block ``j`` of head ``h`` at tokens ``64 j
    ..``, zeros where pruned (``triton_prefill.densify_kernel``, one launch; transient memory, 64 MB for a 32K prefix
    of 8 KV heads at d 128 in bf16)."""
    from . import triton_prefill as tp
    from .triton_blocks import DENSE, SPARSE

    h_kv, n = k_index.shape
    d = k_pool.head_dim
    out = torch.empty(BLOCK_SIZE * n, h_kv, d, dtype=k_pool.dtype, device=k_index.device)
    if not out.numel():
        return out
    k_index = k_index.contiguous()
    pools = _nonempty(k_pool.dense), _nonempty(k_pool.values), _nonempty(k_pool.meta)
    # V's operands are K's: with V_MODE dense and not ALL the kernel reads and writes none of them; K as a 2:4 or
    # mixed pool (an all-dense one read as mixed) is copied without ALL
    tp.densify_kernel[(n, h_kv)](*pools, *pools, k_index, k_index, out, out, n, h_kv * d, d, D=d,
                                 K_MODE=_pool_kinds(k_pool) | SPARSE, V_MODE=DENSE, PRMT=k_index.is_cuda, ALL=False,
                                 num_warps=4)
    return out


# a chunk's 2:4 keys copied dense (``chunk_keys``) pay from this many query rows per KV head: the dense-key S reads
# less shared memory, which bounds the kernel (docs/kernels.md)
COMPRESSED_DENSE_KEYS_MIN_ROWS = 1 << 16


def compressed_dense_keys(t: int, h_q: int, h_kv: int) -> bool:
    """Whether ``prefill_compressed_attention`` gives the kernel a chunk of ``t`` tokens' 2:4 keys decompressed and
    stored dense (``chunk_keys``): from ``COMPRESSED_DENSE_KEYS_MIN_ROWS`` query rows per KV head."""
    return t * (h_q // h_kv) >= COMPRESSED_DENSE_KEYS_MIN_ROWS


def chunk_keys(chunk) -> torch.Tensor:
    """The keys of a chunk whose full tiles are all 2:4 (``chunk.k_mode == "sparse"``), decompressed from the chunk
    itself and stored dense, zeros where pruned: ``[T, H_kv, D]`` (``prefix_keys`` over the chunk's 2:4 slots)."""
    d = chunk.k_vals.shape[-1] * 2
    pool = BlockPool("k", chunk.k_vals.new_empty(0, BLOCK_SIZE, d), chunk.k_vals, chunk.k_meta)
    return prefix_keys(pool, chunk.k_index)


def compressed_prefill_keys(k: torch.Tensor, chunk, h_q: int):
    """The keys ``prefill_compressed_attention`` gives the CUDA kernel for ``h_q`` query heads on a chunk whose K tiles
    are all dense (``k`` itself) or all 2:4: dense from ``chunk_keys`` where ``compressed_dense_keys``, else the
    chunk's ``cuda_prefill.SparseBlocks``."""
    if chunk.k_mode == "dense":
        return k
    if compressed_dense_keys(k.shape[0], h_q, k.shape[1]):
        return chunk_keys(chunk)
    return cp.SparseBlocks(chunk.k_vals, chunk.k_meta, chunk.k_index)


def prefill_compressed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk,
                                 sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's prefill: a chunk without a cached prefix attending causally to itself with its full tiles
    compressed first (``chunk``: ``chunk_blocks.compress_chunk(k, v, s_k, s_v)``). The oracle is the reference
    ``prefill_attention`` on ``chunk_blocks.chunk_as_dense(k, v, chunk)`` with an empty prefix. Runs the sparse tensor
    cores (``cuda_prefill.attend``) where every tile of V is 2:4, those of K all 2:4 (for long chunks given to it
    decompressed and stored dense: ``compressed_prefill_keys``) or all dense, and ``cuda_prefill.supports`` the
    queries (bf16 or fp16, head_dim 64 or 128, GQA ratio 1 to 64, sm_90), else the oracle.
    Returns ``out [T, H_q, D]`` (q's dtype) and ``lse [T, H_q]`` (float32)."""
    from .chunk_blocks import chunk_as_dense

    pools = [BlockPool.allocate(op, q.shape[-1], 0, 0, q.dtype, q.device) for op in ("k", "v")]
    empty = torch.zeros((k.shape[1] if k.dim() == 3 else 1, 1), dtype=torch.int32, device=q.device)
    _ref._check_prefill(q, k, v, *pools, empty, empty, 0)
    if (_gpu_allowed() and chunk.v_mode == "sparse" and chunk.k_mode in ("sparse", "dense")
            and cp.ready(q, k.shape[1])):
        values = cp.SparseBlocks(chunk.v_vals, chunk.v_meta, chunk.v_index)
        return cp.attend(q, compressed_prefill_keys(k, chunk, q.shape[1]), values, _ref._scale(sm_scale, q), q_pos0=0)
    return _ref.prefill_attention(q, *chunk_as_dense(k, v, chunk), *pools, empty, empty, 0, sm_scale)


def _entry_kinds(k_index: torch.Tensor, v_index: torch.Tensor, used: int) -> tuple[int, int]:
    """Kinds (dense 1, sparse 2, both 3; dense where there is none) of the first ``used`` K and V entries, with one
    host sync."""
    ki, vi = k_index[:, :used], v_index[:, :used]
    return _kinds(torch.stack((ki >= 0, ki < 0, vi >= 0, vi < 0)).flatten(1).any(1).tolist() if used else [0] * 4)


def _kinds(has) -> tuple[int, int]:
    """Whether K's entries hold dense ones, sparse ones, then V's likewise (four flags) as the kinds of K and V: dense
    1, sparse 2, both 3, dense where there is none."""
    from .triton_blocks import DENSE, SPARSE

    return DENSE * has[0] | SPARSE * has[1] or DENSE, DENSE * has[2] | SPARSE * has[3] or DENSE


def prefill_tiles(t: int, h_q: int, h_kv: int, block_m: int = 128, heads: int | None = None) -> tuple[int, int]:
    """``(heads per tile, query tiles)`` of the Triton prefill; the grid is ``(tiles, h_q / heads,
    splits)``. Default heads: the largest power of two dividing the GQA group that leaves at least 16
    query tokens per tile."""
    group = h_q // h_kv
    if heads is None:
        heads = 1
        while group % (2 * heads) == 0 and block_m // (2 * heads) >= 16:
            heads *= 2
    if group % heads or heads & (heads - 1) or block_m % heads:
        raise ValueError(f"heads must be a power of two dividing the GQA group ({group}) and block_m, got {heads}")
    return heads, -(-t // (block_m // heads))


def prefill_programs(t: int, h_q: int, h_kv: int, block_m: int = 128, heads: int | None = None) -> int:
    """Programs of one prefix split of the Triton prefill (query tiles x head groups); each prefix block
    is read by ``prefill_programs / h_kv`` of them."""
    hg, tiles = prefill_tiles(t, h_q, h_kv, block_m, heads)
    return tiles * h_q // hg


def triton_prefill(q, k, v, k_pool, v_pool, k_index, v_index, prefix_len: int, scale: float,
                   block_m: int | None = None, num_warps: int | None = None, num_stages: int | None = None,
                   select: bool = False, out=None, lse=None, splits: int | None = None, chunk_n: int | None = None,
                   heads: int | None = None, densify: bool | None = None, prefix_n: int | None = None,
                   tma: bool | None = None, kinds: tuple[int, int] | None = None):
    """Launch the Triton prefill on checked inputs (also under Triton's CPU interpreter, as
    ``triton_decode``). The kernel variant follows the prefix's entries: all dense, all sparse or
    mixed (``select``: the mixed variant picks a block's copy by a select, not a branch).
    ``out [T, H_q, D]`` / ``lse [T, H_q]`` float32: optional output buffers (tests pass poisoned
    ones to see that every element is written). ``splits``: prefix splits, merged by
    ``combine_kernel`` (default ``prefill_splits``; at most one per full prefix block). ``chunk_n``:
    keys per tile of the chunk's own keys (64 or 128, at most ``block_m``; default ``prefill_chunk_n``).
    ``heads``: query heads of one KV group per tile (``prefill_tiles``). ``densify``: when the prefix has
    2:4 blocks, copy its used blocks into a dense scratch pool first (``triton_prefill.densify_kernel``;
    transient memory: the prefix's K and V, dense) and run the dense variant on it (default
    ``prefill_densify``); with ``tma`` and 128-key prefix tiles any prefix is copied by default where ``prefix_copy_pays``, every operand,
    so that each block pair is one bulk copy at a place known without the index maps. ``prefix_n``: keys per tile of a dense prefix (64, or 128: two blocks, at most
    ``block_m``; default ``prefill_prefix_n``; a prefix with 2:4 blocks, unless densified, takes 64). ``tma``: the
    chunk's keys and values loaded as tensor-descriptor tiles (default ``prefill_tma``). ``kinds``: the used entries'
    kinds (K, V) as ``_entry_kinds`` gives them, where the caller has them; else the pools' (``_pool_kinds``), which
    choose the kernel's variant and the copy's rule as well, with no host sync. Launch options left None take
    ``prefill_launch``'s defaults for the head_dim."""
    from . import triton_prefill as tp
    from .triton_blocks import DENSE, LOG2E, SPARSE

    t, h_q, d = q.shape
    h_kv = k_index.shape[0]
    block_m, num_warps, num_stages = (given or default for given, default in
                                      zip((block_m, num_warps, num_stages), prefill_launch(d)))
    k, v = k.contiguous(), v.contiguous()
    tma = prefill_tma(k, v) if tma is None else tma
    chunk_n = prefill_chunk_n(prefix_len, block_m, tma) if chunk_n is None else chunk_n
    if chunk_n not in (64, 128) or chunk_n > block_m:
        raise ValueError(f"chunk_n must be 64 or 128 and at most block_m ({block_m}), got {chunk_n}")
    prefix_n = prefill_prefix_n(block_m) if prefix_n is None else prefix_n
    if prefix_n not in (64, 128) or prefix_n > block_m:
        raise ValueError(f"prefix_n must be 64 or 128 and at most block_m ({block_m}), got {prefix_n}")
    hg, tiles = prefill_tiles(t, h_q, h_kv, block_m, heads)
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty(t, h_q, dtype=torch.float32, device=q.device) if lse is None else lse
    used = -(-prefix_len // BLOCK_SIZE)
    programs = prefill_programs(t, h_q, h_kv, block_m, hg)
    # the pools stand for the entries' kinds unless given: reading the entries' kinds would cost a host sync per call
    k_mode, v_mode = kinds or (_pool_kinds(k_pool), _pool_kinds(v_pool))
    tma_pairs = tma and prefix_n == 2 * BLOCK_SIZE and prefix_len >= prefix_n
    # under TMA pairs a prefix whose copy pays is copied whole, dense ones too: each pair one bulk copy at a known place
    prefix_tma = tma_pairs and (densify or (densify is None and prefix_copy_pays(
        programs // h_kv, prefix_kind(k_mode, v_mode), h_kv, used, d, q.element_size())))
    if prefix_tma:
        densify = True
    elif not (k_mode | v_mode) & SPARSE:
        densify = False  # an all-dense prefix stays where it is
    elif densify is None:
        densify = prefill_densify(programs // h_kv, prefix_kind(k_mode, v_mode), h_kv, used, d, q.element_size())
    if densify:
        k_pool, v_pool, k_index, v_index = _densified(k_pool, v_pool, k_index, v_index, used, k_mode, v_mode, q.is_cuda,
                                                      every=prefix_tma)
        k_mode = v_mode = DENSE
    splits, per_split = prefill_split_plan(programs, prefix_len // BLOCK_SIZE, q.device, splits)
    part_out, part_lse = (out, lse) if splits == 1 else (
        torch.empty(t, h_q, splits, d, dtype=torch.float32, device=q.device),
        torch.empty(t, h_q, splits, dtype=torch.float32, device=q.device))
    k_index, v_index = _with_column(k_index), _with_column(v_index)
    k_tiles = v_tiles = None
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        k, v = (TensorDescriptor.from_tensor(x.view(t, h_kv * d), [chunk_n, d]) for x in (k, v))
        if prefix_tma:
            k_tiles, v_tiles = (TensorDescriptor.from_tensor(p.dense.view(-1, d), [prefix_n, d]) for p in (k_pool, v_pool))
    tp.prefill_kernel[(tiles, h_q // hg, splits)](
        q.contiguous(), k, v,
        _nonempty(k_pool.dense), _nonempty(k_pool.values), _nonempty(k_pool.meta),
        _nonempty(v_pool.dense), _nonempty(v_pool.values), _nonempty(v_pool.meta),
        k_index, v_index, k_tiles, v_tiles, part_out, part_lse, scale * LOG2E, t, prefix_len, k_index.shape[1], per_split,
        H_KV=h_kv, G=h_q // h_kv, D=d, BLOCK_M=block_m, HG=hg, K_MODE=k_mode, V_MODE=v_mode,
        PRMT=q.is_cuda, SELECT=select, SPLIT=splits > 1, CHUNK_N=chunk_n,
        PREFIX_N=prefix_n if k_mode == v_mode == DENSE else BLOCK_SIZE, TMA=tma, PREFIX_TMA=prefix_tma,
        num_warps=num_warps, num_stages=num_stages)
    if splits > 1:
        _merge_splits(part_out, part_lse, out, lse)
    return out, lse


def _densified(k_pool, v_pool, k_index, v_index, used: int, k_mode: int, v_mode: int, prmt: bool,
               every: bool = False):
    """``(k_pool, v_pool, k_index, v_index)`` with each operand that has 2:4 blocks (``every``: each
    operand) replaced by a pool holding its first ``used`` blocks of every KV head dense, at slot
    ``h * used + j``, and that index map (``triton_prefill.densify_kernel``); an all-dense operand is
    otherwise kept as it is."""
    from . import triton_prefill as tp
    from .triton_blocks import DENSE

    h_kv, nb = k_index.shape
    device = k_pool.dense.device
    shape = (h_kv * used, BLOCK_SIZE, k_pool.head_dim)
    k_copied, v_copied = every or k_mode != DENSE, every or v_mode != DENSE
    k_out = torch.empty(shape if k_copied else (1, *shape[1:]), dtype=k_pool.dtype, device=device)
    v_out = torch.empty(shape if v_copied else (1, *shape[1:]), dtype=v_pool.dtype, device=device)
    tp.densify_kernel[(used, h_kv)](
        _nonempty(k_pool.dense), _nonempty(k_pool.values), _nonempty(k_pool.meta),
        _nonempty(v_pool.dense), _nonempty(v_pool.values), _nonempty(v_pool.meta),
        k_index.contiguous(), v_index.contiguous(), k_out, v_out, nb, shape[-1], used * BLOCK_SIZE * shape[-1],
        D=k_pool.head_dim, K_MODE=k_mode, V_MODE=v_mode, PRMT=prmt, ALL=every, num_warps=4)
    index = _copy_index(h_kv, nb, used, device)
    out = []
    for pool, idx, copied, x in ((k_pool, k_index, k_copied, k_out), (v_pool, v_index, v_copied, v_out)):
        if not copied:
            out.append((pool, idx))
            continue
        values_shape, meta_shape = sparse_shapes(pool.operand, x.shape[-1])
        out.append((BlockPool(pool.operand, x, x.new_empty((0, *values_shape)),
                              torch.empty((0, *meta_shape), dtype=META_DTYPE, device=device)), index))
    (k_pool, k_index), (v_pool, v_index) = out
    return k_pool, v_pool, k_index, v_index


@functools.lru_cache(maxsize=64)
def _copy_index(h_kv: int, nb: int, used: int, device: torch.device) -> torch.Tensor:
    """The index map of ``_densified``'s copy, ``h * used + j`` for the first ``used`` of ``nb`` columns (the same width
    as a kept map: the prefill reads both with one row stride); kept, as a model's layers ask for the same one."""
    j = torch.arange(nb, dtype=torch.int32, device=device)
    return torch.where(j < used, torch.arange(h_kv, dtype=torch.int32, device=device)[:, None] * used + j, 0)


def streaming_supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether ``streaming_attention`` runs the GPU kernel for these inputs (else the reference)."""
    return (
        triton_available() and q.is_cuda and q.dim() == 4 and q.dtype in _DTYPES and q.shape[-1] in _HEAD_DIMS
        and k.dim() == 4 and k.dtype == q.dtype and v.dtype == q.dtype and k.shape[2] >= 1
        and q.shape[2] % k.shape[2] == 0 and q.shape[0] * q.shape[1] > 0
    )


def streaming_attention(q: torch.Tensor, q_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        k_pos: torch.Tensor, sink_tokens: int, window_tokens: int,
                        sm_scale: float | None = None, key_blocks: tuple[torch.Tensor, torch.Tensor] | None = None,
                        k_rows: torch.Tensor | None = None, splits: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``hs_kernels.attention.streaming_attention`` on the Triton kernel (``triton_stream``) where
    supported (CUDA float16/bfloat16, k and v in q's dtype, head_dim 64/128/256), else the reference.
    Keys may come in any order; the kernel skips 64-key blocks no query of a tile can see, so it is
    fastest when positions ascend along the keys (sink, then window, as the serving backend passes them).
    ``key_blocks``: ``stream_key_blocks(k_pos)``, given when many calls share ``k_pos`` (a model's layers).
    ``k_rows [B, N]`` (integer): k and v are storage ``[R, H_kv, D]`` holding key n of sequence b at row
    ``k_rows[b, n]`` (the kernel reads them in place; the reference gets them gathered, in q's dtype).
    ``splits``: the Triton kernel's key-block splits (``triton_streaming``; default ``stream_splits``)."""
    if k_rows is not None:
        if k.dim() != 3 or v.shape != k.shape or k.shape[0] == 0 or k_rows.dim() != 2 or k_rows.dtype.is_floating_point:
            raise ValueError(f"with k_rows [B, N] (integer), k and v must be [rows, H_kv, head_dim] storage; got "
                             f"{list(k.shape)}, {list(v.shape)}, {k_rows.dtype} {list(k_rows.shape)}")
        shape = (*k_rows.shape, *k.shape[1:])
        k_seen, v_seen = (x.as_strided(shape, (0, 0, *x.stride()[1:])) for x in (k, v))  # per-key shapes, no copy
        if streaming_supported(q, k_seen, v_seen):
            _ref._check_streaming(q, q_pos, k_seen, v_seen, k_pos, sink_tokens, window_tokens)
            return triton_streaming(q, q_pos, k, v, k_pos, sink_tokens, window_tokens, _ref._scale(sm_scale, q),
                                    key_blocks=key_blocks, k_rows=k_rows, splits=splits)
        k, v = k[k_rows.long()].to(q.dtype), v[k_rows.long()].to(q.dtype)
    if not streaming_supported(q, k, v):
        return _ref.streaming_attention(q, q_pos, k, v, k_pos, sink_tokens, window_tokens, sm_scale)
    _ref._check_streaming(q, q_pos, k, v, k_pos, sink_tokens, window_tokens)
    return triton_streaming(q, q_pos, k, v, k_pos, sink_tokens, window_tokens, _ref._scale(sm_scale, q),
                            key_blocks=key_blocks, splits=splits)


def stream_key_blocks(k_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per 64-key block of ``k_pos [B, N]``, the least and greatest position present (int32 ``[B, blocks]`` each;
    an empty block: int32 max and -1): the streaming kernel skips blocks outside what a tile's queries see."""
    b, n = k_pos.shape
    n_blocks = -(-n // BLOCK_SIZE)
    kp = torch.nn.functional.pad(k_pos.to(torch.int32), (0, n_blocks * BLOCK_SIZE - n), value=-1).view(b, n_blocks, -1)
    return torch.where(kp >= 0, kp, torch.iinfo(torch.int32).max).amin(-1), kp.amax(-1)


def triton_streaming(q, q_pos, k, v, k_pos, sink_tokens: int, window_tokens: int, scale: float,
                     block_m: int | None = None, num_warps: int = 4, num_stages: int = 2, out=None, lse=None,
                     key_blocks=None, k_rows=None, splits: int | None = None):
    """Launch the Triton streaming kernel on checked inputs (also under Triton's CPU interpreter).
    ``block_m``: rows (query token x query head of a group) per program, a power of two >= 16;
    default: the rows of the call up to 128. ``out [B, T, H_q, D]`` / ``lse [B, T, H_q]`` float32:
    optional output buffers (tests pass poisoned ones). ``key_blocks``, ``k_rows``: as ``streaming_attention``'s.
    ``splits``: the key blocks split among that many programs per tile, their partials merged (``_merge_splits``);
    default ``stream_splits`` on CUDA, 1 elsewhere."""
    from . import triton_stream as ts
    from .triton_blocks import LOG2E

    b, t, h_q, d = q.shape
    n, h_kv = k_pos.shape[1], k.shape[-2]
    g = h_q // h_kv
    block_m = block_m or stream_rows(t, g)
    tiles = -(-t * g // block_m)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    lse = torch.empty(b, t, h_q, dtype=torch.float32, device=q.device) if lse is None else lse
    block_lo, block_hi = key_blocks if key_blocks is not None else stream_key_blocks(k_pos)
    n_blocks = block_lo.shape[1]
    if splits is None:
        splits = stream_splits(tiles * h_kv * b, n_blocks, _sm_count(q.device)) if q.is_cuda else 1
    splits, per_split = even_split(n_blocks, splits)
    o_dst, l_dst = (out, lse) if splits == 1 else (
        torch.empty(b, t, h_q, splits, d, dtype=torch.float32, device=q.device),
        torch.empty(b, t, h_q, splits, dtype=torch.float32, device=q.device))
    ts.stream_kernel[(tiles, h_kv, b * splits)](
        q.contiguous(), q_pos.to(torch.int32).contiguous(), k.contiguous(), v.contiguous(), k_pos.to(torch.int32).contiguous(),
        k_pos if k_rows is None else k_rows.contiguous(), block_lo.contiguous(), block_hi.contiguous(), o_dst, l_dst,
        scale * LOG2E, t, n, n_blocks, splits, per_split, sink_tokens, window_tokens, H_KV=h_kv, G=g, D=d,
        BLOCK_M=block_m, ROWS=k_rows is not None, SPLIT=splits > 1, num_warps=num_warps, num_stages=num_stages)
    if splits > 1:
        _merge_splits(o_dst.view(b * t, h_q, splits, d), l_dst.view(b * t, h_q, splits), out.view(b * t, h_q, d),
                      lse.view(b * t, h_q), dependent=q.is_cuda and _sm_major(q.device) >= 9)
    return out, lse


def stream_splits(programs: int, blocks: int, sms: int) -> int:
    """Splits of the key blocks for a streaming call of ``programs`` (row tiles x KV heads x sequences): where the
    programs leave SMs idle (a decode step: one tile per KV head and sequence walks its sink and window alone), as
    many as fill them once, at most one a block; else 1."""
    return 1 if programs >= sms else max(1, min(blocks, sms // programs))


def write_tokens(k: torch.Tensor, v: torch.Tensor, locs: torch.Tensor, heads: torch.Tensor, k_slots: torch.Tensor,
                 v_slots: torch.Tensor, k_dest: torch.Tensor, v_dest: torch.Tensor,
                 errors: torch.Tensor | None = None) -> None:
    """``hs_kernels.store.write_tokens`` on the Triton kernel (``triton_store``: one launch for K and V) for CUDA
    tensors with an ``errors`` flag and contiguous rows, else the reference."""
    _store.check_write(k, v, locs, heads, k_slots, v_slots, k_dest, v_dest)
    if not (triton_available() and k.is_cuda and errors is not None
            and all(x.stride(-1) == 1 for x in (k, v, k_dest, v_dest))):
        return _store.write_tokens(k, v, locs, heads, k_slots, v_slots, k_dest, v_dest, errors)
    triton_write(k, v, locs, heads, k_slots, v_slots, k_dest, v_dest, errors)


def triton_write(k, v, locs, heads, k_slots, v_slots, k_dest, v_dest, errors) -> None:
    """Launch the Triton write kernel on checked inputs (also under Triton's CPU interpreter)."""
    from . import triton_store as tw

    t, n, d = locs.shape[0], heads.shape[0], k.shape[-1]
    if t == 0 or n == 0:
        return
    # a one-column table holds one slot for all heads, a one-wide destination one slot per head: stride 0
    ks_h, vs_h = (t_.stride(1) if t_.shape[1] > 1 else 0 for t_ in (k_slots, v_slots))
    kd_e, vd_e = (x.stride(2) if x.shape[2] > 1 else 0 for x in (k_dest, v_dest))
    tw.write_kernel[(t, n)](locs, heads, k, v, k_slots, v_slots, k_dest, v_dest, errors,
                            k.stride(0), k.stride(1), v.stride(0), v.stride(1), k_slots.stride(0), ks_h,
                            v_slots.stride(0), vs_h, k_dest.stride(0), k_dest.stride(1), kd_e,
                            v_dest.stride(0), v_dest.stride(1), vd_e, D=d, BLOCK_D=_next_pow2(d))


def stream_rows(t: int, group: int, cap: int = 128) -> int:
    """Rows of a streaming tile for ``t`` query tokens of a ``group``-head KV group: a power of two,
    at least 16, at most ``cap``."""
    return min(cap, max(16, _next_pow2(t * group)))


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


_COMPRESS_BITS = {torch.float16: (16, 0x7C00), torch.bfloat16: (16, 0x7F80), torch.float32: (32, 0x7F800000)}


def compress_magnitude(blocks: torch.Tensor, operand: str, values: torch.Tensor | None = None,
                       meta: torch.Tensor | None = None,
                       slots: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused magnitude pruner + compressor for token-major blocks ``[N, 64, D]`` of ``operand``.

    Equals ``mask = element_mask(blocks, operand)``; ``compress_blocks(blocks, mask, operand)``;
    ``block_loss(blocks, mask)``. With ``values``/``meta`` (a sparse pool's tensors, e.g.
    ``BlockPool.values``/``.meta``) and ``slots [N]`` int32, block ``n`` is written to slot
    ``slots[n]`` (not at all where ``slots[n] < 0``: a loss-only pass); without them, fresh
    ``[N, ...]`` tensors are returned. Returns ``(values, meta, loss [N] float32)``.
    On CUDA the Triton kernel runs (``triton_compress``), off CUDA the reference. No host sync:
    slots are not range-checked on the GPU path (they must be < the pool's slot count).
    """
    check_operand(operand)
    d = check_blocks(blocks, "blocks")
    if blocks.dim() != 3:
        raise ValueError(f"blocks must have shape [N, {BLOCK_SIZE}, head_dim], got {list(blocks.shape)}")
    n = blocks.shape[0]
    vshape, mshape = sparse_shapes(operand, d)
    if values is None:
        values, meta, slots = _fresh_slots(n, operand, d, blocks.dtype, blocks.device)
    elif meta is None or slots is None:
        raise ValueError("values, meta and slots must be given together")
    elif (values.shape[1:] != vshape or meta.shape[1:] != mshape or values.dtype != blocks.dtype
          or meta.dtype != META_DTYPE or slots.shape != (n,)):
        raise ValueError(f"values [S, {', '.join(map(str, vshape))}] {blocks.dtype}, meta [S, "
                         f"{', '.join(map(str, mshape))}] int16 and slots [{n}] expected, got {list(values.shape)} "
                         f"{values.dtype}, {list(meta.shape)} {meta.dtype}, {list(slots.shape)}")
    if not (triton_available() and blocks.is_cuda) or n == 0:
        mask = element_mask(blocks, operand)
        sel = slots >= 0
        if sel.any():
            values[slots[sel].long()], meta[slots[sel].long()] = compress_blocks(blocks[sel], mask[sel], operand)
        return values, meta, block_loss(blocks, mask)
    loss = torch.empty(n, dtype=torch.float32, device=blocks.device)
    triton_compress(blocks.contiguous(), operand, slots.to(torch.int32).contiguous(), values, meta, loss)
    return values, meta, loss


def triton_compress(blocks, operand: str, slots, values, meta, loss, num_warps: int = 4) -> None:
    """Launch the Triton compressor on checked inputs (also under Triton's CPU interpreter): ``blocks [N, 64, D]``
    contiguous, or ``[H, C, 64, D]`` whose block ``(h, c)`` is block ``h C + c`` (any strides but the last); 4 warps
    measured fastest on the H200."""
    from . import triton_compress as tc

    bits, inf = _COMPRESS_BITS[blocks.dtype]
    tiles = blocks if blocks.dim() == 4 else blocks[None]
    tc.compress_kernel[tiles.shape[1], tiles.shape[0]](
        tiles, slots, _nonempty(values), _nonempty(meta), loss, *tiles.stride()[:3], D=blocks.shape[-1],
        IS_K=operand == "k", IN_PLACE=blocks.dim() == 4, BITS=bits, ABS=(1 << (bits - 1)) - 1, INF=inf,
        num_warps=num_warps)


def _tiles(x: torch.Tensor, operand: str, tiles: int, start: int) -> torch.Tensor:
    """The ``tiles`` 64-token tiles of ``x [T, H, D]`` from token ``start`` as token-major blocks ``[H, tiles, 64, D]``
    (a view), checked."""
    check_operand(operand)
    if x.dim() != 3 or not 0 <= start <= start + tiles * BLOCK_SIZE <= x.shape[0]:
        raise ValueError(f"x [T, H, D] must hold {tiles} tiles of {BLOCK_SIZE} tokens from token {start}, got "
                         f"{list(x.shape)}")
    blocks = x[start:start + tiles * BLOCK_SIZE].unflatten(0, (tiles, BLOCK_SIZE)).permute(2, 0, 1, 3)
    check_blocks(blocks, "x")
    return blocks


def _triton_tiles(x: torch.Tensor) -> bool:
    return _gpu_allowed() and x.is_cuda and triton_available() and x.stride(-1) == 1


def tile_loss(x: torch.Tensor, operand: str, tiles: int, start: int = 0) -> torch.Tensor:
    """``block_loss(blocks, element_mask(blocks, operand))`` of the ``tiles`` 64-token tiles of ``x [T, H, D]`` from
    token ``start``: float32 ``[H, tiles]``. One Triton launch on the GPU (``triton_prune``), else the reference."""
    blocks = _tiles(x, operand, tiles, start)
    if not _triton_tiles(x) or not blocks.numel():
        return block_loss(blocks, element_mask(blocks, operand))
    loss = torch.empty(blocks.shape[:2], dtype=torch.float32, device=x.device)
    triton_prune(x[start:], operand, None, None, loss)
    return loss


def compress_tiles(x: torch.Tensor, operand: str, tiles: int,
                   start: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``compress_magnitude`` of the ``tiles`` 64-token tiles of ``x [T, H, D]`` from token ``start``, tile ``c`` of
    head ``h`` as block ``h tiles + c``: ``(values, meta, loss [H, tiles])``. One Triton launch on the GPU, reading the
    tiles in place (no copy of ``x``), else the reference."""
    blocks = _tiles(x, operand, tiles, start)
    if not _triton_tiles(x) or not blocks.numel():
        values, meta, loss = compress_magnitude(blocks.reshape(-1, *blocks.shape[2:]), operand)
        return values, meta, loss.view(blocks.shape[:2])
    values, meta, slots = _fresh_slots(blocks.shape[0] * tiles, operand, x.shape[-1], x.dtype, x.device)
    loss = torch.empty(blocks.shape[:2], dtype=torch.float32, device=x.device)
    triton_compress(blocks, operand, slots, values, meta, loss, compress_tiles_warps(x.shape[-1]))
    return values, meta, loss


def compress_tiles_warps(head_dim: int) -> int:
    """``compress_tiles``' warps: 4, as a pool's blocks take; 8 at head_dim 256, where 4 spill with the strides' address
    registers (``python -m hs_kernels.resources``)."""
    return 8 if head_dim == 256 else 4


def _fresh_slots(n: int, operand: str, d: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, ...]:
    """Sparse values and metadata for ``n`` blocks, and the slots ``0 .. n - 1`` that put block ``i`` in slot ``i``."""
    vshape, mshape = sparse_shapes(operand, d)
    return (torch.empty((n, *vshape), dtype=dtype, device=device),
            torch.empty((n, *mshape), dtype=META_DTYPE, device=device),
            torch.arange(n, dtype=torch.int32, device=device))


def prune_tiles(x: torch.Tensor, operand: str, sparse: torch.Tensor, start: int = 0) -> torch.Tensor:
    """A contiguous copy of ``x [T, H, D]`` whose tiles chosen by ``sparse`` (bool ``[H, tiles]``: tile ``c`` of head
    ``h`` is tokens ``start + 64 c`` to ``start + 64 c + 63``) have their 2:4 magnitude-pruned elements
    (``element_mask``) zeroed. One copy and one Triton launch on the GPU (``triton_prune``), else the reference."""
    blocks = _tiles(x, operand, sparse.shape[-1], start)
    if sparse.shape != blocks.shape[:2] or sparse.dtype != torch.bool:
        raise ValueError(f"sparse must be bool [{', '.join(map(str, blocks.shape[:2]))}], got {sparse.dtype} "
                         f"{list(sparse.shape)}")
    out = x.clone(memory_format=torch.contiguous_format)
    if not _triton_tiles(x) or not sparse.numel():
        pruned = torch.where(sparse[..., None, None] & ~element_mask(blocks, operand), 0, blocks)
        out[start:start + pruned.shape[1] * BLOCK_SIZE] = pruned.permute(1, 2, 0, 3).flatten(0, 1)
        return out
    triton_prune(x[start:], operand, sparse.contiguous().view(torch.uint8), out[start:], None)
    return out


def triton_prune(x, operand: str, sparse, out, loss) -> None:
    """Launch ``prune_kernel`` (also under Triton's CPU interpreter) over the tiles of ``x [T, H, D]`` from its first
    token: with ``sparse`` (uint8 ``[H, tiles]``) and ``out`` (contiguous, x's copy), the chosen tiles pruned in
    ``out``; else their losses into ``loss`` (float32 ``[H, tiles]``)."""
    from . import triton_compress as tc

    bits, inf = _COMPRESS_BITS[x.dtype]
    apply = sparse is not None
    tiles = (sparse if apply else loss).shape[1]
    if apply:  # the pass's unused operand is a placeholder the kernel never touches
        loss = _placeholder((1,), torch.float32, x.device)
    else:
        sparse, out = _placeholder((1,), torch.uint8, x.device), _placeholder((1,), x.dtype, x.device)
    tc.prune_kernel[(tiles, x.shape[1])](x, sparse, out, loss, tiles, x.stride(0), x.stride(1), D=x.shape[-1],
                                         IS_K=operand == "k", APPLY=apply, BITS=bits, ABS=(1 << (bits - 1)) - 1, INF=inf)


__all__ = ["triton_available", "decode_supported", "decode_attention", "prefill_supported",
           "prefill_attention", "streaming_supported", "streaming_attention", "compress_magnitude", "compress_tiles",
           "tile_loss", "prune_tiles", "triton_decode_splits", "cuda_decode_splits"]
