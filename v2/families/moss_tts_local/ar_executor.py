"""MOSS-TTS-Local's AR executor: the kit's paged frame executor (v2/kit/frames.py) with this
family's model, state and packed row.

Owns: the device-side state of the AR experts besides what every frame executor has (per-slot sampling
settings, seeds and repetition-penalty presence masks); writing a request's settings at admission
(`admit`, or its host and device halves, which `OnStream` queues on the stream); the prompt forward (the
backbone over embedded [T, 13] rows), the padding row (text pad, audio pad codes), and the frame step on
the static inputs: the local transformer's stop decision and 12 codes from each slot's state, the
presence update, the new frame's row through the backbone -> the state for the next frame; one packed
float32 result [B, 26] (stop flag, 12 codes, 13 logprobs), read back as `FrameBatch` (`read`). The
packed frame-row layout is known here and nowhere else (the codec's side: codec_executor.py).
Must not know: requests, loops' state, scheduling policy, which blocks are free, threads.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from v2.models.kernels import kernels_on
from v2.models.moss_tts_local.model import MossTTSLocal
from v2.models.sampling import SamplingTensors
from v2.runtime.device import upload
from v2.kit.frames import FrameBatch, OnStream, PagedFrames, context_buckets
from v2.sampling_settings import CHANNELS, SamplingSettings, needs_full_sort

FRAME_FIELDS = 1 + 12 + CHANNELS  # packed AR_FRAME row: stop, 12 codes, 13 logprobs (this family's widths)
__all__ = ["ARExecutor", "FRAME_FIELDS", "FrameBatch", "OnStream", "context_buckets", "read"]


def read(host: np.ndarray, n: int) -> FrameBatch:
    """host: the packed [bucket, 26] float32 result (stop flag, 12 codes, 13 logprobs per row)."""
    return FrameBatch.read(host, n, 12)


class ARExecutor(PagedFrames):
    """Backbone + local transformer over slot-indexed state and a paged KV pool; `num_slots` real slots and
    one dummy, `num_blocks` blocks of `block_size` rows and one dummy. Default `num_blocks`: every slot at
    `max_len` rows (the contiguous cache's memory)."""

    def __init__(self, model: MossTTSLocal, *, num_slots: int, max_len: int, batch_buckets: list[int],
                 graphs: bool = True, num_blocks: int | None = None, block_size: int = 16) -> None:
        width = -(-max_len // block_size)
        kv = model.allocate_paged_kv(num_slots * width if num_blocks is None else num_blocks, block_size)
        cfg, dev = model.cfg, model.device
        super().__init__(model, kv, num_slots=num_slots, max_len=max_len, block_size=block_size,
                         hidden_size=cfg.hidden_size, largest_bucket=batch_buckets[-1], code_width=12,
                         kernels=kernels_on(dev))
        s = num_slots + 1
        self.sampling = SamplingTensors.build([SamplingSettings()] * s, [0] * s, dev)
        self.presence = torch.zeros(s, cfg.n_vq, cfg.codebook_size, dtype=torch.bool, device=dev)
        self.capture("ar_frame", batch_buckets, enabled=graphs)

    def reset_state(self, slot: int) -> None:
        self.presence[slot] = False

    def pad_rows(self, batch: int, width: int) -> Tensor:
        cfg = self.model.cfg
        rows = torch.full((batch, width, cfg.row_width), cfg.audio_pad_code, dtype=torch.long)  # [B, W, 13]
        rows[..., 0] = cfg.ids.pad
        return rows

    def forward_prompt(self, rows: Tensor, slots: Tensor, positions: Tensor, valid: Tensor, context: int) -> Tensor:
        m = self.model
        return m.transformer.forward_cached(m.embed_rows(rows), self.kv, self.tables[slots], positions, valid, context)

    def admit(self, slot: int, settings: SamplingSettings, seed: int) -> None:
        """Write a new request's sampling settings and seed into its slot and clear its presence mask."""
        self.admit_host(slot, settings)
        self.admit_device(slot, settings, seed)

    def admit_host(self, slot: int, settings: SamplingSettings) -> None:
        """The host's record of the slot (whether its settings need the full sort)."""
        self.full_sort.discard(slot)
        if needs_full_sort(settings):
            self.full_sort.add(slot)

    @torch.no_grad()
    def admit_device(self, slot: int, settings: SamplingSettings, seed: int) -> None:
        """The slot's settings, seed and presence on the device: pinned copies and fills, no host sync."""
        row = SamplingTensors.build([settings], [seed])  # on the host
        s = self.sampling
        for dst, src in ((s.temperature, row.temperature), (s.top_k, row.top_k), (s.top_p, row.top_p),
                         (s.penalty, row.penalty), (s.seed, row.seed)):
            upload(src[0], dst[slot])
        self.presence[slot] = False

    @torch.no_grad()
    def frame_step(self, key: tuple[int, ...]) -> Tensor:
        """The whole frame step on the static inputs: key = (rows, keys attended, full sort)."""
        b, context, full = key
        x = self.inputs
        slots, positions, steps = x.slot[:b], x.position[:b], x.step[:b]
        allow, valid = x.allow_stop[:b] != 0, x.valid[:b] != 0  # flags as masks (a comparison, no dtype copy)
        frame = self.model.decode_frame(self.hidden[slots], self.sampling.rows(slots), steps,
                                        presence=self.presence[slots], allow_stop=allow, full_sort=bool(full))
        # padding rows write only the dummy slot's presence, state and KV
        self.presence[slots[:, None], torch.arange(frame.codes.shape[1], device=slots.device), frame.codes] = True
        out = self.model.transformer.forward_cached(frame.next_embed[:, None], self.kv, self.tables[slots],
                                                    positions[:, None], valid[:, None], context)  # [b, 1, H]
        self.hidden[slots] = out[:, 0]
        return torch.cat([frame.stop[:, None], frame.codes, frame.logprobs], dim=1)  # float32: cat converts as it copies
