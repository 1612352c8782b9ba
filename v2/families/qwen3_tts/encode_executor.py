"""The front executors: a batch of encode plans -> the speaker encoder (x-vectors) or the codec encoder (codes).

Owns: `SpeakerExecutor` (each recording through `Qwen3TTS.speaker_embedding` -> one [B, H] tensor) and
`CodesExecutor` (each recording through `Qwen3CodecEncoder.encode` -> codes [B, R_max, G], -1 past each
row's frames), each in two halves (`pack`: host tensors; `launch`: device work) and `read` (per plan its
result, copied off the possibly pinned host buffer). Each recording is encoded alone (its result does not
depend on the batch: the codec encoder zero-pads a batch, which changes a short item's last frame).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from v2.runtime.family import Batch


class SpeakerExecutor:
    def __init__(self, model: Any) -> None:
        self.model = model

    def pack(self, batch: Batch) -> list[Tensor]:
        return [torch.from_numpy(np.ascontiguousarray(p.payload.audio, dtype=np.float32)) for p in batch.plans]

    @torch.no_grad()
    def launch(self, wavs: list[Tensor]) -> Tensor:
        dev = self.model.device
        return torch.stack([self.model.speaker_embedding(w.to(dev)).float() for w in wavs])  # [B, H]

    def read(self, host: np.ndarray, batch: Batch) -> list[np.ndarray]:
        return [np.array(host[i]) for i in range(len(batch.plans))]


class CodesExecutor:
    def __init__(self, encoder: Any, hop: int) -> None:
        self.encoder, self.hop = encoder, hop

    def pack(self, batch: Batch) -> list[Tensor]:
        return [torch.from_numpy(np.ascontiguousarray(p.payload.audio, dtype=np.float32)) for p in batch.plans]

    @torch.no_grad()
    def launch(self, wavs: list[Tensor]) -> Tensor:
        codes = [self.encoder.encode([w])[0] for w in wavs]  # [R_i, G] each, alone
        out = torch.full((len(codes), max(len(c) for c in codes), codes[0].shape[1]), -1, dtype=torch.long)
        for i, c in enumerate(codes):
            out[i, : len(c)] = c
        return out  # [B, R_max, G]

    def read(self, host: np.ndarray, batch: Batch) -> list[np.ndarray]:
        out = []
        for i, p in enumerate(batch.plans):
            frames = -(-len(p.payload.audio) // self.hop)
            out.append(np.array(host[i, :frames]))
        return out
