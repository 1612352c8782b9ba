"""The talker executor: PREFILL and frame-step batches of the talker loop -> static buffers -> one call each.

Owns: the talker's device-side state (the paged KV pool and each slot's block table; per slot the talker
state h its next frame is chosen from, the x-vector its prompt's speaker row adds, the set of group-0 ids
chosen so far for the repetition penalty, its sampling settings and seed), writing a request's settings at
admission, block copies and table entries, forks (a group member takes its leader's state), embedding
prompt rows (`embed_rows`: text id -> P(id), codec id -> E_0, SPEAKER -> the slot's x-vector, G codes ->
frame(codes), summed), a PREFILL batch (eager), and the frame step over the static inputs (`FrameInputs`,
allocated once at the largest bucket; padding rows aim at the dummy slot) through `StepGraphs`: a captured
graph per (batch bucket, keys attended) on CUDA, the same static-buffer step eagerly on a CPU. The frame
step for B rows: group 0 of frame t from h (the reference's rule: penalty, EOS masked before the floor,
control ids suppressed, then the row's sampling), the code predictor's G-1 inner steps over a per-frame
cache, the frame's row frame(codes) + P(text id) through the talker -> h for frame t + 1; one packed
float32 result [B, 1 + 2G] (stop, G codes, G logprobs), read back as `FrameBatch`.
Must not know: requests, loops' state, scheduling policy, which blocks are free, threads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.contracts import bucket_for
from v2.families.qwen3_tts.rows import embed_rows
from v2.families.qwen3_tts.talker import FramePlan, FrameRow, PrefillPlan
from v2.models.kernels import kernels_on
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors, head_needs_full_sort
from v2.runtime.device import to_device, upload
from v2.runtime.graphs import StepGraphs

MIN_CONTEXT_BUCKET = 64
INPUT_ROWS = 6  # slot, position, step, allow_stop, valid, text


def context_buckets(max_len: int) -> list[int]:
    out, b = [], MIN_CONTEXT_BUCKET
    while b < max_len:
        out.append(b)
        b *= 2
    return out + [max_len]


@dataclass(slots=True)
class FrameInputs:
    """The frame step's static inputs [largest bucket]: named views of one packed buffer (one upload)."""

    packed: Tensor
    slot: Tensor
    position: Tensor
    step: Tensor
    allow_stop: Tensor
    valid: Tensor
    text: Tensor

    @classmethod
    def allocate(cls, rows: int, dummy_slot: int, pad_text: int, device: torch.device) -> "FrameInputs":
        packed = torch.zeros(INPUT_ROWS, rows, dtype=torch.long, device=device)
        packed[0] = dummy_slot
        packed[5] = pad_text
        return cls(packed, *packed.unbind(0))


@dataclass(slots=True)
class FrameLaunch:
    host: Tensor                 # [6, bucket] int64
    key: tuple[int, int, int]    # (rows, keys attended, full sort)


@dataclass(slots=True)
class FrameBatch:
    """A frame batch's result on the host, one entry per real row."""

    stop: list[bool]
    codes: list[list[int]]
    logprobs: list[list[float]]

    @classmethod
    def read(cls, host: np.ndarray, n: int, groups: int) -> "FrameBatch":
        """host: [bucket, 1 + 2G] float32 (stop flag, G codes, G logprobs per row)."""
        rows = host[:n]
        return cls((rows[:, 0] > 0.5).tolist(), rows[:, 1 : 1 + groups].astype(np.int64).tolist(),
                   rows[:, 1 + groups :].tolist())

    def row(self, i: int) -> FrameRow:
        return FrameRow(self.stop[i], tuple(self.codes[i]), tuple(self.logprobs[i]))

    __getitem__ = row

    def __len__(self) -> int:
        return len(self.stop)


