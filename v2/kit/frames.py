"""The plumbing of a paged frame executor: what every family's AR executor does besides its model's step.

Owns: `PagedFrames`, the base of a family's AR executor over slot-indexed state and a paged KV pool
(`num_slots` real slots and one dummy; a slot's KV row p lives in block `tables[slot, p // block_size]`,
written by `apply` as the caller's block manager decides): the block tables, the per-slot backbone state
(`hidden`: what the next frame is chosen from), the dummy slot and its reset, block copies and table
writes (`apply`), a group's shared prompt (`fork`), the batched prompt prefill (right-padded chunks of
several requests in one call; a last chunk sets its slot's state), the frame step's packed static inputs
and their one upload (`pack` / `launch`), the context buckets and the step graphs' keys; `FrameBatch`
(a frame batch's packed result read on the host, one `FrameRow` per real row); `OnStream` (the state
changes a family's executor makes, queued on the device stream in order with the steps); its entries under
PREFILL and AR_FRAME (`executors`).
What a subclass gives: its model's prefill forward (`forward_prompt`), its frame step (`frame_step`), the
pad values of its prompt rows (`pad_rows`), its codes per frame (`code_width`, for `read`), its other per-slot state
(`reset_state`, `fork_state`) and
its sampling's host record (`admit_host` / `admit_device`).
Must not know: any family's model, row layout or sampling settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Hashable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.contracts import WorkUnitKind, bucket_for
from v2.runtime.device import to_device, upload
from v2.runtime.family import Batch, Halves
from v2.runtime.graphs import StepGraphs
from v2.kit.sequence import FramePlan, FrameRow, PrefillPlan

MIN_CONTEXT_BUCKET = 64
INPUT_ROWS = 6  # the packed inputs: slot, position, step, allow_stop, valid, feed


def context_buckets(max_len: int) -> list[int]:
    """Key lengths a frame step attends over: powers of two from 64, then the cache length."""
    out, b = [], MIN_CONTEXT_BUCKET
    while b < max_len:
        out.append(b)
        b *= 2
    return out + [max_len]


@dataclass(slots=True)
class FrameInputs:
    """The frame step's static inputs, [largest bucket] each: named views of one packed buffer, so a batch's
    inputs go up in one host-to-device copy."""

    packed: Tensor      # [6, largest bucket] int64: the rows below
    slot: Tensor        # KV / state slot (padding rows: the dummy slot)
    position: Tensor    # where the frame's row goes in the slot's KV
    step: Tensor        # frame index: keys the sampling noise
    allow_stop: Tensor  # 0 before the floor
    valid: Tensor       # 1 for real rows
    feed: Tensor        # the family's per-frame input id (`FramePlan.feed`; padding rows: `pad_feed`)

    @classmethod
    def allocate(cls, rows: int, dummy_slot: int, pad_feed: int, device: torch.device) -> "FrameInputs":
        packed = torch.zeros(INPUT_ROWS, rows, dtype=torch.long, device=device)
        packed[0] = dummy_slot
        packed[5] = pad_feed
        return cls(packed, *packed.unbind(0))


@dataclass(slots=True)
class FrameLaunch:
    """A frame batch's inputs on the host, ready to launch."""

    host: Tensor                  # [6, bucket] int64, the FrameInputs rows
    key: tuple[int, int, int]     # graph key: (rows, keys attended, full sort)


@dataclass(slots=True)
class FrameBatch:
    """A frame batch's result on the host, one entry per real row."""

    stop: list[bool]
    codes: list[list[int]]
    logprobs: list[list[float]]

    @classmethod
    def read(cls, host: np.ndarray, n: int, width: int) -> "FrameBatch":
        """host: the packed [bucket, 1 + width + L] float32 result: a stop flag, `width` codes, L logprobs."""
        rows = host[:n]
        if n <= 2:  # a row or two: one conversion, the fields split on the host (a fraction of the numpy calls)
            stop: list[bool] = []
            codes: list[list[int]] = []
            logprobs: list[list[float]] = []
            for r in rows.tolist():  # (one loop, not three comprehensions: each is a call)
                stop.append(r[0] > 0.5)
                codes.append(list(map(int, r[1 : 1 + width])))
                logprobs.append(r[1 + width :])
            return cls(stop, codes, logprobs)
        return cls((rows[:, 0] > 0.5).tolist(), rows[:, 1 : 1 + width].astype(np.int64).tolist(),
                   rows[:, 1 + width :].tolist())

    def row(self, i: int) -> FrameRow:
        return FrameRow(self.stop[i], tuple(self.codes[i]), tuple(self.logprobs[i]))

    __getitem__ = row

    def __len__(self) -> int:
        return len(self.stop)

    def __iter__(self) -> Iterator[FrameRow]:
        return map(self.row, range(len(self.stop)))


