"""The plumbing of a streaming codec executor: a batch of AUDIO_CHUNK plans -> static buffers -> one decode call
-> audio rows; for any family whose codec decodes frames in chunks over slot-indexed streaming state.

Owns: `ChunkExecutor`, the base of a family's codec executor: the codec's per-slot streaming state (a dummy
slot for padding rows), fresh state for an admitted stream (`admit`), the static inputs (slot and real
frames per row, and the codes, frame-major [bucket, frames, width] or width-major [bucket, width, frames];
allocated once at the largest buckets), an AUDIO_CHUNK batch in two halves (`pack`: host tensors only,
codes above `max_code` clamped to it; `launch`: upload and run through `StepGraphs`), reading a batch's
audio back as `ChunkBatch` (each row trimmed to its real frames' samples), and the executor the family
registers under AUDIO_CHUNK (`executor`). `ChunkBatch`: a batch's host audio, mono [bucket, n] or
[bucket, channels, n].
What the codec gives: `allocate_state(num_slots)` (with `dummy_slot` and `reset(slots)`),
`decode_chunk(slots, codes, state=, lengths=)` -> audio on the device, `device`; the family gives the
codes' width and layout, the codec's hop (samples per frame) and the graphs' name.
Must not know: requests, loops' state, scheduling policy, threads, any codec's layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.kit.chunks import ChunkPlan
from v2.runtime.device import to_device, upload
from v2.runtime.family import Batch, Halves
from v2.runtime.graphs import StepGraphs


@dataclass(slots=True)
class ChunkBatch:
    """An AUDIO_CHUNK batch's result on the host: row i's audio is its first `samples[i]` samples."""

    host: np.ndarray    # [bucket, frames * hop] (mono) or [bucket, channels, frames * hop] float32
    samples: list[int]
    copy: bool = False  # the host copy is pinned memory (CUDA): hand out copies, so it goes back at once

    def audio(self, i: int) -> np.ndarray:
        """Row i's chunk, float32 [channels, n] ([1, n] for mono): a view of the batch's host copy (each
        channel's samples contiguous), or a copy of the real samples when that host copy is pinned."""
        view = self.host[i, :, : self.samples[i]] if self.host.ndim == 3 else self.host[i : i + 1, : self.samples[i]]
        return np.array(view) if self.copy else view

    __getitem__ = audio

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[np.ndarray]:
        return map(self.audio, range(len(self.samples)))


class ChunkExecutor:
    """A codec over slot-indexed streaming state; `num_slots` real slots and one dummy. `name`: the step
    graphs' name; `width`: codes per frame; `hop`: samples per frame; `frame_major`: the codec takes codes
    [B, frames, width] (else [B, width, frames]); `max_code`: codes above it are clamped to it (ids a model
    makes that are no code of the codec; None: none)."""

    def __init__(self, codec: Any, name: str, *, width: int, hop: int, num_slots: int, batch_buckets: list[int],
                 frame_buckets: list[int], graphs: bool = True, frame_major: bool = True,
                 max_code: int | None = None) -> None:
        self.codec, self.width, self.hop, self.frame_major, self.max_code = codec, width, hop, frame_major, max_code
        self.state = codec.allocate_state(num_slots)
        dev = codec.device
        # static inputs, [largest bucket]: slot and real frames per row, and the codes
        self.rows = torch.zeros(2, batch_buckets[-1], dtype=torch.long, device=dev)
        self.rows[0] = self.state.dummy_slot
        self.codes = torch.zeros(batch_buckets[-1], *self._layout(frame_buckets[-1]), dtype=torch.long, device=dev)
        keys = [(b, f) for b in batch_buckets for f in frame_buckets]
        self.graphs = StepGraphs(name, self._chunk_step, keys, device=dev, enabled=graphs)
        self.graphs.capture()
        self.state.reset([self.state.dummy_slot])  # capture's warm-ups decoded padding into the dummy slot

    def _layout(self, frames: int) -> tuple[int, int]:
        """One row's codes: (frames, width) frame-major, else (width, frames)."""
        return (frames, self.width) if self.frame_major else (self.width, frames)

    def admit(self, slot: int) -> None:
        self.state.reset(to_device(torch.tensor([slot]), self.codec.device))

    def pack(self, plans: Sequence[ChunkPlan], bucket: int, frames: int) -> tuple[Tensor, Tensor]:
        """Host half: (slot and real frames per row [2, bucket], codes [bucket, frames, width] or
        [bucket, width, frames]), padded."""
        n = len(plans)
        codes = torch.zeros(bucket, *self._layout(frames), dtype=torch.long)
        for i, p in enumerate(plans):
            row = torch.tensor(p.codes, dtype=torch.long)  # [frames, width]
            if self.frame_major:
                codes[i, : len(p.codes)] = row
            else:
                codes[i, :, : len(p.codes)] = row.T
        if self.max_code is not None:
            codes.clamp_(max=self.max_code)
        rows = torch.tensor([[p.slot for p in plans] + [self.state.dummy_slot] * (bucket - n),
                             [len(p.codes) for p in plans] + [0] * (bucket - n)])  # [2, bucket]
        return rows, codes

    def launch(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Device half -> audio [bucket, (channels,) frames * hop] on the device."""
        rows, codes = batch
        bucket, frames = codes.shape[0], codes.shape[1 if self.frame_major else 2]
        upload(rows, self.rows[:, :bucket])
        upload(codes, self.codes[:bucket, :frames] if self.frame_major else self.codes[:bucket, :, :frames])
        return self.graphs.run((bucket, frames))

    def read(self, host: np.ndarray, plans: Sequence[ChunkPlan]) -> ChunkBatch:
        """Chunks kept as views would keep a step's pinned buffer (CUDA) alive as long as any of its audio."""
        samples = [len(p.codes) * self.hop for p in plans]
        return ChunkBatch(host, samples, copy=self.codec.device.type == "cuda")

    def executor(self) -> Halves:
        """This executor under AUDIO_CHUNK: a batch's plans' payloads, padded to its bucket and its plans' frame
        bucket (each call looks its half up on this object when it runs)."""
        return Halves(lambda b: self.pack(_payloads(b), b.bucket, b.plans[0].signature.bucket),
                      lambda prepared: self.launch(prepared), lambda host, b: self.read(host, _payloads(b)))

    def _chunk_step(self, key: tuple[int, ...]) -> Tensor:
        b, f = key
        codes = self.codes[:b, :f] if self.frame_major else self.codes[:b, :, :f]
        return self.codec.decode_chunk(self.rows[0, :b], codes, state=self.state, lengths=self.rows[1, :b])


def _payloads(batch: Batch) -> list[Any]:
    return [p.payload for p in batch.plans]
