"""The step policy: which plans run this step and how they group into batched calls. Pure Python, no torch.

Owns: grouping plans by their batch key (equal keys run as one call), the order of kinds in a step
(ENCODE, PREFILL, AR_FRAME, AUDIO_CHUNK), the prefill row budget and the encode sample budget (the first
plan of the kind always runs; others join while the step stays within the budget, the rest wait a step), splitting a
group that exceeds the largest batch bucket, and padding a batch size up to its bucket.
Must not know: tensors, models, threads, how plans are executed.
"""

from __future__ import annotations

from dataclasses import dataclass

from v2.contracts import WorkPlan, WorkUnitKind, bucket_for

KIND_ORDER = (WorkUnitKind.ENCODE, WorkUnitKind.PREFILL, WorkUnitKind.AR_FRAME, WorkUnitKind.AUDIO_CHUNK)


@dataclass(frozen=True)
class Batch:
    """Plans that run as one call, padded up to `bucket` rows."""

    kind: WorkUnitKind
    plans: tuple[WorkPlan, ...]
    bucket: int


def schedule(plans: list[WorkPlan], *, prefill_budget: int, prefill_rows: dict[int, int],
             buckets: dict[WorkUnitKind, list[int]], encode_budget: int = 0,
             encode_samples: dict[int, int] | None = None) -> list[Batch]:
    """Group this step's plans into batches, in kind order.

    prefill_rows: rows of each PREFILL plan, by request id; encode_samples: samples of each ENCODE plan.
    Each budgeted kind takes its first plan always and others while the step stays within the budget.
    buckets: batch-size buckets per kind (a kind absent from it runs unpadded, as one call).
    """
    budgets = {WorkUnitKind.PREFILL: (prefill_budget, prefill_rows),
               WorkUnitKind.ENCODE: (encode_budget, encode_samples or {})}
    used = dict.fromkeys(budgets, 0)
    groups: dict[tuple, list[WorkPlan]] = {}
    for plan in plans:
        kind = plan.signature.kind
        if kind in budgets:
            budget, sizes = budgets[kind]
            size = sizes[plan.request_id]
            if used[kind] and used[kind] + size > budget:
                continue  # waits for a later step
            used[kind] += size
        groups.setdefault(plan.signature.batch_key, []).append(plan)
    batches: list[Batch] = []
    for kind in KIND_ORDER:
        for key in sorted((k for k in groups if k[0] is kind), key=lambda k: (k[1], k[2])):
            group = groups[key]
            sizes = buckets.get(kind)
            if sizes is None:
                batches.append(Batch(kind, tuple(group), len(group)))
                continue
            for start in range(0, len(group), sizes[-1]):
                part = tuple(group[start : start + sizes[-1]])
                batches.append(Batch(kind, part, bucket_for(len(part), sizes)))
    return batches
