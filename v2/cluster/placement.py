"""Where a prompt group goes: the ready replica with the least outstanding work that has room for it.

Owns: `Load` (what one replica has in flight, as the pool sees it: samples, and frames of budget) and
`choose`, the placement rule. Plain Python, no Ray, so the rule is tested on its own.
Must not know: Ray, the runtime, how groups are run or resubmitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass
class Load:
    """One replica's outstanding work: the groups sent to it whose trajectories have not come back."""

    samples: int = 0   # trajectories in flight
    frames: int = 0    # their frame budgets summed (n x max_frames per group): the work still owed, at most

    def add(self, samples: int, frames: int) -> None:
        self.samples += samples
        self.frames += frames

    def remove(self, samples: int, frames: int) -> None:
        self.samples -= samples
        self.frames -= frames
        assert self.samples >= 0 and self.frames >= 0, "a group was taken off a replica twice"


def choose(loads: Sequence[Load | None], samples: int, capacity: int) -> int | None:
    """The index of the replica for a group of `samples` trajectories, or None if none can take it now.

    `loads[i]` is None for a replica that cannot take work (starting, reloading weights, dead). A replica
    has room when its samples in flight plus the group's stay within `capacity`, or when it has nothing in
    flight (a group larger than `capacity` still runs, alone). Among those, the least outstanding frames
    wins, then the fewest samples, then the lowest index: placement follows outstanding work, so a replica
    busy with long groups gets fewer new ones, and a replica that drains early gets more.
    """
    best: int | None = None
    best_key: tuple[int, int] | None = None
    for i, load in enumerate(loads):
        if load is None or (load.samples and load.samples + samples > capacity):
            continue
        key = (load.frames, load.samples)
        if best_key is None or key < best_key:
            best, best_key = i, key
    return best
