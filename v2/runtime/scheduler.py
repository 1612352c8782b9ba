"""The step policy: who is admitted, which plans run this step and how they group into batched calls. Pure
Python, no torch.

Owns: admission (`admissible`: the first waiting request that is ready and, when it leads a group, its
whole group, while every pool has the slots they need and the KV fits its prompt), grouping plans by
their batch key (equal keys run as one call), the order of kinds in a step (the family's executors' order;
by default ENCODE, PREFILL, AR_FRAME, AUDIO_CHUNK), the prefill row budget (every paged loop's prefills
together, each loop's kind counted: the first prefill chunk always runs; others join while the step's
prompt rows stay within the budget, the rest wait a step, so one loop's long prompt cannot stall another's
frames), splitting a
group that exceeds the largest batch bucket, padding a batch size up to its bucket, and the typed
`StepPlan` the engine runs. (The preemption victim, the newest request holding KV blocks, is the pager's:
`KVPager.grow`.)
Must not know: tensors, models, threads, how plans are executed, any family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Hashable, Iterable, Mapping, Sequence, TypeVar

from v2.contracts import WorkPlan, WorkUnitKind, bucket_for

KIND_ORDER = (WorkUnitKind.ENCODE, WorkUnitKind.PREFILL, WorkUnitKind.AR_FRAME, WorkUnitKind.AUDIO_CHUNK)
R = TypeVar("R")


@dataclass(frozen=True)
class Batch:
    """Plans that run as one call, padded up to `bucket` rows."""

    kind: Hashable                 # the work kind: which executor runs it
    plans: tuple[WorkPlan, ...]    # its rows, in order (row i of the result is plans[i]'s)
    bucket: int                    # rows the call is padded to (the batch-size bucket; len(plans) if none)


@dataclass(frozen=True)
class StepPlan:
    """What one part of an engine step runs: the scheduler's output, the executors' input."""

    batches: list[Batch] = field(default_factory=list)   # in launch order: by kind, then by batch key
    deferred: list[WorkPlan] = field(default_factory=list)  # prefills over the step's row budget: they
                                                             # wait (their loops plan them again next step)
    prefill_rows: int = 0          # prompt rows in this plan's PREFILL batches, all requests together


class Scheduler:
    """Per-family policy: the kinds' order, batch-size buckets per kind, the prefill row budget."""

    def __init__(self, *, order: Sequence[Hashable] = KIND_ORDER, buckets: Mapping[Hashable, list[int]],
                 prefill_budget: int, prefill_kinds: frozenset[Hashable] = frozenset({WorkUnitKind.PREFILL})) -> None:
        self.order, self.buckets, self.prefill_budget = tuple(order), dict(buckets), prefill_budget
        self._ordered = frozenset(map(id, self.order))  # `kind is k` for some k of the order: one look-up
        self.prefill_kinds = prefill_kinds  # every paged loop's prefill kind: one budget for them all

    def plan(self, plans: Iterable[WorkPlan], prefill_rows: Mapping[tuple[int, Hashable], int]) -> StepPlan:
        """Group this step's plans into batches, in kind order. prefill_rows: rows of each prefill plan (of
        any of `prefill_kinds`), by (request id, loop). A kind absent from `buckets` runs unpadded, as one
        call."""
        groups: dict[tuple[Any, ...], list[WorkPlan]] = {}
        deferred: list[WorkPlan] = []
        used = 0
        kinds = self.prefill_kinds
        for plan in plans:
            if plan.signature.kind in kinds:
                rows = prefill_rows[plan.request_id, plan.loop]
                if used and used + rows > self.prefill_budget:
                    deferred.append(plan)  # waits for a later step
                    continue
                used += rows
            groups.setdefault(plan.signature.batch_key, []).append(plan)
        batches: list[Batch] = []
        if len(groups) == 1:  # the common step: one batch key, nothing to sort
            key = next(iter(groups))
            keys = [key] if id(key[0]) in self._ordered else []
        else:
            keys = [key for kind in self.order
                    for key in sorted((k for k in groups if k[0] is kind), key=lambda k: (k[1], k[2]))]
        for key in keys:
            kind, group = key[0], groups[key]
            sizes = self.buckets.get(kind)
            if sizes is None:
                batches.append(Batch(kind, tuple(group), len(group)))
                continue
            for start in range(0, len(group), sizes[-1]):
                part = tuple(group[start : start + sizes[-1]])
                batches.append(Batch(kind, part, bucket_for(len(part), sizes)))
        return StepPlan(batches, deferred, used)


def schedule(plans: list[WorkPlan], *, prefill_budget: int, prefill_rows: Mapping[tuple[int, Hashable], int],
             buckets: Mapping[Hashable, list[int]], order: Sequence[Hashable] = KIND_ORDER) -> list[Batch]:
    """`Scheduler(...).plan(plans, prefill_rows).batches`."""
    return Scheduler(order=order, buckets=buckets, prefill_budget=prefill_budget).plan(plans, prefill_rows).batches


def admissible(waiting: Collection[R], *, group: Callable[[R], Any], needs: Callable[[R], Mapping[str, int]],
               free: Mapping[str, int], fits: Callable[[R], bool]) -> list[R] | None:
    """The next requests to admit, in order: the first waiting one that is `ready` and the rest of its
    group (`group(r)`: its group or None). None when there is none; [] when it waits for slots or KV blocks
    (nothing behind it is admitted first: admission is in order)."""
    head = next((r for r in waiting if getattr(r, "ready")), None)
    if head is None:
        return None
    g = group(head)
    batch = [r for r in waiting if group(r) is g] if g is not None else [head]
    total: dict[str, int] = {}
    for r in batch:
        for pool, n in needs(r).items():
            total[pool] = total.get(pool, 0) + n
    if any(free.get(pool, 0) < n for pool, n in total.items()) or not fits(head):
        return []
    return batch
