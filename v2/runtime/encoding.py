"""Reference encoding inside the engine: requests whose recordings wait for codes, and encode-only jobs.

Owns: `EncodeJob` (a caller waiting for the codes of one recording, e.g. a voice being stored),
`EncodeExecutor` (a batch of ENCODE plans -> one padded, length-aware encoder call -> codes on the device),
and `EncodeStage`: collecting the ENCODE plans of waiting requests and jobs each step, scattering the codes
back (a request's prompt is then laid out with the real codes and it becomes admissible; a job's caller is
woken), and failing jobs when the runtime closes.
Must not know: scheduling policy, slots, HTTP, files (recordings arrive prepared, at the codec's rate).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.contracts import StepResult, WorkPlan
from v2.loops.encode import EncodeLoop, EncodePlan, EncodeState


@dataclass
class EncodeJob:
    """Codes for recordings nobody will speak with yet (a voice being stored)."""

    state: EncodeState
    done: threading.Event = field(default_factory=threading.Event)
    codes: list[np.ndarray] | None = None
    error: str | None = None

    def fail(self, message: str) -> None:
        self.error = message
        self.done.set()


class EncodeExecutor:
    """Every recording of every plan in one call: right-padded, each item's own length given."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.hop = int(encoder.cfg.hop)

    def encode(self, plans: Sequence[EncodePlan]) -> Tensor:
        """codes [items, F, 12] on the encoder's device, items in plan order; item k is valid for its
        first `samples_k // hop` frames."""
        items = [a for p in plans for a in p.audio]
        lengths = [int(a.shape[1]) for a in items]
        audio = torch.zeros(len(items), items[0].shape[0], max(lengths), dtype=torch.float32)  # [B, C, S]
        for k, a in enumerate(items):
            audio[k, :, : lengths[k]] = torch.from_numpy(a)
        device = self.encoder.device
        if device.type == "cuda":
            audio = audio.pin_memory().to(device, non_blocking=True)
        codes, _ = self.encoder.encode(audio, lengths)  # [B, 12, F]
        return codes.transpose(1, 2)  # [B, F, 12]


class EncodeStage:
    """The engine's side of encoding: which states need work, and where their codes go."""

    def __init__(self, loop: EncodeLoop, hop: int) -> None:
        self.loop = loop
        self.hop = hop
        self.jobs: dict[int, EncodeJob] = {}  # by id (the engine's request-id counter)

    def plans(self, waiting: Sequence[Any]) -> list[WorkPlan]:
        """This step's ENCODE plans: waiting requests whose recordings are not encoded yet, and jobs."""
        states = [r.enc for r in waiting if r.enc is not None and r.enc.codes is None]
        states += [j.state for j in self.jobs.values()]
        return [p for p in (self.loop.next(s) for s in states) if isinstance(p, WorkPlan)]

    def scatter(self, plans: Sequence[WorkPlan], host: np.ndarray, waiting: dict[int, Any],
                encoded: Callable[[Any], None], failed: Callable[[int, str], None]) -> None:
        """host [items, F, 12]: each plan's codes to its loop; then `encoded(record)` for a request (which
        lays out its prompt) or the job's caller woken. A failure fails that request or job alone."""
        k = 0
        for plan in plans:
            n = len(plan.payload.audio)
            codes = [np.ascontiguousarray(host[k + j, : int(a.shape[1]) // self.hop]) for j, a in
                     enumerate(plan.payload.audio)]
            k += n
            rid = plan.request_id
            try:
                if rid in self.jobs:
                    job = self.jobs.pop(rid)
                    self.loop.advance(job.state, StepResult(plan, codes))
                    job.codes = codes
                    job.done.set()
                elif rid in waiting:
                    self.loop.advance(waiting[rid].enc, StepResult(plan, codes))
                    encoded(waiting[rid])
            except Exception as e:  # this request's or job's fault alone
                failed(rid, f"{type(e).__name__}: {e}")

    def fail(self, rid: int, message: str) -> bool:
        """Fail a job; False when `rid` is not a job."""
        job = self.jobs.pop(rid, None)
        if job is not None:
            job.fail(message)
        return job is not None

    def fail_all(self, message: str) -> None:
        for rid in list(self.jobs):
            self.fail(rid, message)
