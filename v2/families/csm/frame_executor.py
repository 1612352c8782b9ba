"""The frame executor: the kit's paged frame executor (v2/kit/frames.py) with CSM's model, state and
packed row.

Owns: the backbone's device-side state besides what every frame executor has (per slot its sampling
settings and seed), writing a request's settings at admission, embedding prompt rows (`rows.embed_rows`)
for the prompt forward, and the frame step over the static inputs (a captured graph per (batch bucket,
keys attended) on CUDA, the same static-buffer step eagerly on a CPU). The frame step for B rows: codebook
0 of frame t from lm_head(h) (the row's backbone sampling; noise counter t * N), the depth decoder's N-1
codebooks over a per-frame cache (counters t * N + k), the stop flag (codebooks 0..N-2 all
`codebook_eos`), then the frame's audio row through the backbone at its position -> h for frame t + 1;
one packed float32 result [B, 1 + 2N] (stop, N codes, N logprobs), read back as `FrameBatch`.
Must not know: requests, loops' state, scheduling policy, which blocks are free, threads.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from v2.families.csm.rows import embed_rows
from v2.models.csm.config import CsmSampling
from v2.models.csm.model import Csm
from v2.models.csm.sampling import CsmSamplingTensors, head_needs_full_sort
from v2.models.kernels import kernels_on
from v2.runtime.device import upload
from v2.kit.frames import FrameBatch, OnStream, PagedFrames

__all__ = ["FrameBatch", "FrameExecutor", "OnStream"]


class FrameExecutor(PagedFrames):
    """Backbone + depth decoder over slot-indexed state and a paged KV pool (`num_slots` real slots and one
    dummy, `num_blocks` blocks of `block_size` rows and one dummy)."""

    def __init__(self, model: Csm, *, num_slots: int, max_len: int, batch_buckets: list[int], num_blocks: int,
                 block_size: int = 16, graphs: bool = True) -> None:
        cfg, dev = model.cfg, model.device
        self.width = cfg.num_codebooks
        super().__init__(model, model.allocate_paged_kv(num_blocks, block_size), num_slots=num_slots,
                         max_len=max_len, block_size=block_size, hidden_size=cfg.hidden_size,
                         largest_bucket=batch_buckets[-1], code_width=cfg.num_codebooks,
                         kernels=kernels_on(dev))
        s = num_slots + 1
        self.sampling = CsmSamplingTensors.build([CsmSampling()] * s, [0] * s, dev)
        self.depth_cache = model.allocate_depth_kv(batch_buckets[-1])
        self.capture("csm_frame", batch_buckets, enabled=graphs)

    # ----- state changes (queued on the stream by `OnStream`) ------------------------------------
    def admit_host(self, slot: int, settings: CsmSampling) -> None:
        self.full_sort.discard(slot)
        if head_needs_full_sort(settings.backbone) or head_needs_full_sort(settings.depth):
            self.full_sort.add(slot)

    @torch.no_grad()
    def admit_device(self, slot: int, settings: CsmSampling, seed: int) -> None:
        """The slot's settings and seed: pinned copies, no host sync."""
        row = CsmSamplingTensors.build([settings], [seed])
        s = self.sampling
        for dst, src in ((s.temperature, row.temperature), (s.top_k, row.top_k), (s.top_p, row.top_p),
                         (s.seed, row.seed)):
            upload(src[0], dst[slot])

    # ----- prefill -------------------------------------------------------------------------------
    def pad_rows(self, batch: int, width: int) -> Tensor:
        return torch.full((batch, width, 1 + self.width), -1, dtype=torch.long)  # [B, W, 1 + N]

    def forward_prompt(self, rows: Tensor, slots: Tensor, positions: Tensor, valid: Tensor, context: int) -> Tensor:
        m = self.model
        x = embed_rows(m, rows).to(m.dtype)  # [B, W, H]
        return m.backbone_model.forward_cached(x, self.kv, self.tables[slots], positions, valid, context)  # [B, W, H]

    # ----- the frame step ------------------------------------------------------------------------
    @torch.no_grad()
    def frame_step(self, key: tuple[int, ...]) -> Tensor:
        b, context, full = key
        m, x = self.model, self.inputs
        slots, positions, steps, valid = x.slot[:b], x.position[:b], x.step[:b], x.valid[:b].bool()
        s = dataclasses.replace(self.sampling.rows(slots), full_sort=bool(full))
        h = self.hidden[slots]
        done = m.complete_frame(h, m.c0_logits(h), s, steps, valid=valid, depth_cache=self.depth_cache)
        row = m.embed_frame(done.codes)  # [b, H]
        out = m.backbone_model.forward_cached(row[:, None], self.kv, self.tables[slots], positions[:, None],
                                              valid[:, None], context)  # [b, 1, H]
        self.hidden[slots] = out[:, 0]
        return torch.cat([done.stop.float()[:, None], done.codes.float(), done.logprobs.float()], dim=1)