class TalkerExecutor:
    """Talker + code predictor over slot-indexed state and a paged KV pool (`num_slots` real slots and one
    dummy, `num_blocks` blocks of `block_size` rows and one dummy)."""

    def __init__(self, model: Qwen3TTS, *, num_slots: int, max_len: int, batch_buckets: list[int],
                 num_blocks: int, block_size: int = 16, graphs: bool = True) -> None:
        self.model = model
        cfg, dev = model.cfg, model.device
        self.groups, self.eos = cfg.num_code_groups, cfg.codec.eos
        width = -(-max_len // block_size)
        self.kv = model.allocate_paged_kv(num_blocks, block_size)
        s = num_slots + 1
        h, v = cfg.talker.hidden_size, cfg.talker.vocab_size
        self.tables = torch.full((s, width), self.kv.dummy_block, dtype=torch.long, device=dev)  # [S + 1, W]
        self.hidden = torch.zeros(s, h, dtype=model.dtype, device=dev)   # the state frame t is chosen from
        self.xvec = torch.zeros(s, h, dtype=model.dtype, device=dev)     # the speaker row's x-vector
        self.seen = torch.zeros(s, v, dtype=torch.bool, device=dev)      # group-0 ids chosen so far
        self.sampling = Qwen3TTSSamplingTensors.build([Qwen3TTSSampling()] * s, [0] * s, dev)
        self.full_sort: set[int] = set()
        largest = batch_buckets[-1]
        self.inputs = FrameInputs.allocate(largest, s - 1, cfg.text.tts_pad, dev)
        self.cp_cache = model.talker.code_predictor.allocate_kv(largest, dtype=model.dtype, device=dev)
        self.contexts = [max_len] if kernels_on(dev) else context_buckets(max_len)
        keys = [(b, c, 1) for b in batch_buckets for c in self.contexts]
        self.graphs = StepGraphs("qwen3_frame", self._frame_step, keys, device=dev, enabled=graphs)
        self.graphs.capture()
        self.reset_dummy()

    @property
    def dummy_slot(self) -> int:
        return self.tables.shape[0] - 1

    def reset_dummy(self) -> None:
        d = self.dummy_slot
        self.hidden[d] = 0
        self.seen[d] = False
        self.kv.k[:, self.kv.dummy_block] = 0
        self.kv.v[:, self.kv.dummy_block] = 0

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

    @torch.no_grad()
    def apply(self, copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> None:
        """Block copies (all read before any write), then table entries (the last for a place wins)."""
        host = self.kv.block_ops(copies, entries)
        if host is not None:
            self.kv.apply_block_ops(to_device(host, self.model.device), len(copies), self.tables)

    @torch.no_grad()
    def fork(self, src: int, dst: int) -> None:
        """Slot `dst` takes slot `src`'s talker state and x-vector (a group's shared prompt)."""
        self.hidden[dst] = self.hidden[src]
        self.xvec[dst] = self.xvec[src]

    # ----- prefill -------------------------------------------------------------------------------
    def embed_rows(self, rows: Tensor, slots: Tensor) -> Tensor:
        """rows [B, W, 2 + G] int64 on the device, slots [B] -> talker inputs [B, W, H] (`rows.embed_rows`)."""
        return embed_rows(self.model, rows, self.xvec[slots][:, None])

    @torch.no_grad()
    def prefill(self, plans: Sequence[PrefillPlan]) -> None:
        """Prompt chunks of several requests in one right-padded call; a last chunk sets its slot's state."""
        dev = self.model.device
        width = max(int(p.rows.shape[0]) for p in plans)
        b = len(plans)
        rows = torch.full((b, width, 2 + self.groups), -1, dtype=torch.long)  # [B, W, 2 + G]
        lengths = torch.tensor([int(p.rows.shape[0]) for p in plans])
        for i, p in enumerate(plans):
            rows[i, : lengths[i]] = p.rows
        starts = torch.tensor([p.start for p in plans])
        positions = to_device(starts[:, None] + torch.arange(width), dev)  # [B, W]
        valid = to_device(torch.arange(width)[None] < lengths[:, None], dev)  # [B, W]
        slots = to_device(torch.tensor([p.slot for p in plans]), dev)
        context = int((starts + lengths).max())
        x = self.embed_rows(to_device(rows, dev), slots)
        out = self.model.talker.model.forward_cached(x.to(self.model.dtype), self.kv, self.tables[slots],
                                                     positions, valid, context)  # [B, W, H]
        last = [i for i, p in enumerate(plans) if p.last]
        if last:
            idx = to_device(torch.tensor(last), dev)
            self.hidden[slots[idx]] = out[idx, to_device(lengths[last] - 1, dev)]

    # ----- the frame step ------------------------------------------------------------------------
    def prepare(self, plans: Sequence[FramePlan], bucket: int) -> FrameLaunch:
        """Host half: the plans as the static inputs' rows (padding rows -> dummy slot) and the graph key."""
        n = len(plans)
        host = torch.zeros(INPUT_ROWS, bucket, dtype=torch.long)  # [6, bucket]
        host[0, n:] = self.dummy_slot
        host[5, n:] = self.model.cfg.text.tts_pad
        host[4, :n] = 1
        host[[0, 1, 2, 3, 5], :n] = torch.tensor([(p.slot, p.position, p.step, p.allow_stop, p.feed)
                                                  for p in plans]).T
        context = int(host[1, :n].max()) + 1
        key = (bucket, bucket_for(context, self.contexts), 1)
        if not self.graphs.enabled:
            key = (key[0], key[1], int(any(p.slot in self.full_sort for p in plans)))
        return FrameLaunch(host, key)

    def launch(self, batch: FrameLaunch) -> Tensor:
        """Device half: one upload, then the step -> [bucket, 1 + 2G] float32 on the device."""
        upload(batch.host, self.inputs.packed[:, : batch.key[0]])
        if self.graphs.enabled:
            return self.graphs.run(batch.key)
        self.graphs.fallbacks[self.graphs.reason_off] += 1
        return self._frame_step(batch.key)

    @torch.no_grad()
    def _frame_step(self, key: tuple[int, ...]) -> Tensor:
        b, context, full = key
        m, x = self.model, self.inputs
        slots, positions, steps = x.slot[:b], x.position[:b], x.step[:b]
        allow, valid = x.allow_stop[:b].bool(), x.valid[:b].bool()
        s = dataclasses.replace(self.sampling.rows(slots), full_sort=bool(full))
        h = self.hidden[slots]
        c0, lp0 = m.choose(m.group0_logits(h), s, steps, seen=self.seen[slots], allow_eos=allow)
        self.seen[slots, c0] = True  # padding rows mark only the dummy slot's
        frame = m.predict_codes(h, c0, s, steps, valid=valid, cache=self.cp_cache)
        row = m.embed_frame(frame.codes) + m.embed_text(x.text[:b]).to(m.dtype)  # [b, H]
        out = m.talker.model.forward_cached(row[:, None], self.kv, self.tables[slots], positions[:, None],
                                            valid[:, None], context)  # [b, 1, H]
        self.hidden[slots] = out[:, 0]
        return torch.cat([(c0 == self.eos).float()[:, None], frame.codes.float(), lp0.float()[:, None],
                          frame.logprobs.float()], dim=1)


class OnStream:
    """The talker executor's state changes, queued on the device stream in order with the steps."""

    def __init__(self, target: TalkerExecutor, launch: Callable[[Callable[[], Any]], Any]) -> None:
        self.target, self._launch = target, launch

    @property
    def kv(self) -> Any:
        return self.target.kv

    def admit(self, slot: int, settings: Qwen3TTSSampling, seed: int, xvec: Tensor | None) -> None:
        self.target.admit_host(slot, settings)
        self._launch(lambda: self.target.admit_device(slot, settings, seed, xvec))

    def apply(self, copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> None:
        if copies or entries:
            self._launch(lambda: self.target.apply(copies, entries))

    def fork(self, src: int, dst: int) -> None:
        self._launch(lambda: self.target.fork(src, dst))