class PagedFrames:
    """Call `super().__init__(...)` first, make the subclass's own state, then `capture(name, ...)`."""

    def __init__(self, model: Any, kv: Any, *, num_slots: int, max_len: int, block_size: int, hidden_size: int,
                 largest_bucket: int, code_width: int, pad_feed: int = 0, kernels: bool = False) -> None:
        self.model, self.kv, self.pad_feed = model, kv, pad_feed
        self.code_width = code_width  # codes per frame in the packed result (`read`)
        s, dev = num_slots + 1, model.device
        width = -(-max_len // block_size)  # blocks of one request at max_len rows
        self.tables = torch.full((s, width), kv.dummy_block, dtype=torch.long, device=dev)  # [S + 1, W]
        self.hidden = torch.zeros(s, hidden_size, dtype=model.dtype, device=dev)
        self.full_sort: set[int] = set()  # slots whose settings need the full sort (host side)
        self.inputs = FrameInputs.allocate(largest_bucket, s - 1, pad_feed, dev)
        # with the decode kernel each row reads its own length through its table, so one graph per batch
        # bucket (grid sized for max_len) serves any lengths; the torch path gathers keys up to a bucket
        self.contexts = [max_len] if kernels else context_buckets(max_len)

    def capture(self, name: str, batch_buckets: list[int], *, enabled: bool) -> None:
        """The step graphs, one per (batch bucket, context bucket), always with the full sort."""
        keys = [(b, c, 1) for b in batch_buckets for c in self.contexts]
        self.graphs = StepGraphs(name, self.frame_step, keys, device=self.model.device, enabled=enabled)
        self.graphs.capture()
        self.reset_dummy()  # capture's warm-ups ran padding rows through the dummy slot

    # ----- what a subclass gives ------------------------------------------------------------------
    def forward_prompt(self, rows: Tensor, slots: Tensor, positions: Tensor, valid: Tensor, context: int) -> Tensor:
        """rows [B, W, width] int64 on the device -> the backbone's output [B, W, H] (KV written)."""
        raise NotImplementedError

    def frame_step(self, key: tuple[int, ...]) -> Tensor:
        """The whole frame step on the static inputs -> the packed [rows, 1 + width + L] float32 result."""
        raise NotImplementedError

    def pad_rows(self, batch: int, width: int) -> Tensor:
        """[batch, width, row width] int64 on the host, filled with the family's padding row."""
        raise NotImplementedError

    def read(self, host: np.ndarray, n: int) -> FrameBatch:
        """A frame batch's packed host result [bucket, 1 + code_width + L] -> its `n` real rows."""
        return FrameBatch.read(host, n, self.code_width)

    def reset_state(self, slot: int) -> None:
        """Clear the subclass's own per-slot state of `slot` (the dummy slot's, after padding rows)."""

    def fork_state(self, src: int, dst: int) -> None:
        """Slot `dst` takes slot `src`'s other per-slot state (a group's shared prompt)."""

    # ----- the shared plumbing --------------------------------------------------------------------
    @property
    def dummy_slot(self) -> int:
        return self.tables.shape[0] - 1

    def reset_dummy(self) -> None:
        """Clear the dummy slot's state and the dummy block (only padding rows touch them)."""
        d = self.dummy_slot
        self.hidden[d] = 0
        self.reset_state(d)
        self.kv.k[:, self.kv.dummy_block] = 0
        self.kv.v[:, self.kv.dummy_block] = 0

    @torch.no_grad()
    def apply(self, copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> None:
        """Copy blocks (source, destination) in every layer, all read before any is written, then write table
        entries (slot, index, block; the last one for a place wins): one host-to-device copy and two indexed
        writes, no sync."""
        host = self.kv.block_ops(copies, entries)
        if host is not None:
            self.kv.apply_block_ops(to_device(host, self.model.device), len(copies), self.tables)

    @torch.no_grad()
    def fork(self, src: int, dst: int) -> None:
        """Slot `dst` takes slot `src`'s backbone state (a group's shared prompt; its blocks are shared)."""
        self.hidden[dst] = self.hidden[src]
        self.fork_state(src, dst)

    @torch.no_grad()
    def prefill(self, plans: Sequence[PrefillPlan]) -> None:
        """Prompt chunks of several requests in one right-padded call; a last chunk sets its slot's state."""
        dev = self.model.device
        width = max(int(p.rows.shape[0]) for p in plans)
        rows = self.pad_rows(len(plans), width)  # [B, W, row width]
        lengths = torch.tensor([int(p.rows.shape[0]) for p in plans])
        for i, p in enumerate(plans):
            rows[i, : lengths[i]] = p.rows
        starts = torch.tensor([p.start for p in plans])
        positions = to_device(starts[:, None] + torch.arange(width), dev)  # [B, W]
        valid = to_device(torch.arange(width)[None] < lengths[:, None], dev)  # [B, W]
        slots = to_device(torch.tensor([p.slot for p in plans]), dev)
        context = int((starts + lengths).max())
        out = self.forward_prompt(to_device(rows, dev), slots, positions, valid, context)  # [B, W, H]
        last = [i for i, p in enumerate(plans) if p.last]
        if last:
            idx = to_device(torch.tensor(last), dev)
            self.hidden[slots[idx]] = out[idx, to_device(lengths[last] - 1, dev)]

    def pack(self, plans: Sequence[FramePlan], bucket: int) -> FrameLaunch:
        """Host half: the plans as the static inputs' rows (padding rows -> dummy slot) and the graph key."""
        pad = bucket - len(plans)
        slots, positions = [p.slot for p in plans], [p.position for p in plans]
        flat = [*slots, *[self.dummy_slot] * pad, *positions, *[0] * pad, *[p.step for p in plans], *[0] * pad,
                *[int(p.allow_stop) for p in plans], *[1] * pad, *[1] * len(plans), *[0] * pad,
                *[p.feed for p in plans], *[self.pad_feed] * pad]
        host = torch.from_numpy(np.array(flat, dtype=np.int64).reshape(INPUT_ROWS, bucket))  # [6, bucket]: one array
        context = max(positions) + 1
        if self.graphs.enabled:
            return FrameLaunch(host, self.graph_key(bucket, context))
        return FrameLaunch(host, (bucket, context, int(not self.full_sort.isdisjoint(slots))))

    def launch(self, batch: FrameLaunch) -> Tensor:
        """Device half: one upload, then the frame step -> its packed result on the device (padding rows
        last, meaningless)."""
        upload(batch.host, self.inputs.packed[:, : batch.key[0]])
        if self.graphs.enabled:
            return self.graphs.run(batch.key)
        self.graphs.fallbacks[self.graphs.reason_off] += 1
        return self.frame_step(batch.key)

    def frame(self, plans: Sequence[FramePlan], bucket: int) -> Tensor:
        """Both halves at once."""
        return self.launch(self.pack(plans, bucket))

    def stage(self, plans: Sequence[FramePlan], bucket: int) -> int:
        """Upload the plans into the static inputs; returns the keys they attend (for benchmarks)."""
        batch = self.pack(plans, bucket)
        upload(batch.host, self.inputs.packed[:, :bucket])
        return int(batch.host[1, : len(plans)].max()) + 1

    def graph_key(self, bucket: int, context: int) -> tuple[int, int, int]:
        return (bucket, bucket_for(context, self.contexts), 1)

    def executors(self) -> dict[Hashable, Halves]:
        """This executor under PREFILL (a batch's prompt chunks, nothing read back) and AR_FRAME (a batch's frames
        padded to its bucket, read back as a `FrameBatch`)."""
        return {WorkUnitKind.PREFILL: Halves(_payloads, self.prefill, lambda host, b: [None] * len(b.plans)),
                WorkUnitKind.AR_FRAME: Halves(lambda b: self.pack(_payloads(b), b.bucket), self.launch,
                                              lambda host, b: self.read(host, len(b.plans)))}


def _payloads(batch: Batch) -> list[Any]:
    return list(map(_payload, batch.plans))


_payload = attrgetter("payload")


class OnStream:
    """A frame executor's state changes, launched on the device stream in order with the steps (a slot's
    settings are written after the steps already launched have read the old ones). `launch`: the stream's."""

    def __init__(self, target: Any, launch: Callable[[Callable[[], Any]], Any]) -> None:
        self.target, self._launch = target, launch

    @property
    def kv(self) -> Any:
        return self.target.kv

    def admit(self, slot: int, settings: Any, *device_args: Any) -> None:
        """The slot's settings on the host now, on the device in stream order (`device_args`: the seed, and
        what else the family's `admit_device` takes)."""
        self.target.admit_host(slot, settings)
        self._launch(lambda: self.target.admit_device(slot, settings, *device_args))

    def apply(self, copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> None:
        if copies or entries:
            self._launch(lambda: self.target.apply(copies, entries))

    def fork(self, src: int, dst: int) -> None:
        self._launch(lambda: self.target.fork(src, dst))
