"""The codec executor: a batch of AUDIO_CHUNK plans -> static buffers -> one streaming Mimi decode -> audio rows.

Owns: Mimi's per-slot streaming state (`MimiState`; a dummy slot for padding rows), fresh state for an
admitted stream, the static inputs (slot and real frames per row, the codes frame-major [bucket, frames,
N]; allocated once at the largest buckets), an AUDIO_CHUNK batch in two halves (`prepare` host tensors,
`launch` upload and run through `StepGraphs`), and reading a batch's audio back as `ChunkBatch` (each
row's real frames' samples, mono). The model's spare ids (codebook_size .. vocab - 1: 2048..2050 in the
release, which no logits processor of the reference masks) are not codec codes: they reach the decoder
clamped to the last code, as vllm-omni's CSM does (the result's codes keep the ids the model chose). The concatenated chunks of a stream equal the whole decode bit for bit
(the decoder's own promise: `MimiModel.decode` is `decode_chunk` from a fresh state).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.families.csm.codec import ChunkPlan
from v2.runtime.device import to_device, upload
from v2.runtime.graphs import StepGraphs


@dataclass(slots=True)
class ChunkBatch:
    """An AUDIO_CHUNK batch's result on the host: row i's audio is its first `samples[i]` samples."""

    host: np.ndarray    # [bucket, frames * hop] float32
    samples: list[int]
    copy: bool = False

    def audio(self, i: int) -> np.ndarray:
        """Row i's chunk, float32 [1, n]."""
        view = self.host[i : i + 1, : self.samples[i]]
        return np.array(view) if self.copy else view

    __getitem__ = audio

    def __len__(self) -> int:
        return len(self.samples)


class CodecExecutor:
    def __init__(self, codec: Any, *, num_slots: int, batch_buckets: list[int], frame_buckets: list[int],
                 graphs: bool = True) -> None:
        self.codec = codec
        self.state = codec.allocate_state(num_slots)
        dev, width = codec.device, codec.cfg.num_quantizers
        self.rows = torch.zeros(2, batch_buckets[-1], dtype=torch.long, device=dev)
        self.rows[0] = self.state.dummy_slot
        self.codes = torch.zeros(batch_buckets[-1], frame_buckets[-1], width, dtype=torch.long, device=dev)
        keys = [(b, f) for b in batch_buckets for f in frame_buckets]
        self.graphs = StepGraphs("csm_audio_chunk", self._chunk_step, keys, device=dev, enabled=graphs)
        self.graphs.capture()
        self.state.reset([self.state.dummy_slot])

    def admit(self, slot: int) -> None:
        self.state.reset(to_device(torch.tensor([slot]), self.codec.device))

    def prepare(self, plans: Sequence[ChunkPlan], bucket: int, frames: int) -> tuple[Tensor, Tensor]:
        """Host half: (slot and real frames per row [2, bucket], codes [bucket, frames, N]), padded."""
        n = len(plans)
        codes = torch.zeros(bucket, frames, self.codec.cfg.num_quantizers, dtype=torch.long)
        for i, p in enumerate(plans):
            codes[i, : len(p.codes)] = torch.tensor(p.codes, dtype=torch.long)
        codes.clamp_(max=self.codec.cfg.codebook_size - 1)  # spare ids are no codec codes
        rows = torch.tensor([[p.slot for p in plans] + [self.state.dummy_slot] * (bucket - n),
                             [len(p.codes) for p in plans] + [0] * (bucket - n)])  # [2, bucket]
        return rows, codes

    def launch(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Device half -> audio [bucket, frames * hop] on the device."""
        rows, codes = batch
        bucket, frames = codes.shape[0], codes.shape[1]
        upload(rows, self.rows[:, :bucket])
        upload(codes, self.codes[:bucket, :frames])
        return self.graphs.run((bucket, frames))

    def read(self, host: np.ndarray, plans: Sequence[ChunkPlan]) -> ChunkBatch:
        samples = [len(p.codes) * self.codec.hop for p in plans]
        return ChunkBatch(host, samples, copy=self.codec.device.type == "cuda")

    def _chunk_step(self, key: tuple[int, ...]) -> Tensor:
        b, f = key
        return self.codec.decode_chunk(self.rows[0, :b], self.codes[:b, :f], state=self.state, lengths=self.rows[1, :b])
