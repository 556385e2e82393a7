"""Compile a CUDA source of ``hs_kernels/cuda`` into a shared library with the machine's ``nvcc``, once.

Libraries go to ``$HS_KERNELS_CACHE`` (default ``~/.cache/hs_kernels``) under a name that hashes the source, the
architecture and the macros; each is written to a temporary name, then renamed, so that concurrent builds never load
half a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path


def find() -> str | None:
    """``$CUDA_HOME/bin/nvcc`` (or ``$CUDA_PATH``'s) where it exists, else the one on ``PATH``."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(home) / "bin" / "nvcc" if home else None
    return str(candidate) if candidate and candidate.exists() else shutil.which("nvcc")


def command(source: Path, arch: str, output: Path, *extra: str, defines: tuple[str, ...] = ()) -> list[str]:
    """The nvcc command that compiles ``source`` for ``arch`` (e.g. "sm_90a") into ``output`` (``extra``: the output
    kind and any reporting flags; ``defines``: macros, "NAME" or "NAME=VALUE")."""
    nvcc = find()
    if nvcc is None:
        raise RuntimeError(f"nvcc not found (set CUDA_HOME): needed to build {source.name}")
    return [nvcc, "-O3", "-gencode", f"arch=compute_{arch[3:]},code={arch}", "-std=c++17",
            *(f"-D{d}" for d in defines), *extra, "-o", str(output), str(source)]


def library(source: Path, arch: str, defines: tuple[str, ...] = (), cache: Path | None = None) -> Path:
    """The shared library of ``source`` for ``arch`` with ``defines``, compiled unless already in ``cache``."""
    key = hashlib.sha256(source.read_bytes() + repr((arch, defines)).encode()).hexdigest()[:16]
    cache = cache or Path(os.environ.get("HS_KERNELS_CACHE", Path.home() / ".cache" / "hs_kernels"))
    so = cache / f"{source.stem}-{arch}-{key}.so"
    if so.exists():
        return so
    tmp = so.with_name(f"{so.name}.{os.getpid()}.tmp")
    cmd = command(source, arch, tmp, "-shared", "-Xcompiler", "-fPIC", defines=defines)
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"nvcc failed building {source.name}: {proc.stderr.strip()[-2000:]}")
    os.replace(tmp, so)
    return so
