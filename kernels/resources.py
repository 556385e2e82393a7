"""Registers, local-memory spills and shared memory of the shipped GPU kernel variants, compiled for
sm_90 on any machine with ``nvcc`` (no GPU needed): the Triton kernels through ``triton.compile`` and
``ptxas -v`` on their PTX, the CUDA decode and prefill through ``nvcc -Xptxas -v``. A spill is a slowdown that
no CPU test sees otherwise (a TileLang prefill, since removed, once spilled 8-10 KB per thread unnoticed).

    python -m hs_kernels.resources
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ARCH = 90
MAX_SHARED = 227 * 1024  # sm_90's largest shared memory per block (opt-in): a variant above cannot launch

# Known spills, bytes per thread (stores + loads); anything else must not spill at all. A launch change is made on
# device figures, not on this check: spill-free (or nearly) candidates here are 8 warps for the streaming kernel at 128
# rows (d 128: 207 registers; measured slower) and at d 256 / 64 rows, 4 warps for the d 256 decode, 8 warps for
# compressing d 256 V, 8 warps for the d 256 prefill (0-136 bytes).
KNOWN_SPILLS = {"stream d128 rows 128": 612, "stream d256 rows 64": 716, "stream d256 rows 128": 5336,
                # the same kernel reading keys through the pool's rows (serving)
                "stream d128 rows 128 in place": 504, "stream d256 rows 64 in place": 704,
                "stream d256 rows 128 in place": 5340,
                "decode d256 K1 V1": 8, "decode d256 K3 V3": 3202, "compress v d256": 2300,
                "decode d256 K3 V3 paged": 3096,  # the maps read through the pages
                "decode d256 K3 V3 paged, 8 rows a program": 236,  # 32 tile rows, the fewest that pack
                "prefill d256 K1 V1": 248, "prefill d256 K1 V1 split": 224, "prefill d256 K2 V2": 112,
                "prefill d256 K2 V2 split": 164, "prefill d256 K3 V3": 3248, "prefill d256 K3 V3 split": 3332,
                "prefill d256 K1 V1 TMA": 180, "prefill d256 K2 V2 TMA": 88, "prefill d256 K3 V3 TMA": 3172,
                # its spill costs no measured time; chunks from gpu.TMA_MIN_TOKENS take its spill-free TMA twin
                "prefill d128 one shot": 96,
                # the CUDA Trans-Both prefill at 160 registers per consumer thread (setmaxnreg; GQA 4 timed as it is);
                # dense keys (Q's fragments in registers): one reload per block from GQA 8
                "cuda prefill G4 K sparse": 8, "cuda prefill G1 K sparse": 116, "cuda prefill G1 K dense": 12,
                "cuda prefill G8 K dense": 16, "cuda prefill G16 K dense": 16, "cuda prefill G64 K dense": 16,
                # GQA ratios not dividing 64; odd ones test the causal mask per row, as G 1 does
                "cuda prefill G3 K sparse": 172, "cuda prefill G7 K sparse": 172, "cuda prefill G7 K dense": 16,
                # fp16: 2:4 keys spill as bf16 does (G 6: 8 bytes more), dense keys 16 bytes
                "cuda prefill G1 K sparse fp16": 116, "cuda prefill G3 K sparse fp16": 172,
                "cuda prefill G6 K sparse fp16": 8, "cuda prefill G7 K sparse fp16": 172,
                **{f"cuda prefill G{g} K dense fp16": 16 for g in (1, 2, 3, 4, 6, 7, 8, 16, 64)}}


@dataclass(frozen=True)
class Variant:
    """One compiled form of a Triton kernel: argument types (pointers ``*bf16`` ..., scalars
    ``i32`` / ``fp32``), the constexpr values and the launch options serving uses."""
    name: str
    module: str
    kernel: str
    types: dict
    constexprs: dict
    num_warps: int
    num_stages: int = 2


@dataclass(frozen=True)
class Usage:
    name: str
    registers: int
    spill_bytes: int  # stores + loads
    shared_bytes: int | None  # Triton's shared memory; None where not read (the CUDA decode uses none)


def _decode_types() -> dict:
    ptrs = dict.fromkeys(("q_ptr", "k_dense", "k_vals", "v_dense", "v_vals"), "*bf16")
    return {**ptrs, "k_meta": "*i16", "v_meta": "*i16", "k_index": "*i32", "v_index": "*i32", "seq_lens": "*i32",
            "pages": "*i32", "groups": "*i32", "o_part": "*fp32", "lse_part": "*fp32", "scale_log2": "fp32",
            "max_blocks": "i32", "splits": "i32", "batch": "i32"}


def _prefill_types() -> dict:
    ptrs = dict.fromkeys(("q_ptr", "k_ptr", "v_ptr", "k_dense", "k_vals", "v_dense", "v_vals", "out_ptr"), "*bf16")
    return {**ptrs, "k_meta": "*i16", "v_meta": "*i16", "k_index": "*i32", "v_index": "*i32", "lse_ptr": "*fp32",
            "scale_log2": "fp32", "t_len": "i32", "prefix_len": "i32", "nb": "i32", "per_split": "i32"}


def _stream_types() -> dict:
    return {"q_ptr": "*bf16", "qpos_ptr": "*i32", "k_ptr": "*bf16", "v_ptr": "*bf16", "kpos_ptr": "*i32", "rows_ptr": "*i64",
            "block_lo": "*i32", "block_hi": "*i32", "out_ptr": "*bf16", "lse_ptr": "*fp32", "scale_log2": "fp32",
            **dict.fromkeys(("t_len", "n_keys", "n_blocks", "splits", "per_split", "sink", "window"), "i32")}


def _defaults(launcher, *names) -> list:
    """The launch options' defaults of a ``hs_kernels.gpu`` launcher (what serving uses)."""
    import inspect

    params = inspect.signature(launcher).parameters
    return [params[n].default for n in names]


