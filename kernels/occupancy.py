"""Programs of a compiled Triton kernel that one SM runs at once, from CUDA's occupancy calculator
(its registers, shared memory and warps as compiled for this GPU): the residency that
``gpu.wave_splits`` needs."""

import ctypes
import functools


@functools.lru_cache(maxsize=None)
def _libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuOccupancyMaxActiveBlocksPerMultiprocessor.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                                                 ctypes.c_int, ctypes.c_size_t]
    return lib


def resident_per_sm(compiled) -> int:
    """``compiled``: a Triton ``CompiledKernel`` (``kernel.warmup(...)``), loaded on the current device here."""
    compiled._init_handles()
    n = ctypes.c_int(0)
    rc = _libcuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(n), compiled.function, 32 * compiled.metadata.num_warps, compiled.metadata.shared)
    if rc or n.value <= 0:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed for {compiled.name} (CUresult {rc})")
    return n.value
