"""A pool rollout's results: trajectories as their groups finish, or all of them in a stable order.

Owns: `PoolBatch`, filled group by group by the pool's dispatcher thread and read by the caller (iterate for
trajectories as groups finish; `.trajectories()` for prompt-major, sample-minor order, as a single runtime
gives them), which replicas each group ran on (more than one when a replica died under it), the first
error that ended the rollout, and cancelling it.
Must not know: Ray, placement, replicas' state.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterator, NoReturn

from v2.rl.trajectory import Trajectory


class RolloutCancelled(RuntimeError):
    """The rollout was cancelled before all its groups finished."""


class PoolBatch:
    def __init__(self, groups: int, n: int, cancel: Callable[["PoolBatch"], None]) -> None:
        self.n = n
        self.placements: list[list[int]] = [[] for _ in range(groups)]  # replica indices each group was sent to
        self._groups: list[list[Trajectory] | None] = [None] * groups
        self._finished: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # group indices; None: an error
        self._cond = threading.Condition()
        self._left = groups
        self._error: BaseException | None = None
        self._cancel = cancel

    # ----- the dispatcher's side ---------------------------------------------------------------------
    @property
    def ended(self) -> bool:
        """Every group is in, or the rollout failed or was cancelled: nothing more to run for it."""
        with self._cond:
            return self._left == 0 or self._error is not None

    def placed(self, group: int, replica: int) -> None:
        with self._cond:
            self.placements[group].append(replica)

    def deliver(self, group: int, trajectories: list[Trajectory]) -> None:
        with self._cond:
            if self._groups[group] is not None or self._error is not None:
                return  # already in (a duplicate of a resubmitted group) or the rollout is over
            self._groups[group] = trajectories
            self._left -= 1
            self._cond.notify_all()
        self._finished.put(group)

    def fail(self, error: BaseException) -> None:
        with self._cond:
            if self._error is not None or self._left == 0:
                return
            self._error = error
            self._cond.notify_all()
        self._finished.put(None)

    # ----- the caller's side ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._groups) * self.n

    def __iter__(self) -> Iterator[Trajectory]:
        """Trajectories as their groups finish (a group's n samples come together, sample-minor)."""
        for _ in range(len(self._groups)):
            group = self._finished.get()
            if group is None:
                self._raise()
            yield from self._groups[group] or []

    def trajectories(self, timeout: float | None = None) -> list[Trajectory]:
        """Every trajectory in prompt-major, sample-minor order (waits for all; raises the rollout's error)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._left and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{self._left} of {len(self._groups)} groups not finished within {timeout} s")
                self._cond.wait(left)
            if self._error is not None:
                self._raise()
            return [t for group in self._groups for t in group or []]

    def cancel(self) -> None:
        """Stop the rollout: groups not yet sent are dropped, groups running are cancelled on their replica."""
        self.fail(RolloutCancelled("the rollout was cancelled"))
        self._cancel(self)

    def _raise(self) -> NoReturn:
        assert self._error is not None
        raise self._error
