"""The measurement probes (kernels/probes: instruction rates and operand layouts behind kernels/NOTES_GPU.md)
still compile for sm_90a with the machine's nvcc, so that their figures can be re-measured as documented."""

import subprocess
from pathlib import Path

import pytest

PROBES = sorted((Path(__file__).parent.parent / "kernels" / "probes").glob("*.cu"))


def test_the_probes_are_found():
    assert {p.stem for p in PROBES} >= {"mma_rate", "mma_sp_layout", "wgmma_rate", "wgmma_sp_layout"}


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.stem)
def test_probe_builds_for_hopper(probe, tmp_path):
    from hs_kernels import cuda_decode

    if cuda_decode._nvcc() is None:
        pytest.skip("no nvcc on this machine")
    out = tmp_path / "probe.cubin"
    proc = subprocess.run([cuda_decode._nvcc(), "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-o", str(out),
                           str(probe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.stat().st_size > 0
