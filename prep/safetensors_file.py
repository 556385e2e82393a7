"""Reading safetensors headers ourselves (validated, no pickle) and streaming files with per-tensor edits.

Streaming byte ranges keeps peak memory at one tensor: untouched tensors are copied by the kernel,
never mapped into this process.
"""
import json
import math
import os
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

from hs_prep.errors import PrepError

ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
            "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
FLOAT_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": None}
MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute file offset
    end: int


@dataclass(frozen=True)
class SafetensorsFile:
    path: str
    header: bytes  # the 8-byte length prefix and the JSON, copied verbatim into outputs
    tensors: dict[str, TensorEntry]

    @property
    def data_start(self) -> int:
        return len(self.header)

    def raw(self, name: str) -> bytes:
        entry = self.tensors[name]
        with open(self.path, "rb") as f:
            f.seek(entry.start)
            data = f.read(entry.end - entry.start)
        if len(data) != entry.end - entry.start:
            raise PrepError(f"{self.path}: truncated while reading {name}")
        return data

    def read_float64(self, name: str) -> np.ndarray:
        """A floating-point tensor as a float64 array (bf16 widened exactly through its float32 bits)."""
        entry = self.tensors[name]
        if entry.dtype not in FLOAT_DTYPES:
            raise PrepError(f"{self.path}: {name} has dtype {entry.dtype}, not a float type")
        raw = self.raw(name)
        if entry.dtype == "BF16":
            values = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, FLOAT_DTYPES[entry.dtype])
        return values.astype(np.float64).reshape(entry.shape)


def open_safetensors(path: str) -> SafetensorsFile:
    """Parse and validate a header: offsets contiguous, sizes consistent, file exactly as long as declared."""
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise PrepError(f"{name}: not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", prefix)
            if n > min(MAX_HEADER, size - 8):
                raise PrepError(f"{name}: corrupt safetensors header (declared length {n}, file size {size})")
            raw = f.read(n)
    except OSError as e:
        raise PrepError(f"cannot read {path}: {e.strerror}") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise PrepError(f"{name}: corrupt safetensors header (not JSON)") from None
    if not isinstance(header, dict):
        raise PrepError(f"{name}: corrupt safetensors header")
    data_start = 8 + n
    tensors, spans = {}, []
    for tname, info in header.items():
        if tname == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = info["dtype"], tuple(int(d) for d in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise PrepError(f"{name}: corrupt safetensors entry for {tname}") from None
        if dtype in ITEMSIZE and (e - b) != math.prod(shape) * ITEMSIZE[dtype]:
            raise PrepError(f"{name}: {tname} declares {e - b} bytes for shape {list(shape)} {dtype}")
        tensors[tname] = TensorEntry(tname, dtype, shape, data_start + b, data_start + e)
        spans.append((b, e))
    spans.sort()
    cursor = 0
    for b, e in spans:
        if b != cursor or e < b:
            raise PrepError(f"{name}: corrupt safetensors offsets (gap or overlap at byte {b})")
        cursor = e
    if data_start + cursor != size:
        what = "truncated" if data_start + cursor > size else "has trailing bytes"
        raise PrepError(f"{name}: file is {what} ({size} bytes, header declares {data_start + cursor})")
    return SafetensorsFile(path, prefix + raw, tensors)


def rewrite(src: SafetensorsFile, dst_path: str, edits: dict[str, Callable[[bytes], memoryview]]) -> None:
    """Write src to dst_path with the same header; tensors named in edits get their bytes transformed."""
    ordered = sorted(src.tensors.values(), key=lambda t: t.start)
    with open(src.path, "rb") as fin, open(dst_path, "wb") as fout:
        fout.write(src.header)
        pos = src.data_start
        for entry in ordered:
            if entry.name not in edits:
                continue
            _copy_range(fin, fout, pos, entry.start)
            fin.seek(entry.start)
            data = edits[entry.name](fin.read(entry.end - entry.start))
            if data.nbytes != entry.end - entry.start:
                raise AssertionError(f"edit of {entry.name} changed its size")
            fout.write(data)
            pos = entry.end
        _copy_range(fin, fout, pos, os.fstat(fin.fileno()).st_size)


def _copy_range(fin, fout, start: int, end: int) -> None:
    fout.flush()
    try:
        while start < end:
            done = os.copy_file_range(fin.fileno(), fout.fileno(), end - start, start)
            if done == 0:
                raise PrepError(f"{fin.name}: unexpected end of file")
            start += done
    except OSError:  # filesystems without copy_file_range: copy through user space
        fout.seek(0, os.SEEK_END)
        fin.seek(start)
        while start < end:
            chunk = fin.read(min(end - start, 64 << 20))
            if not chunk:
                raise PrepError(f"{fin.name}: unexpected end of file") from None
            fout.write(chunk)
            start += len(chunk)
    fout.seek(0, os.SEEK_END)
