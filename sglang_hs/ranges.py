"""The ``hs.*`` ranges of a torch profiler trace (``benchmarks/serving/trace_summary.py`` reads them), marked by the backend, the
pool and the radix cache. A range is entered only while a profiler records: ``torch.profiler.record_function`` makes
two dispatcher calls even when none does (about 5 us), and an extend opens several per layer on a host-bound path."""

from __future__ import annotations

import contextlib
import functools

import torch
from torch.profiler import record_function


def recording() -> bool:
    return torch._C._autograd._profiler_enabled()


def span(name: str):
    """``record_function(name)`` while a profiler records, else a context that does nothing."""
    return record_function(name) if recording() else contextlib.nullcontext()


def ranged(name: str):
    """Decorator: each call of the function runs inside ``span(name)``."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            with span(name):
                return fn(*args, **kwargs)
        return call
    return wrap
