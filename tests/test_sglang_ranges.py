"""The ``hs.*`` profiler ranges: in a torch profiler's trace while it records, and not entered otherwise (no
dispatcher call on the serving path)."""

import collections

import torch
from torch.profiler import profile
from torch.utils._python_dispatch import TorchDispatchMode

from sglang_hs.ranges import ranged, span


class Dispatched(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@ranged("hs.test_outer")
def work(x):
    with span("hs.test_inner"):
        return x + 1


def test_ranges_are_in_the_trace_while_a_profiler_records():
    with profile() as prof:
        assert work(torch.ones(2)).tolist() == [2.0, 2.0]
    names = [e.name for e in prof.events()]
    assert names.count("hs.test_outer") == 1 and names.count("hs.test_inner") == 1


def test_ranges_cost_no_dispatcher_call_without_a_profiler():
    with Dispatched() as seen:
        work(torch.ones(2))
    assert seen.count["add"] == 1
    assert not any("record_function" in name for name in seen.count)
    with profile(), Dispatched() as seen:  # the positive control: the same count sees them while recording
        work(torch.ones(2))
    assert seen.count["_record_function_enter_new"] == 2


def test_ranged_keeps_the_function_name_and_result():
    assert work.__name__ == "work" and work(torch.zeros(1)).item() == 1.0
