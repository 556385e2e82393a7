"""SlotStack: a free list of pool slots (a stack in one int64 tensor, no Python per-slot work); SlotStacks: equal
free lists, one per layer, in one table, taken from and given back to all at once."""

from __future__ import annotations

import torch


class SlotStack:
    def __init__(self, capacity: int, device="cpu", slots: torch.Tensor | None = None):
        """``slots``: the storage, ``[capacity]`` int64 holding ``0 .. capacity - 1`` (a row of ``SlotStacks``' table);
        default its own."""
        self.capacity = capacity
        self.slots = torch.arange(capacity, dtype=torch.int64, device=device) if slots is None else slots
        self.top = capacity  # slots[:top] are free

    def reset(self):
        self.slots.copy_(torch.arange(self.capacity, dtype=torch.int64))
        self.top = self.capacity

    @property
    def free(self) -> int:
        return self.top

    @property
    def used(self) -> int:
        return self.capacity - self.top

    def pop(self, n: int) -> torch.Tensor:
        if n > self.top:
            raise RuntimeError(f"slot pool exhausted: need {n}, {self.top} free")
        self.top -= n
        return self.slots[self.top:self.top + n].clone()

    def push(self, slots: torch.Tensor) -> None:
        n = slots.numel()
        if self.top + n > self.capacity:
            raise RuntimeError(f"slot pool over-freed: {self.top} + {n} > {self.capacity}")
        self.slots[self.top:self.top + n] = slots.reshape(-1)
        self.top += n


class SlotStacks:
    """``count`` free lists of one capacity in one ``[count, capacity]`` table, each a ``SlotStack`` over its row
    (``stacks``, which may also be used one at a time): a page's slots are taken from every list, and given back to
    every list, in a few launches, not a few per list."""

    def __init__(self, count: int, capacity: int, device="cpu"):
        self.table = torch.arange(capacity, dtype=torch.int64, device=device).repeat(count, 1)
        self.stacks = [SlotStack(capacity, device, row) for row in self.table]

    def reset(self):
        for stack in self.stacks:
            stack.reset()

    def pop(self, n: int) -> torch.Tensor:
        """``n`` slots from each list, ``[count, n]``, as each list's ``pop(n)`` gives them."""
        return self.pop_counts([n] * len(self.stacks)).view(len(self.stacks), n)

    def pop_counts(self, counts: list[int]) -> torch.Tensor:
        """``counts[i]`` slots from list ``i``, one list after another (``[sum(counts)]``), as each list's ``pop``
        gives them."""
        for stack, n in zip(self.stacks, counts):
            if n > stack.top:
                raise RuntimeError(f"slot pool exhausted: need {n}, {stack.top} free")
        for stack, n in zip(self.stacks, counts):
            stack.top -= n
        return self.table[self._places(layout_of(counts))]

    def push(self, slots: torch.Tensor, keep: torch.Tensor) -> None:
        """Give each list back its row's ``slots [count, m]`` where ``keep [count, m]``, in order, as each list's
        ``push(slots[i][keep[i]])`` would; one host read (the counts)."""
        counts = keep.sum(1).tolist()
        # the kept slots first in each row (a stable sort keeps their order), then row i's first counts[i] of them
        kept = slots.gather(1, torch.argsort((~keep).to(torch.int8), dim=1, stable=True))
        layout = layout_of(counts)
        rows, within = (_upload(x, slots.device) for x in layout)
        self.push_counts(kept[rows, within], counts, layout)

    def push_counts(self, slots: torch.Tensor, counts: list[int], layout=None) -> None:
        """Give list ``i`` back the next ``counts[i]`` of ``slots``, one list after another, as its ``push`` would
        (``layout``: ``layout_of(counts)`` where the caller has it)."""
        for stack, n in zip(self.stacks, counts):
            if stack.top + n > stack.capacity:
                raise RuntimeError(f"slot pool over-freed: {stack.top} + {n} > {stack.capacity}")
        self.table[self._places(layout or layout_of(counts))] = slots
        for stack, n in zip(self.stacks, counts):
            stack.top += n

    def _places(self, layout: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Table rows and columns of the places ``layout_of(counts)`` lays out from each list's top up."""
        rows, within = layout
        cols = torch.tensor([stack.top for stack in self.stacks])[rows] + within
        return _upload(rows, self.table.device), _upload(cols, self.table.device)


def _upload(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host-built index on ``device``; to a GPU through pinned memory, not waiting for the work queued there (a copy
    from pageable memory does: it would stall a batch being formed behind the forward in flight)."""
    return x if device.type == "cpu" else x.pin_memory().to(device, non_blocking=True)


def layout_of(counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``counts[i]`` items of list ``i``, one list after another: each item's list and place within it (host)."""
    n = torch.tensor(counts, dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(len(counts)), n)
    return rows, torch.arange(len(rows)) - (n.cumsum(0) - n)[rows]
