"""Executors: a batch of plans -> tensors -> one expert call -> device results.

Owns: the device-side per-slot state of the AR experts (KV cache, the backbone state each slot decodes
its next frame from, per-slot sampling settings, seeds and repetition-penalty presence masks) and of the
vocoder (codec streaming state); writing a request's settings at admission; running a PREFILL batch,
an AR_FRAME batch (padded rows aimed at the dummy slot) and an AUDIO_CHUNK batch; and the one
device-to-host copy per step.
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from v2.loops.ar_decode import FramePlan, PrefillPlan
from v2.loops.vocoder import ChunkPlan
from v2.models.codec import MossAudioDecoder
from v2.models.moss_tts_local import MossTTSLocal
from v2.models.sampling import CHANNELS, SamplingSettings, SamplingTensors, needs_full_sort

FRAME_FIELDS = 1 + 12 + CHANNELS  # packed AR_FRAME row: stop, 12 codes, 13 logprobs


class ARExecutor:
    """Backbone + local transformer over slot-indexed state; `num_slots` real slots and one dummy."""

    def __init__(self, model: MossTTSLocal, *, num_slots: int, max_len: int) -> None:
        self.model = model
        self.kv = model.allocate_kv(num_slots, max_len)
        s, dev = num_slots + 1, model.device
        cfg = model.cfg
        self.hidden = torch.zeros(s, cfg.hidden_size, dtype=model.dtype, device=dev)
        self.sampling = SamplingTensors.build([SamplingSettings()] * s, [0] * s, dev)
        self.presence = torch.zeros(s, cfg.n_vq, cfg.codebook_size, dtype=torch.bool, device=dev)
        self.full_sort: set[int] = set()  # slots whose codebook settings need the full sort (host side)

    @property
    def dummy_slot(self) -> int:
        return self.kv.dummy_slot

    def admit(self, slot: int, settings: SamplingSettings, seed: int) -> None:
        """Write a new request's sampling settings and seed into its slot and clear its presence mask."""
        row = SamplingTensors.build([settings], [seed], self.model.device)
        s = self.sampling
        for dst, src in ((s.temperature, row.temperature), (s.top_k, row.top_k), (s.top_p, row.top_p),
                         (s.penalty, row.penalty), (s.seed, row.seed)):
            dst[slot] = src[0]
        self.presence[slot] = False
        self.full_sort.discard(slot)
        if needs_full_sort(settings):
            self.full_sort.add(slot)

    @torch.no_grad()
    def prefill(self, plans: Sequence[PrefillPlan]) -> None:
        """Prompt chunks of several requests in one right-padded call; a last chunk sets its slot's state."""
        dev = self.model.device
        width = max(int(p.rows.shape[0]) for p in plans)
        b = len(plans)
        rows = torch.full((b, width, self.model.cfg.row_width), self.model.cfg.audio_pad_code, dtype=torch.long)
        rows[..., 0] = self.model.cfg.ids.pad
        lengths = torch.tensor([int(p.rows.shape[0]) for p in plans])
        for i, p in enumerate(plans):
            rows[i, : lengths[i]] = p.rows
        starts = torch.tensor([p.start for p in plans])
        positions = (starts[:, None] + torch.arange(width)).to(dev)  # [B, W]
        valid = (torch.arange(width)[None] < lengths[:, None]).to(dev)  # [B, W]
        slots = torch.tensor([p.slot for p in plans], device=dev)
        context = int((starts + lengths).max())
        out = self.model.transformer.forward_cached(self.model.embed_rows(rows.to(dev)), self.kv, slots, positions,
                                                    valid, context)  # [B, W, H]
        last = [i for i, p in enumerate(plans) if p.last]
        if last:
            idx = torch.tensor(last, device=dev)
            self.hidden[slots[idx]] = out[idx, (lengths[last] - 1).to(dev)]

    @torch.no_grad()
    def frame(self, plans: Sequence[FramePlan], bucket: int) -> Tensor:
        """One frame for every plan, padded to `bucket` rows -> packed [bucket, 26] float32 on the device:
        stop flag, 12 codes, 13 logprobs per row (padding rows last, meaningless)."""
        dev, n = self.model.device, len(plans)
        pad = bucket - n
        slots = torch.tensor([p.slot for p in plans] + [self.dummy_slot] * pad, device=dev)
        positions = torch.tensor([p.position for p in plans] + [0] * pad, device=dev)
        steps = torch.tensor([p.step for p in plans] + [0] * pad, device=dev)
        allow = torch.tensor([p.allow_stop for p in plans] + [True] * pad, device=dev)
        valid = torch.tensor([True] * n + [False] * pad, device=dev)
        context = max(p.position for p in plans) + 1
        frame = self.model.decode_frame(self.hidden[slots], self.sampling.rows(slots), steps,
                                        presence=self.presence[slots], allow_stop=allow,
                                        full_sort=any(p.slot in self.full_sort for p in plans))
        self.presence[slots[:n, None], torch.arange(frame.codes.shape[1], device=dev), frame.codes[:n]] = True
        out = self.model.transformer.forward_cached(frame.next_embed[:, None], self.kv, slots, positions[:, None],
                                                    valid[:, None], context)  # [bucket, 1, H]
        self.hidden[slots[:n]] = out[:n, 0]
        return torch.cat([frame.stop[:, None].float(), frame.codes.float(), frame.logprobs], dim=1)


class CodecExecutor:
    """The vocoder over slot-indexed streaming state; `num_slots` real slots and one dummy."""

    def __init__(self, codec: MossAudioDecoder, *, num_slots: int) -> None:
        self.codec = codec
        self.state = codec.allocate_state(num_slots)

    def admit(self, slot: int) -> None:
        self.state.reset([slot])

    @torch.no_grad()
    def chunk(self, plans: Sequence[ChunkPlan], bucket: int, frames: int) -> Tensor:
        """Decode every plan's frames in one call, padded to `bucket` rows of `frames` frames
        -> audio [bucket, channels, frames * hop] on the device (row b's first n_b * hop samples are real)."""
        dev, n = self.codec.device, len(plans)
        codes = torch.zeros(bucket, 12, frames, dtype=torch.long)
        lengths = torch.zeros(bucket, dtype=torch.long)
        for i, p in enumerate(plans):
            codes[i, :, : len(p.codes)] = torch.tensor(p.codes, dtype=torch.long).T
            lengths[i] = len(p.codes)
        slots = torch.tensor([p.slot for p in plans] + [self.state.dummy_slot] * (bucket - n), device=dev)
        return self.codec.decode_chunk(slots, codes.to(dev), state=self.state, lengths=lengths.to(dev))


def to_host(tensors: Sequence[Tensor]) -> list[np.ndarray]:
    """The step's single device-to-host transfer: every result tensor copied, then one synchronisation."""
    if not tensors:
        return []
    wide = [t.float() if t.dtype in (torch.bfloat16, torch.float16) else t for t in tensors]
    if wide[0].device.type != "cuda":
        return [t.numpy() for t in wide]
    host = [t.to("cpu", non_blocking=True) for t in wide]
    torch.cuda.current_stream(wide[0].device).synchronize()
    return [h.numpy() for h in host]
