"""The step policy: which plans run this step and how they group into batched calls. Pure Python, no torch.

Owns: grouping plans by their batch key (equal keys run as one call), the order of kinds in a step
(ENCODE, PREFILL, AR_FRAME, AUDIO_CHUNK), the prefill row budget (the first prefill chunk always runs;
others join while the step's prompt rows stay within the budget, the rest wait a step), splitting a
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
             buckets: dict[WorkUnitKind, list[int]]) -> list[Batch]:
    """Group this step's plans into batches, in kind order.

    prefill_rows: rows of each PREFILL plan, by request id. buckets: batch-size buckets per kind (a kind
    absent from it runs unpadded, as one call).
    """
    groups: dict[tuple, list[WorkPlan]] = {}
    used = 0
    for plan in plans:
        if plan.signature.kind is WorkUnitKind.PREFILL:
            rows = prefill_rows[plan.request_id]
            if used and used + rows > prefill_budget:
                continue  # waits for a later step
            used += rows
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
