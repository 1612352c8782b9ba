"""Qwen3-Omni's front work (before admission): a prompt's audio clips through the thinker's audio encoder.

Owns: the work kind `AUDIO_ENCODE`, `AudioInput` (a prompt's clips as log-mel [128, frames] each, made at
submit), `AudioState` (one front slot for the whole prompt: its clips are encoded together, as the
reference does, since a short last chunk is padded to the call's longest), `AudioLoop` (one plan per
request, its rows kept when read back) and `AudioExecutor` (a batch of requests, each prompt's clips in
one `AudioEncoder.encode` call of its own, so a prompt's rows never depend on the batch; their rows
concatenated, [B, N_max, H] padded, each read back to its own N rows).
Must not know: requests' other fields, loops' state, scheduling, slots of the driven loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from v2.contracts import FinishReason, Kind, LoopState, ShapeSignature, WorkPlan
from v2.runtime.family import Batch, Halves


class FrontWork(Kind):
    AUDIO_ENCODE = "audio_encode"


SIGNATURE = ShapeSignature(FrontWork.AUDIO_ENCODE, "audio_encoder")  # type: ignore[arg-type]


@dataclass(frozen=True)
class AudioInput:
    mels: tuple[Tensor, ...]   # float32 [mel, frames] per clip, in the prompt's order
    rows: int                  # the encoder's rows of all of them (the prompt's placeholders)


@dataclass
class AudioState(LoopState):
    audio: AudioInput | None = None
    slots: list[int] = field(default_factory=list)
    launched: bool = False
    rows: Tensor | None = None  # [N, H] once encoded

    @property
    def inputs(self) -> int:
        return 1


class AudioLoop:
    kind = "audio_encoder"  # the front loop's name

    def init(self, request_id: int, audio: AudioInput) -> AudioState:
        return AudioState(request_id, audio=audio)

    def next(self, state: AudioState) -> WorkPlan | None:
        if state.finish is not None or state.launched:
            return None
        return WorkPlan(state.request_id, self.kind, SIGNATURE, state.audio)

    def started(self, state: AudioState, slots: list[int]) -> None:
        state.slots = slots

    def launched(self, state: AudioState, plan: WorkPlan) -> None:
        state.launched = True

    def advance(self, state: AudioState, plan: WorkPlan, out: Any) -> None:
        state.rows = torch.as_tensor(out)
        state.finish = FinishReason.STOP

    def finalize(self, state: AudioState) -> list[Any]:
        return []


class AudioExecutor:
    def __init__(self, thinker: Any) -> None:
        self.thinker = thinker

    def pack(self, batch: Batch) -> list[AudioInput]:
        return [p.payload for p in batch.plans]

    @torch.no_grad()
    def launch(self, inputs: list[AudioInput]) -> Tensor:
        t = self.thinker
        rows = [torch.cat(t.audio_tower.encode([m.to(t.device, t.dtype) for m in a.mels])) for a in inputs]
        out = torch.zeros(len(rows), max(r.shape[0] for r in rows), rows[0].shape[1], dtype=torch.float32,
                          device=rows[0].device)  # [B, N_max, H] float32 (the host copy is numpy's)
        for i, r in enumerate(rows):
            out[i, : r.shape[0]] = r
        return out

    def read(self, host: np.ndarray, batch: Batch) -> list[np.ndarray]:
        return [np.array(host[i, : p.payload.rows]) for i, p in enumerate(batch.plans)]

    def executor(self) -> Halves:
        return Halves(self.pack, self.launch, self.read)
