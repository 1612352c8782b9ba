"""The codec executor: a batch of AUDIO_CHUNK plans -> static buffers -> one decoder call -> typed results.

Owns: the vocoder's device-side state (each codec slot's streaming state; a dummy slot for padding rows),
fresh state for an admitted stream, the static inputs (slot and real frames per row, the codes; allocated
once at the largest buckets), an AUDIO_CHUNK batch in two halves (`prepare`: host tensors only; `launch`:
upload and replay through `StepGraphs`), and reading a batch's audio back as `ChunkBatch` (each row trimmed
to its real frames: the codec hop is known here).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from v2.families.moss_tts_local.vocoder import ChunkPlan
from v2.models.moss_codec import MossAudioDecoder
from v2.runtime.device import to_device, upload
from v2.runtime.graphs import StepGraphs


@dataclass(slots=True)
class ChunkBatch:
    """An AUDIO_CHUNK batch's result on the host: row i's audio is its first `samples[i]` samples."""

    host: np.ndarray    # [bucket, channels, frames * hop] float32
    samples: list[int]
    copy: bool = False  # the host copy is pinned memory (CUDA): hand out copies, so it goes back at once

    def audio(self, i: int) -> np.ndarray:
        """Row i's chunk, float32 [channels, n]: a view of the batch's host copy (each channel's samples
        contiguous), or a copy of the real samples when that host copy is pinned."""
        view = self.host[i, :, : self.samples[i]]
        return np.array(view) if self.copy else view

    __getitem__ = audio

    def __len__(self) -> int:
        return len(self.samples)


class CodecExecutor:
    """The vocoder over slot-indexed streaming state; `num_slots` real slots and one dummy."""

    def __init__(self, codec: MossAudioDecoder, *, num_slots: int, batch_buckets: list[int], frame_buckets: list[int],
                 graphs: bool = True) -> None:
        self.codec = codec
        self.state = codec.allocate_state(num_slots)
        dev = codec.device
        # static inputs, [largest bucket]: slot and real frames per row, and the codes
        self.rows = torch.zeros(2, batch_buckets[-1], dtype=torch.long, device=dev)
        self.rows[0] = self.state.dummy_slot
        self.codes = torch.zeros(batch_buckets[-1], 12, frame_buckets[-1], dtype=torch.long, device=dev)
        keys = [(b, f) for b in batch_buckets for f in frame_buckets]
        self.graphs = StepGraphs("audio_chunk", self._chunk_step, keys, device=dev, enabled=graphs)
        self.graphs.capture()
        self.state.reset([self.state.dummy_slot])  # capture's warm-ups decoded padding into the dummy slot

    def admit(self, slot: int) -> None:
        self.state.reset(to_device(torch.tensor([slot]), self.codec.device))

    def prepare(self, plans: Sequence[ChunkPlan], bucket: int, frames: int) -> tuple[Tensor, Tensor]:
        """Host half: (slot and real frames per row [2, bucket], codes [bucket, 12, frames]), padded."""
        n = len(plans)
        codes = torch.zeros(bucket, 12, frames, dtype=torch.long)
        for i, p in enumerate(plans):
            codes[i, :, : len(p.codes)] = torch.tensor(p.codes, dtype=torch.long).T
        rows = torch.tensor([[p.slot for p in plans] + [self.state.dummy_slot] * (bucket - n),
                             [len(p.codes) for p in plans] + [0] * (bucket - n)])  # [2, bucket]
        return rows, codes

    def launch(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Device half -> audio [bucket, channels, frames * hop] on the device."""
        rows, codes = batch
        bucket, frames = codes.shape[0], codes.shape[2]
        upload(rows, self.rows[:, :bucket])
        upload(codes, self.codes[:bucket, :, :frames])
        return self.graphs.run((bucket, frames))

    def chunk(self, plans: Sequence[ChunkPlan], bucket: int, frames: int) -> Tensor:
        """Decode every plan's frames in one call, padded to `bucket` rows of `frames` frames
        -> audio [bucket, channels, frames * hop] on the device (row b's first n_b * hop samples are real)."""
        return self.launch(self.prepare(plans, bucket, frames))

    def read(self, host: np.ndarray, plans: Sequence[ChunkPlan]) -> ChunkBatch:
        """Chunks kept as views would keep a step's pinned buffer (CUDA) alive as long as any of its audio."""
        samples = [len(p.codes) * self.codec.cfg.hop for p in plans]
        return ChunkBatch(host, samples, copy=self.codec.device.type == "cuda")

    def _chunk_step(self, key: tuple[int, ...]) -> Tensor:
        b, f = key
        return self.codec.decode_chunk(self.rows[0, :b], self.codes[:b, :, :f], state=self.state, lengths=self.rows[1, :b])
