"""Prompt groups: requests that share one prompt, prefilled once.

Owns: `Group` (its members, leader first) and `GroupSharing`, the one place the sharing rule lives: a group
waits until its leader has launched the prefill of the whole prompt, then every running member takes the
leader's prompt KV blocks (shared, no copy) and backbone state (`RequestKV.fork`, queued on the device
after the leader's prefill and before any member's first frame); if the leader ended before that, every
member waits for KV blocks of its own (`paused`, as a preempted request does) and prefills its own prompt.
Members that took a prompt whose prefill is still on the device are remembered until it is read: if it
failed, they fail too (the leader may have ended meanwhile); a member's own prefill failing fails no one else.
Must not know: scheduling, executors, threads, the engine's queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
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
        self.unread: dict[int, tuple[int, list[Any]]] = {}  # leader id -> (its epoch, members that took its
                                                             # prompt before the prefill was read)

    def admitted(self, group: Group) -> None:
        if not group.shared and group not in self.pending:
            self.pending.append(group)

    def step(self, running: dict[int, Any], kv: Any, guard: Callable[[Any, Callable[[], None]], None]) -> None:
        """`running`: the engine's records by id; `kv`: its `RequestKV` (the state of the loop holding the KV,
        and that loop, which alone writes it); `guard(record, work)` runs one
        request's work, failing that request alone on an exception."""
        for group in list(self.pending):
            leader = running.get(group.members[0])
            followers = [running[m] for m in group.members[1:] if m in running]
            lead = kv.state(leader) if leader is not None else None
            if lead is None:
                for f in followers:
                    state = kv.state(f)
                    if state is not None and state.prefix_from is not None:
                        kv.loop.share(state, None)  # it waits for blocks of its own
                        kv.pause(f)
            elif lead.prefilled >= lead.prompt_len:
                assert leader is not None
                for f in followers:
                    guard(f, partial(kv.fork, leader, f))
                    self.shared += 1
                if lead.computed < lead.prompt_len and followers:  # its prefill is still on the device
                    self.unread[leader.id] = (lead.epoch, followers)
            else:
                continue
            group.shared = True
            self.pending.remove(group)

    def prefill_read(self, plan: Any, *, failed: bool) -> list[Any]:
        """A prefill plan was read back: the members to fail with it (those that took a leader's prompt from
        it, when it failed); the leader's prompt is settled once its last chunk is read."""
        unread = self.unread.get(plan.request_id)
        if unread is None or plan.payload.epoch != unread[0]:
            return []
        if failed:
            del self.unread[plan.request_id]
            return unread[1]
        if plan.payload.last:
            del self.unread[plan.request_id]
        return []

    def clear(self) -> None:
        """Nothing is on the device any more (the engine dropped what was in flight)."""
        self.unread.clear()
