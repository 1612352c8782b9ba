"""The pool's dispatcher: one thread that places prompt groups on replicas, collects them, and heals the pool.

Owns: the queue of groups not yet placed (first in, first out; a lost replica's groups go back to its front),
each replica's state (starting -> ready -> reloading after a loss -> ready, or dead once its restarts are
spent), its outstanding work, the weight version each replica holds, sending a weight update to every ready
replica, and replaying the weight log on a replica Ray restarted before it gets any group. A replica gets
work only while it holds the pool's current version, so no group placed after an update returns runs on
older weights. Resubmitted groups keep their prompt and seed, so they give the same trajectories.
Must not know: the runtime's internals, how trajectories are built, the placement rule's details (placement.py).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from v2.cluster.batch import PoolBatch
from v2.cluster.placement import Load, choose
from v2.cluster.replica import StaleReplicaError
from v2.cluster.weights import WeightLog, WeightUpdate
from v2.rl.trajectory import Trajectory

POLL_S = 0.02   # the longest a newly queued group waits for the dispatcher's attention
RETRY_S = 0.1   # before asking a restarting replica again


@dataclass(eq=False)
class GroupTask:
    batch: PoolBatch
    position: int              # its place in the batch
    group_id: int              # its prompt's index in the whole rollout (what seeds it)
    prompt: Any
    n: int
    seed: int
    frames: int                # n x the frame budget: the work it may cost
    options: dict[str, Any]


@dataclass(eq=False)
class Replica:
    index: int
    actor: Any
    state: str = "starting"    # starting | ready | reloading | dead
    version: int = 0           # the weight version it holds, as last reported
    epoch: int = 0             # bumped on every loss: replies from before it are ignored
    load: Load = field(default_factory=Load)
    inflight: dict[Any, GroupTask] = field(default_factory=dict)   # object ref -> its group
    reload: Any = None         # the ref of the weight replay in flight
    replaying: list[WeightUpdate] = field(default_factory=list)  # what that replay applies
    losses: int = 0
    retry_at: float | None = None  # when to ask a restarting replica to replay again
    error: str | None = None
    counters: dict[str, int] = field(default_factory=lambda: dict(groups=0, trajectories=0, frames=0, resubmitted=0))


class Dispatcher:
    def __init__(self, actors: list[Any], *, capacity: int, max_restarts: int) -> None:
        self.replicas = [Replica(i, a) for i, a in enumerate(actors)]
        self.capacity, self.max_restarts = capacity, max_restarts
        self.log = WeightLog()
        self.pending: deque[GroupTask] = deque()
        self.cond = threading.Condition()
        self.update_lock = threading.Lock()  # one weight update at a time
        self.closed = False
        with self.cond:
            for r in self.replicas:
                self._replay(r)
        self.thread = threading.Thread(target=self._run, name="v2-pool", daemon=True)
        self.thread.start()

    # ----- callers' threads ------------------------------------------------------------------------
    def submit(self, tasks: list[GroupTask]) -> None:
        with self.cond:
            if self.closed:
                raise RuntimeError("the pool is closed")
            if all(r.state == "dead" for r in self.replicas):
                raise RuntimeError("every replica of the pool is dead")
            self.pending.extend(tasks)
            self.cond.notify_all()

    def cancel(self, batch: PoolBatch) -> None:
        with self.cond:
            self._drop(batch)

    def wait_ready(self, timeout: float | None) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: all(r.state in ("ready", "dead") for r in self.replicas), timeout):
                raise TimeoutError(f"replicas not ready within {timeout} s: "
                                   f"{[r.state for r in self.replicas]}")
            dead = [f"replica {r.index}: {r.error}" for r in self.replicas if r.state == "dead"]
        if dead:
            raise RuntimeError("replicas failed to start: " + "; ".join(dead))

    def update(self, update: WeightUpdate, mode: str, timeout: float | None) -> None:
        """Push `update` to every ready replica and wait for it; replicas not ready replay it before any work.
        Raises (and drops the update) when every replica refused it."""
        with self.update_lock:
            with self.cond:
                self.log.push(update)
                calls = [(r, r.epoch, r.actor.apply.remote([_entry(update)], mode, timeout))
                         for r in self.replicas if r.state == "ready"]
            applied, refusals = 0, []
            for r, epoch, ref in calls:
                try:
                    version, names = ray.get(ref)
                except RayActorError as e:
                    with self.cond:
                        self._lose(r, epoch, f"died during a weight update: {e}")
                    continue
                except Exception as e:  # refused or timed out on that replica
                    refusals.append((r, epoch, e))
                    continue
                applied += 1
                with self.cond:
                    if r.epoch == epoch:
                        r.version = version
                    if names[0] is not None:
                        self.log.learned(update, names[0])
            with self.cond:
                if refusals and not applied:
                    self.log.pop(update)
                else:  # the replicas that hold it go on; the others replay the log before any work
                    for r, epoch, error in refusals:
                        self._lose(r, epoch, f"refused the update others applied: {error}")
                self.cond.notify_all()
            if refusals and not applied:
                raise refusals[0][2]

    def close(self) -> None:
        with self.cond:
            self.closed = True
            batches = {t.batch for t in self.pending} | {t.batch for r in self.replicas for t in r.inflight.values()}
            self.pending.clear()
            self.cond.notify_all()
        self.thread.join(10)
        for batch in batches:
            batch.fail(RuntimeError("the pool was closed"))

    # ----- the dispatcher thread -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                if not self._iterate():
                    return
            except Exception as e:  # a fault in this code: fail what is in flight rather than hang its callers
                with self.cond:
                    batches = {t.batch for t in self.pending} | {t.batch for r in self.replicas
                                                                 for t in r.inflight.values()}
                    for batch in batches:
                        batch.fail(RuntimeError(f"the pool's dispatcher failed: {type(e).__name__}: {e}"))
                        self._drop(batch)
                    for r in self.replicas:
                        r.inflight.clear()
                        r.load = Load()

    def _iterate(self) -> bool:
        """One round: place what fits, wait a moment for replies, handle them. False once closed."""
        with self.cond:
            if self.closed:
                return False
            retrying = [r for r in self.replicas if r.retry_at is not None]
            for r in retrying:
                if r.retry_at is not None and time.monotonic() >= r.retry_at:
                    self._replay(r)
            self._place()
            waiting: dict[Any, tuple[Replica, int, GroupTask | None]] = {}
            for r in self.replicas:
                waiting.update({ref: (r, r.epoch, t) for ref, t in r.inflight.items()})
                if r.reload is not None:
                    waiting[r.reload] = (r, r.epoch, None)
            if not waiting:
                self.cond.wait(RETRY_S if retrying else None)
                return True
        ready, _ = ray.wait(list(waiting), num_returns=1, timeout=POLL_S)
        for ref in ready:
            self._collect(ref, *waiting[ref])
        return True

    def _place(self) -> None:
        while self.pending:
            task = self.pending[0]
            if task.batch.ended:
                self.pending.popleft()
                continue
            loads = [r.load if r.state == "ready" and r.version == self.log.version else None for r in self.replicas]
            i = choose(loads, task.n, self.capacity)
            if i is None:
                return
            self.pending.popleft()
            r = self.replicas[i]
            ref = r.actor.rollout_group.remote(task.prompt, task.group_id, task.n, task.seed, r.version, task.options)
            r.inflight[ref] = task
            r.load.add(task.n, task.frames)
            task.batch.placed(task.position, i)

    def _collect(self, ref: Any, r: Replica, epoch: int, task: GroupTask | None) -> None:
        try:
            value, error = ray.get(ref), None
        except Exception as e:
            value, error = None, e
        with self.cond:
            if epoch != r.epoch:
                return  # a reply from before the replica was lost; its groups were resubmitted
            if task is None:
                self._replayed(r, value, error)
            elif isinstance(error, (RayActorError, StaleReplicaError)):
                self._lose(r, epoch, f"{type(error).__name__}: {error}")
            else:
                del r.inflight[ref]
                r.load.remove(task.n, task.frames)
                if error is not None:  # the group itself failed (a bad prompt): the rollout ends with it
                    task.batch.fail(error)
                    self._drop(task.batch)
                else:
                    c = r.counters
                    c["groups"] += 1
                    c["trajectories"] += len(value)
                    c["frames"] += sum(len(t.codes) for t in value)
                    task.batch.deliver(task.position, [_writable(t) for t in value])
            self.cond.notify_all()

    def _drop(self, batch: PoolBatch) -> None:
        """Forget a batch that ended early: its queued groups are dropped, its running ones cancelled (the
        replica cancels their requests; their replies are ignored)."""
        self.pending = deque(t for t in self.pending if t.batch is not batch)
        for r in self.replicas:
            for ref, t in r.inflight.items():
                if t.batch is batch:
                    ray.cancel(ref)

    def _lose(self, r: Replica, epoch: int, why: str) -> None:
        """The replica failed (died, restarted, or is unreachable): its groups go back to the front of the
        queue with their seeds, and it replays the weight log before it is given work again."""
        if epoch != r.epoch or r.state == "dead":
            return
        tasks = list(r.inflight.values())
        self.pending.extendleft(reversed(tasks))
        r.counters["resubmitted"] += len(tasks)
        r.inflight.clear()
        r.load = Load()
        r.epoch += 1
        r.losses += 1
        r.error = why
        if r.losses > self.max_restarts:
            self._dead(r)
        else:
            self._replay(r)

    def _replay(self, r: Replica) -> None:
        r.state = "reloading" if r.state != "starting" else "starting"
        r.retry_at = None
        r.replaying = list(self.log.updates)
        r.reload = r.actor.apply.remote([_entry(u) for u in r.replaying], "wait", None)

    def _replayed(self, r: Replica, value: Any, error: BaseException | None) -> None:
        r.reload = None
        if error is None:
            r.version, names = value
            for u, n in zip(r.replaying, names):
                if n is not None:
                    self.log.learned(u, n)
            if r.version == self.log.version:
                r.state = "ready"
            elif r.version < self.log.version:
                self._replay(r)  # an update landed while it replayed
            else:  # it applied an update the pool then took back (refused by the others): start it afresh
                r.error = f"holds version {r.version}, above the pool's {self.log.version}"
                ray.kill(r.actor, no_restart=False)
                r.retry_at = time.monotonic() + RETRY_S
            return
        r.error = f"{type(error).__name__}: {error}"
        if isinstance(error, ActorUnavailableError):  # Ray is restarting it: ask again shortly
            r.retry_at = time.monotonic() + RETRY_S
            return
        r.losses += 1  # it died again, its start-up fails, or it refused the log (which may have changed since)
        if r.losses <= self.max_restarts:
            self._replay(r)
        else:
            self._dead(r)

    def _dead(self, r: Replica) -> None:
        r.state = "dead"
        if all(x.state == "dead" for x in self.replicas):
            for t in self.pending:
                t.batch.fail(RuntimeError(f"every replica of the pool is dead (last: {r.error})"))
            self.pending.clear()


def _writable(t: Trajectory) -> Trajectory:
    """Arrays read out of the object store are read-only views of it; the caller gets its own, as from a runtime."""
    arrays = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
    copies: dict[str, Any] = {k: v.copy() for k, v in arrays.items()  # field -> its array's writable copy
                              if isinstance(v, np.ndarray) and not v.flags.writeable}
    return dataclasses.replace(t, **copies)


def _entry(u: WeightUpdate) -> tuple[int, Any, str | None]:
    return (u.version, u.tensors, u.path)
