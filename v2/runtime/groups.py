"""Prompt groups: requests that share one prompt, prefilled once.

Owns: `Group` (its members, leader first) and `GroupSharing`, the one place the sharing rule lives: a group
waits until its leader has launched the prefill of the whole prompt, then every running member takes the
leader's prompt KV blocks (shared, no copy) and backbone state (`RequestKV.fork`, queued on the device
after the leader's prefill and before any member's first frame); if the leader ended before that, every
member waits for KV blocks of its own (`paused`, as a preempted request does) and prefills its own prompt.
If the leader's prefill then fails, the engine fails the members that took it.
Must not know: scheduling, executors, threads, the engine's queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(eq=False)
class Group:
    """Requests that share one prompt: the first prefills it, the others share its KV blocks."""

    members: list[int]
    shared: bool = False


class GroupSharing:
    """Groups admitted and not yet shared (checked each step: a handful, not every running request)."""

    def __init__(self) -> None:
        self.pending: list[Group] = []
        self.shared = 0  # members that took a leader's prompt

    def admitted(self, group: Group) -> None:
        if not group.shared and group not in self.pending:
            self.pending.append(group)

    def step(self, running: dict[int, Any], kv: Any, guard: Callable[[Any, Callable[[], None]], None]) -> None:
        """`running`: the engine's records by id; `kv`: its `RequestKV`; `guard(record, work)` runs one
        request's work, failing that request alone on an exception."""
        for group in list(self.pending):
            leader = running.get(group.members[0])
            followers = [running[m] for m in group.members[1:] if m in running]
            if leader is None or leader.ar is None:
                for f in followers:
                    if f.ar is not None and f.ar.prefix_from is not None:
                        f.ar.prefix_from, f.ar.paused = None, True
                        kv.pause(f)
            elif leader.ar.prefilled >= leader.ar.prompt_len:
                for f in followers:
                    guard(f, lambda f=f: kv.fork(leader, f))
                    self.shared += 1
            else:
                continue
            group.shared = True
            self.pending.remove(group)