def variants() -> list[Variant]:
    """The Triton variants serving launches for Llama-3.1-8B shapes (32/8 heads, bf16), at head_dim 128
    and the other supported head_dims, with the launchers' default options (``hs_kernels.gpu``)."""
    from . import gpu

    decode_warps, = _defaults(gpu.triton_decode, "num_warps")
    stream_warps, stream_stages = _defaults(gpu.triton_streaming, "num_warps", "num_stages")
    compress_warps, = _defaults(gpu.triton_compress, "num_warps")
    out = []
    for d in (64, 128, 256):
        for k_mode, v_mode in ((1, 1), (2, 2), (3, 3)):
            for paged in (False, True):  # serving reads its pool's maps through the pages
                out.append(Variant(f"decode d{d} K{k_mode} V{v_mode}{' paged' if paged else ''}", "triton_decode",
                                   "decode_kernel", _decode_types(), dict(H_KV=8, G=4, BLOCK_H=16, D=d, K_MODE=k_mode,
                                                                          V_MODE=v_mode, PRMT=True, PAGED=paged, ROWS=1),
                                   *gpu.decode_launch(1, d, decode_warps)))
        rows = gpu.decode_tile_rows(4, d)  # an extend's tokens as grouped decode rows (short extends)
        out.append(Variant(f"decode d{d} K3 V3 paged, {rows} rows a program", "triton_decode", "decode_kernel",
                           _decode_types(), dict(H_KV=8, G=4, BLOCK_H=4 * rows, D=d, K_MODE=3, V_MODE=3, PRMT=True,
                                                 PAGED=True, ROWS=rows), *gpu.decode_launch(rows, d, decode_warps)))
        combine = {"o_part": "*fp32", "lse_part": "*fp32", "out": "*bf16", "lse_out": "*fp32", "rows": "i32",
                   "splits": "i32", "o_row": "i32", "o_split": "i32", "l_row": "i32", "l_split": "i32"}
        for dependent in (False, True):  # the CUDA decode's combine on sm_90 is a programmatic dependent
            out.append(Variant(f"combine d{d}{' dependent' if dependent else ''}", "triton_decode", "combine_kernel",
                               {a: t for a, t in combine.items() if a != "rows"},
                               dict(D=d, SPLITS_P2=32, DEPENDENT=dependent), 4))  # default launch
        out.append(Variant(f"combine rows d{d}", "triton_decode", "combine_rows_kernel", dict(combine, o_part="*bf16"),
                           dict(D=d, SPLITS_P2=32, ROWS=gpu.COMBINE_ROWS), 4))  # a prefill's merge, the most rows
        for block_m in (64, 128):  # a short call's rows, and a chunk's (the launcher's cap); serving reads in place
            for in_place in (False, True):
                out.append(Variant(f"stream d{d} rows {block_m}{' in place' if in_place else ''}", "triton_stream",
                                   "stream_kernel", _stream_types(),
                                   dict(H_KV=8, G=4, D=d, BLOCK_M=block_m, ROWS=in_place, SPLIT=False), stream_warps, stream_stages))
        out.append(Variant(f"stream d{d} decode split", "triton_stream", "stream_kernel", _stream_types(),  # serving's decode
                           dict(H_KV=4, G=4, D=d, BLOCK_M=16, ROWS=True, SPLIT=True), stream_warps, stream_stages))
        out.append(Variant(f"write d{d}", "triton_store", "write_kernel",
                           {"locs": "*i64", "heads": "*i32", "k": "*bf16", "v": "*bf16", "k_slots": "*i32", "v_slots": "*i32",
                            "k_dest": "*bf16", "v_dest": "*bf16", "errors": "*i32",
                            **dict.fromkeys(("k_st", "k_sh", "v_st", "v_sh", "ks_p", "ks_h", "vs_p", "vs_h", "kd_s", "kd_r",
                                             "kd_e", "vd_s", "vd_r", "vd_e"), "i64")},
                           dict(D=d, BLOCK_D=d), 4))  # Triton's default launch
        for operand in ("k", "v"):
            for in_place in (False, True):  # a pool's blocks, or a chunk's tiles read in place (compress_tiles)
                out.append(Variant(f"compress {operand} d{d}{' in place' if in_place else ''}", "triton_compress",
                                   "compress_kernel",
                                   {"blocks": "*bf16", "slots": "*i32", "values": "*bf16", "meta": "*i16",
                                    "loss": "*fp32", **dict.fromkeys(("stride_h", "stride_c", "stride_t"), "i32")},
                                   dict(D=d, IS_K=operand == "k", IN_PLACE=in_place, BITS=16, ABS=0x7FFF, INF=0x7F80),
                                   gpu.compress_tiles_warps(d) if in_place else compress_warps))
            for apply in (True, False):  # a chunk's tiles pruned, or their losses
                out.append(Variant(f"prune {operand} d{d}{'' if apply else ' loss'}", "triton_compress", "prune_kernel",
                                   {"x": "*bf16", "sparse": "*u8", "out": "*bf16", "loss": "*fp32", "tiles": "i32",
                                    "stride_t": "i32", "stride_h": "i32"},
                                   dict(D=d, IS_K=operand == "k", APPLY=apply, BITS=16, ABS=0x7FFF, INF=0x7F80), 4))
    for d in (64, 128, 256):
        prefill_rows, prefill_warps, prefill_stages = gpu.prefill_launch(d)
        hg = gpu.prefill_tiles(1, 32, 8, prefill_rows)[0]

        def prefill(name, chunk_n, tma=False, prefix_tma=False, **modes):
            types = _prefill_types()
            tiles = dict(k_tiles=None, v_tiles=None)
            if tma:  # the chunk's K and V as tensor descriptors of chunk_n x d tiles
                types.update(dict.fromkeys(("k_ptr", "v_ptr"), f"tensordesc<bf16[{chunk_n}, {d}]>"))
            if prefix_tma:  # and the gathered prefix's, of block pairs
                types.update(dict.fromkeys(("k_tiles", "v_tiles"), f"tensordesc<bf16[128, {d}]>"))
                tiles = {}
            return Variant(f"prefill d{d} {name}{' TMA' if tma else ''}", "triton_prefill", "prefill_kernel", types,
                           dict(H_KV=8, G=4, D=d, BLOCK_M=prefill_rows, PRMT=True, SELECT=False, HG=hg, CHUNK_N=chunk_n,
                                TMA=tma, PREFIX_TMA=prefix_tma, **tiles, **{"SPLIT": False, "PREFIX_N": 64, **modes}),
                           prefill_warps, prefill_stages)

        one_shot_n, after_prefix_n = gpu.prefill_chunk_n(0, prefill_rows), gpu.prefill_chunk_n(1, prefill_rows)
        long_n = gpu.prefill_chunk_n(1, prefill_rows, tma=True)
        if one_shot_n != after_prefix_n:  # else K1 V1 below
            out += [prefill("one shot", one_shot_n, tma, K_MODE=1, V_MODE=1) for tma in (False, True)]
            out.append(prefill("K1 V1 prefix 128", 64, K_MODE=1, V_MODE=1, PREFIX_N=128))
        for k_mode, v_mode in ((1, 1), (2, 2), (3, 3)):
            for split in (False, True):
                out.append(prefill(f"K{k_mode} V{v_mode}{' split' if split else ''}", after_prefix_n, K_MODE=k_mode,
                                   V_MODE=v_mode, SPLIT=split))
            out.append(prefill(f"K{k_mode} V{v_mode}", long_n, True, K_MODE=k_mode, V_MODE=v_mode))  # long chunks
        if gpu.prefill_prefix_n(prefill_rows) == 128:  # long chunks (TMA) after a densified prefix, or a dense one
            out.append(prefill("K1 V1 prefix 128 densified", long_n, True, True, K_MODE=1, V_MODE=1, PREFIX_N=128))
            out.append(prefill("K1 V1 prefix 128", long_n, True, K_MODE=1, V_MODE=1, PREFIX_N=128))
        densify_types = {**dict.fromkeys(("k_dense", "k_vals", "v_dense", "v_vals", "k_out", "v_out"), "*bf16"),
                         "k_meta": "*i16", "v_meta": "*i16", "k_index": "*i32", "v_index": "*i32",
                         "nb": "i32", "tok_stride": "i32", "head_stride": "i32"}
        # launched only when an operand has 2:4 blocks; (2, 1), (3, 1): a prefix's keys alone (gpu.prefix_keys)
        for k_mode, v_mode in ((1, 2), (2, 2), (3, 3), (2, 1), (3, 1)):
            out.append(Variant(f"densify d{d} K{k_mode} V{v_mode}", "triton_prefill", "densify_kernel", densify_types,
                               dict(D=d, K_MODE=k_mode, V_MODE=v_mode, PRMT=True, ALL=False), 4))
        if gpu.prefill_prefix_n(prefill_rows) == 128:  # under TMA every operand is copied, in the pools' kinds
            for k_mode, v_mode in ((1, 2), (3, 3)):  # (3, 3): a serving pool, with dense and 2:4 slots
                out.append(Variant(f"densify d{d} K{k_mode} V{v_mode} both copied", "triton_prefill", "densify_kernel",
                                   densify_types, dict(D=d, K_MODE=k_mode, V_MODE=v_mode, PRMT=True, ALL=True), 4))
    return out


