"""The talker executor: the kit's paged frame executor (v2/kit/frames.py) with this family's model,
state and packed row.

Owns: the talker's device-side state besides what every frame executor has (per slot the x-vector its
prompt's speaker row adds, the set of group-0 ids chosen so far for the repetition penalty, its sampling
settings and seed), writing a request's settings at admission, what a fork adds (the x-vector), embedding
prompt rows (`embed_rows`: text id -> P(id), codec id -> E_0, SPEAKER -> the slot's x-vector, G codes ->
frame(codes), summed) for the prompt forward, and the frame step over the static inputs (a captured graph
per (batch bucket, keys attended) on CUDA, the same static-buffer step eagerly on a CPU). The frame step
for B rows: group 0 of frame t from h (the reference's rule: penalty, EOS masked before the floor,
control ids suppressed, then the row's sampling), the code predictor's G-1 inner steps over a per-frame
cache, the frame's row frame(codes) + P(text id: the inputs' `feed`) through the talker -> h for frame
t + 1; one packed float32 result [B, 1 + 2G] (stop, G codes, G logprobs), read back as `FrameBatch`.
Must not know: requests, loops' state, scheduling policy, which blocks are free, threads.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from v2.families.qwen3_tts.rows import embed_rows
from v2.models.kernels import kernels_on
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors, head_needs_full_sort
from v2.runtime.device import upload
from v2.kit.frames import FrameBatch, OnStream, PagedFrames

__all__ = ["FrameBatch", "OnStream", "TalkerExecutor"]


class TalkerExecutor(PagedFrames):
    """Talker + code predictor over slot-indexed state and a paged KV pool (`num_slots` real slots and one
    dummy, `num_blocks` blocks of `block_size` rows and one dummy)."""

    def __init__(self, model: Qwen3TTS, *, num_slots: int, max_len: int, batch_buckets: list[int],
                 num_blocks: int, block_size: int = 16, graphs: bool = True) -> None:
        cfg, dev = model.cfg, model.device
        self.groups, self.eos = cfg.num_code_groups, cfg.codec.eos
        h, v = cfg.talker.hidden_size, cfg.talker.vocab_size
        super().__init__(model, model.allocate_paged_kv(num_blocks, block_size), num_slots=num_slots,
                         max_len=max_len, block_size=block_size, hidden_size=h, largest_bucket=batch_buckets[-1],
                         code_width=cfg.num_code_groups, pad_feed=cfg.text.tts_pad,
                         kernels=kernels_on(dev))
        s = num_slots + 1
        self.xvec = torch.zeros(s, h, dtype=model.dtype, device=dev)     # the speaker row's x-vector
        self.seen = torch.zeros(s, v, dtype=torch.bool, device=dev)      # group-0 ids chosen so far
        self.sampling = Qwen3TTSSamplingTensors.build([Qwen3TTSSampling()] * s, [0] * s, dev)
        self.cp_cache = model.talker.code_predictor.allocate_kv(batch_buckets[-1], dtype=model.dtype, device=dev)
        self.capture("qwen3_frame", batch_buckets, enabled=graphs)

    def reset_state(self, slot: int) -> None:
        self.seen[slot] = False

    def fork_state(self, src: int, dst: int) -> None:
        self.xvec[dst] = self.xvec[src]  # the x-vector of a group's shared prompt

    # ----- state changes (queued on the stream by `OnStream`) ------------------------------------
    def admit_host(self, slot: int, settings: Qwen3TTSSampling) -> None:
        self.full_sort.discard(slot)
        if head_needs_full_sort(settings.talker) or head_needs_full_sort(settings.subtalker):
            self.full_sort.add(slot)

    @torch.no_grad()
    def admit_device(self, slot: int, settings: Qwen3TTSSampling, seed: int, xvec: Tensor | None) -> None:
        """The slot's settings, seed, penalty set and x-vector: pinned copies and fills, no host sync."""
        row = Qwen3TTSSamplingTensors.build([settings], [seed])
        s = self.sampling
        for dst, src in ((s.temperature, row.temperature), (s.top_k, row.top_k), (s.top_p, row.top_p),
                         (s.penalty, row.penalty), (s.seed, row.seed)):
            upload(src[0], dst[slot])
        self.seen[slot] = False
        if xvec is None:
            self.xvec[slot] = 0
        else:
            upload(xvec.to(self.xvec.dtype), self.xvec[slot])

    # ----- prefill -------------------------------------------------------------------------------
    def embed_rows(self, rows: Tensor, slots: Tensor) -> Tensor:
        """rows [B, W, 2 + G] int64 on the device, slots [B] -> talker inputs [B, W, H] (`rows.embed_rows`)."""
        return embed_rows(self.model, rows, self.xvec[slots][:, None])

    def pad_rows(self, batch: int, width: int) -> Tensor:
        return torch.full((batch, width, 2 + self.groups), -1, dtype=torch.long)  # [B, W, 2 + G]

    def forward_prompt(self, rows: Tensor, slots: Tensor, positions: Tensor, valid: Tensor, context: int) -> Tensor:
        x = self.embed_rows(rows, slots)
        return self.model.talker.model.forward_cached(x.to(self.model.dtype), self.kv, self.tables[slots],
                                                      positions, valid, context)  # [B, W, H]

    # ----- the frame step ------------------------------------------------------------------------
    @torch.no_grad()
    def frame_step(self, key: tuple[int, ...]) -> Tensor:
        b, context, full = key
        m, x = self.model, self.inputs
        slots, positions, steps = x.slot[:b], x.position[:b], x.step[:b]
        allow, valid = x.allow_stop[:b].bool(), x.valid[:b].bool()
        s = dataclasses.replace(self.sampling.rows(slots), full_sort=bool(full))
        h = self.hidden[slots]
        draws = m.draws(s, steps)  # group 0 and groups 1..G-1 of frame `steps`: one sampler for the frame
        c0, lp0 = m.choose(m.group0_logits(h), s, steps, seen=self.seen[slots], allow_eos=allow, draws=draws)
        self.seen[slots, c0] = True  # padding rows mark only the dummy slot's
        frame = m.predict_codes(h, c0, s, steps, valid=valid, cache=self.cp_cache, draws=draws, return_logits=False)
        row = m.frame_row(frame) + m.embed_text(x.feed[:b]).to(m.dtype)  # [b, H]
        out = m.talker.model.forward_cached(row[:, None], self.kv, self.tables[slots], positions[:, None],
                                            valid[:, None], context)  # [b, 1, H]
        self.hidden[slots] = out[:, 0]
        return torch.cat([(c0 == self.eos).float()[:, None], frame.codes.float(), lp0.float()[:, None],
                          frame.logprobs.float()], dim=1)
