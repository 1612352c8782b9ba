"""Reference encoding inside the engine: requests whose recordings wait for codes, and encode-only jobs.

Owns: `EncodeJob` (a caller waiting for the codes of one recording, e.g. a voice being stored),
`EncodeExecutor` (the encoder's per-slot streaming state; a batch of ENCODE plans -> one chunked encoder call
-> codes on the device; reading them back per row), and `EncodeStage`: the encoder state slots (a recording
takes one when its encode starts, all of a request's at once, and gives it back when it is encoded or its
request ends; fresh state is queued on the device stream), collecting the ENCODE plans of waiting requests
and jobs each step, telling their loops what was launched, scattering the codes back (a request's prompt is
then laid out with the real codes and it becomes admissible; a job's caller is woken), and failing jobs
when the runtime closes.
Must not know: scheduling policy, HTTP, files (recordings arrive prepared, at the codec's rate).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.contracts import WorkPlan
from v2.families.moss_tts_local.encode import EncodeLoop, EncodePlan, EncodeState
from v2.families.moss_tts_local.ar_executor import to_device
from v2.runtime.slots import SlotPool


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
    """Every row of every plan in one `encode_chunk` call over the encoder's slot-indexed state."""

    def __init__(self, encoder: Any, num_slots: int) -> None:
        self.encoder = encoder
        self.state = encoder.allocate_state(num_slots)

    def start(self, slots: Sequence[int]) -> None:
        """Fresh streams in `slots` (nothing of an earlier recording is ever read)."""
        self.state.reset(to_device(torch.tensor(list(slots), dtype=torch.long), self.encoder.device))

    def encode(self, plans: Sequence[EncodePlan]) -> Tensor:
        """codes [rows, n, 12] on the encoder's device, rows in plan order (row k real for its first
        `frames` frames)."""
        rows = [r for p in plans for r in p.rows]
        device = self.encoder.device
        audio = torch.from_numpy(np.stack([r.audio for r in rows]))  # [B, C, n * hop]
        slots = torch.tensor([r.slot for r in rows], dtype=torch.long)
        frames = torch.tensor([r.frames for r in rows], dtype=torch.long)
        audio, slots, frames = (to_device(t, device) for t in (audio, slots, frames))
        codes = self.encoder.encode_chunk(slots, audio, state=self.state, frames=frames)  # [B, 12, n]
        return codes.transpose(1, 2)  # [B, n, 12]

    @staticmethod
    def read(host: np.ndarray, plans: Sequence[EncodePlan]) -> list[list[np.ndarray]]:
        """host [rows, n, 12] -> per plan, per row its real frames' codes [frames, 12] (copies: the host
        copy may be pinned memory, which codes kept for a request's life must not hold)."""
        out, k = [], 0
        for plan in plans:
            out.append([np.array(host[k + j, : r.frames]) for j, r in enumerate(plan.rows)])
            k += len(plan.rows)
        return out


class EncodeStage:
    """The engine's side of encoding: slots, which states need work, and where their codes go."""

    def __init__(self, loop: EncodeLoop, pool: SlotPool, executor: EncodeExecutor | None,
                 launch: Callable[[Callable[[], Any]], None] = lambda work: work()) -> None:
        """`launch`: queues device work (fresh slot state) on the engine's stream."""
        self.loop, self.pool, self.executor, self.launch = loop, pool, executor, launch
        self.jobs: dict[int, EncodeJob] = {}  # by id (the engine's request-id counter)
        self.requests: dict[int, Any] = {}    # waiting requests whose recordings are not encoded yet, by id

    @property
    def pending(self) -> int:
        return len(self.requests) + len(self.jobs)

    def plans(self) -> list[WorkPlan]:
        """This step's ENCODE plans: encodes that hold their slots, then new ones while slots last (in
        submission order: requests, then jobs)."""
        states = [r.enc for r in self.requests.values()] + [j.state for j in self.jobs.values()]
        plans = []
        for state in states:
            if not state.slots:
                if self.pool.free_count < len(state.audio):
                    continue  # waits for slots
                slots = state.slots = [self.pool.allocate(state.request_id) for _ in state.audio]
                executor = self.executor
                assert executor is not None
                self.launch(lambda: executor.start(slots))
            plan = self.loop.next(state)
            if plan is not None:
                plans.append(plan)
        return plans

    def _state(self, rid: int) -> EncodeState | None:
        job, record = self.jobs.get(rid), self.requests.get(rid)
        return job.state if job is not None else record.enc if record is not None else None

    def launched(self, plans: Sequence[WorkPlan]) -> None:
        for plan in plans:
            state = self._state(plan.request_id)
            if state is not None:
                self.loop.launched(state, plan)

    def scatter(self, plans: Sequence[WorkPlan], codes: list[list[np.ndarray]], encoded: Callable[[Any], None],
                failed: Callable[[int, str], None]) -> None:
        """codes: per plan, per row [frames, 12] (`EncodeExecutor.read`): each plan's codes to its loop; a
        finished encode gives its slots back, then `encoded(record)` for a request (which lays out its
        prompt) or the job's caller is woken. A failure fails that request or job alone."""
        for plan, rows in zip(plans, codes):
            rid = plan.request_id
            try:
                job, record = self.jobs.get(rid), self.requests.get(rid)
                state = self._state(rid)
                if state is None:
                    continue  # ended meanwhile (its slots were given back then)
                self.loop.advance(state, plan, rows)
                if state.codes is None:
                    continue
                self.release(state)  # (forgets the request)
                if job is not None:
                    del self.jobs[rid]
                    job.codes = state.codes
                    job.done.set()
                else:
                    encoded(record)
            except Exception as e:  # this request's or job's fault alone
                failed(rid, f"{type(e).__name__}: {e}")

    def release(self, state: EncodeState | None) -> None:
        """Give an encode's slots back and forget it (once; a no-op for one that never started)."""
        if state is not None:
            self.requests.pop(state.request_id, None)
            for slot in state.slots:
                self.pool.release(slot, state.request_id)
            state.slots = []

    def fail(self, rid: int, message: str) -> bool:
        """Fail a job; False when `rid` is not a job."""
        job = self.jobs.pop(rid, None)
        if job is not None:
            self.release(job.state)
            job.fail(message)
        return job is not None

    def fail_all(self, message: str) -> None:
        for rid in list(self.jobs):
            self.fail(rid, message)
