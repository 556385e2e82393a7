"""SlotStack: a free list of pool slots (a stack in one int64 tensor, no Python per-slot work)."""

from __future__ import annotations

import torch


class SlotStack:
    def __init__(self, capacity: int, device="cpu"):
        self.capacity = capacity
        self.slots = torch.arange(capacity, dtype=torch.int64, device=device)
        self.top = capacity  # slots[:top] are free

    def reset(self):
        self.slots = torch.arange(self.capacity, dtype=torch.int64, device=self.slots.device)
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
