"""GPU: the benchmarks' timing helpers (``hs_kernels.timing``) read each call's GPU time, whichever way they take
turns: a spin of 4x the cycles reads about 4x the time."""

import pytest
import torch

from hs_kernels import timing

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CYCLES = 2_000_000  # about 1 ms at 2 GHz: far above a launch's few microseconds


@pytest.mark.parametrize("queued", [False, True])
def test_alternating_times_each_call_alone(queued):
    short, long = timing.alternating(lambda: torch.cuda._sleep(CYCLES), lambda: torch.cuda._sleep(4 * CYCLES),
                                     iters=10, warmup=1, queued=queued)
    assert 0 < short < long
    assert 3.5 < long / short < 4.5


def test_queued_turns_keep_the_order_of_the_calls():
    times = timing.queued_turns(lambda: torch.cuda._sleep(CYCLES), lambda: torch.cuda._sleep(2 * CYCLES), calls=5)
    assert [len(t) for t in times] == [5, 5]
    assert all(1.5 < b / a < 2.5 for a, b in zip(*times))
