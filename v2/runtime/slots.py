"""Slot pools: which KV slots and codec slots are free, and who holds each. Pure Python, no torch.

Owns: allocation and release of integer slot ids (0 .. size - 1; the dummy slot lies outside the pool),
refusing a double allocation or a release of a free slot.
Must not know: tensors, requests' contents, scheduling policy.
"""

from __future__ import annotations


class SlotPool:
    def __init__(self, name: str, size: int) -> None:
        if size < 1:
            raise ValueError(f"{name}: a pool needs at least one slot, got {size}")
        self.name = name
        self.size = size
        self._free = list(range(size - 1, -1, -1))  # pop() hands out the lowest slot first
        self._owner: dict[int, int] = {}

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def in_use(self) -> int:
        return len(self._owner)

    def can_allocate(self) -> bool:
        return bool(self._free)

    def allocate(self, owner: int) -> int:
        if not self._free:
            raise RuntimeError(f"{self.name}: no free slot")
        slot = self._free.pop()
        self._owner[slot] = owner
        return slot

    def release(self, slot: int, owner: int) -> None:
        if self._owner.get(slot) != owner:
            raise RuntimeError(f"{self.name}: slot {slot} is not held by request {owner}")
        del self._owner[slot]
        self._free.append(slot)

    def owner(self, slot: int) -> int | None:
        return self._owner.get(slot)