def ptxas() -> str | None:
    """Triton's bundled ptxas (the one its compiler uses), else the machine's."""
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return str(bundled) if bundled.exists() else shutil.which("ptxas")


_INFO = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads.*?Used (\d+) registers", re.S)


def _parse(log: str) -> list[tuple[int, int]]:
    """(registers, spill bytes) of each function in a ``ptxas -v`` log, in order."""
    return [(int(regs), int(st) + int(ld)) for st, ld, regs in _INFO.findall(log)]


def _ptxas_log(cmd: list[str]) -> str:
    """The ``ptxas -v`` report (stderr) of a compile command that must succeed."""
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stderr


def triton_usage(v: Variant) -> Usage:
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(f"hs_kernels.{v.module}"), v.kernel)
    signature = {a: "constexpr" if a in v.constexprs else v.types[a] for a in fn.arg_names}
    aligned = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a, t in v.types.items() if t.startswith("*")}
    compiled = triton.compile(ASTSource(fn, signature, v.constexprs, attrs=aligned), target=GPUTarget("cuda", ARCH, 32),
                              options=dict(num_warps=v.num_warps, num_stages=v.num_stages))
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "k.ptx"
        ptx.write_text(compiled.asm["ptx"])
        log = _ptxas_log([ptxas(), f"-arch=sm_{ARCH}a", "-v", str(ptx), "-o", str(Path(tmp) / "k.cubin")])
    (regs, spills), = _parse(log)
    return Usage(v.name, regs, spills, compiled.metadata.shared)


