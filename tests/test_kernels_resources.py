"""CPU: the shipped GPU kernel variants compiled for sm_90 (Triton through ptxas, the CUDA decode
through nvcc) fit sm_90's shared memory per block and do not spill registers to local memory,
except the spills recorded in ``hs_kernels.resources.KNOWN_SPILLS``, which must not grow."""

import pytest

pytest.importorskip("triton")

from hs_kernels import cuda_decode, nvcc, resources  # noqa: E402

pytestmark = pytest.mark.skipif(resources.ptxas() is None or nvcc.find() is None, reason="needs ptxas and nvcc")


def test_ptxas_log_parsing():
    log = ("ptxas info    : Compiling entry function '_Z16decode_sp_kernelILi128ELb1EEvPKt' for 'sm_90'\n"
           "ptxas info    : Function properties for _Z16decode_sp_kernelILi128ELb1EEvPKt\n"
           "    8 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads\n"
           "ptxas info    : Used 168 registers, used 0 barriers\n")
    assert resources._parse(log) == [(168, 32)]
    assert resources._instantiation("_Z16decode_sp_kernelILi128ELb1ELi3EEvPKt") == "d128 bf16 3 slots"


@pytest.mark.parametrize("variant", resources.variants(), ids=lambda v: v.name)
def test_triton_variant_does_not_spill(variant):
    usage = resources.triton_usage(variant)
    assert 0 < usage.registers <= 255 and 0 <= usage.shared_bytes <= resources.MAX_SHARED, usage
    assert usage.spill_bytes <= resources.KNOWN_SPILLS.get(variant.name, 0), usage


def test_cuda_decode_does_not_spill():
    usages = resources.cuda_decode_usage()
    assert sorted(u.name for u in usages) == sorted(f"cuda decode d{d} {t} {n} slots" for d in (128, 64)
                                                   for t in ("bf16", "fp16") for n in cuda_decode.SLOTS)
    assert all(u.spill_bytes == 0 and 0 < u.registers <= 255 for u in usages), usages


def test_cuda_prefill_spills_no_more_than_measured():
    """The attention kernel's consumers run at 160 registers (setmaxnreg), where ptxas's allocation is fragile: a
    spill placed in the loop cost 12 % on the H200 (docs/kernels.md), so none may grow unnoticed."""
    usages = resources.cuda_prefill_usage()
    assert len(usages) == 72, usages  # 9 GQA ratios x 2:4 or dense keys x head_dim 128 or 64 x bf16 or fp16
    assert all(u.spill_bytes <= resources.KNOWN_SPILLS.get(u.name, 0) for u in usages), usages


def test_known_spills_name_shipped_variants():
    prefill = {f"cuda prefill G{g} K {k}{t}" for g in (1, 2, 3, 4, 6, 7, 8, 16, 64) for k in ("sparse", "dense")
               for t in ("", " fp16")}
    assert set(resources.KNOWN_SPILLS) <= {v.name for v in resources.variants()} | prefill