def cuda_decode_usage() -> list[Usage]:
    """The CUDA decode's instantiations (head_dim 64 / 128 x fp16 / bf16 x the slot counts)."""
    from . import cuda_decode, nvcc

    with tempfile.TemporaryDirectory() as tmp:
        log = _ptxas_log(nvcc.command(cuda_decode.SOURCE, f"sm_{ARCH}", Path(tmp) / "k.cubin", "-cubin", "-Xptxas", "-v"))
    names = re.findall(r"Compiling entry function '(\S+)'", log)
    return [Usage(f"cuda decode {_instantiation(n)}", regs, spills, None) for n, (regs, spills) in zip(names, _parse(log))]


def cuda_prefill_usage(groups=(1, 2, 3, 4, 6, 7, 8, 16, 64), head_dims=(128, 64), dtypes=None) -> list[Usage]:
    """The CUDA Trans-Both prefill's attention kernel, 2:4 and dense keys, at each GQA ratio, head_dim and dtype
    (``cuda_prefill.DTYPES`` unless given; a library per triple; head_dim 128 and bf16 unnamed)."""
    import torch

    from . import cuda_prefill, nvcc

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes or cuda_prefill.DTYPES:
            for d in head_dims:
                for g in groups:
                    log = _ptxas_log(nvcc.command(cuda_prefill.SOURCE, f"sm_{ARCH}a", Path(tmp) / "k.cubin", "-cubin",
                                                  "-Xptxas", "-v", defines=cuda_prefill.macros(g, d, dtype)))
                    names = re.findall(r"Compiling entry function '(\S+)'", log)
                    for name, (regs, spills) in zip(names, _parse(log)):
                        if "trans_both_sp" in name:
                            keys = "dense" if "ILb1E" in name else "sparse"
                            out.append(Usage(f"cuda prefill{'' if d == 128 else f' d{d}'} G{g} K {keys}"
                                             f"{' fp16' if dtype == torch.float16 else ''}", regs, spills, None))
    return out


def _instantiation(mangled: str) -> str:
    """'_Z16decode_sp_kernelILi128ELb1ELi3EEv...' -> 'd128 bf16 3 slots'."""
    m = re.search(r"ILi(\d+)ELb([01])ELi(\d+)E", mangled)
    return f"d{m.group(1)} {'bf16' if m.group(2) == '1' else 'fp16'} {m.group(3)} slots" if m else mangled


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="registers, spills and shared memory of the GPU kernels (sm_90)")
    ap.parse_args(argv)
    rows = [triton_usage(v) for v in variants()] + cuda_decode_usage() + cuda_prefill_usage()
    print(f"sm_{ARCH}, ptxas -v\n| kernel | registers | spill bytes | shared bytes |\n|---|---|---|---|")
    for u in rows:
        known = " (known)" if u.name in KNOWN_SPILLS else ""
        print(f"| {u.name} | {u.registers} | {u.spill_bytes}{known} | {'-' if u.shared_bytes is None else u.shared_bytes} |")


if __name__ == "__main__":
    main()
