"""The AR executor: a batch of plans -> static buffers -> one expert call (a graph replay on CUDA) -> typed results.

Owns: the device-side state of the AR experts (the paged KV pool and each slot's block table, the backbone
state each slot decodes its next frame from, per-slot sampling settings, seeds and repetition-penalty
presence masks); writing a request's settings at admission; applying block-table entries and block copies;
the static input buffers (`FrameInputs`, allocated once at the largest bucket; padding rows aim at the
dummy slot, whose table points only at the dummy block); running a PREFILL batch (eager) and an AR_FRAME
batch through `StepGraphs`, the latter in two halves: `prepare` (host only: the batch's inputs as host
tensors) and `launch` (device work only: upload, replay; returns a device tensor), so the host half of
step N+1 runs while the device runs step N; and reading a batch's host copy back as typed rows
(`FrameBatch.row(i) -> FrameRow`). The packed frame-row layout is known here and nowhere else (the codec's
side: codec_executor.py). `OnStream` queues the AR executor's state changes (admission, block tables,
forks) on the device stream, in order with the steps; `to_device` / `upload` are the pinned,
non-blocking host-to-device copies every executor uses.
Must not know: requests, loops' state, scheduling policy, which blocks are free, threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.families.moss_tts_local.ar_decode import FramePlan, FrameRow, PrefillPlan
from v2.contracts import bucket_for
from v2.models.kernels import kernels_on
from v2.models.moss_tts_local import MossTTSLocal
from v2.models.sampling import SamplingTensors
from v2.sampling_settings import CHANNELS, SamplingSettings, needs_full_sort
from v2.runtime.device import to_device, upload
from v2.runtime.graphs import StepGraphs

FRAME_FIELDS = 1 + 12 + CHANNELS  # packed AR_FRAME row: stop, 12 codes, 13 logprobs (this family's widths)
MIN_CONTEXT_BUCKET = 64


@dataclass(slots=True)
class FrameInputs:
    """The frame step's static inputs, [largest bucket] each: named views of one packed buffer, so a batch's
    inputs go up in one host-to-device copy."""

    packed: Tensor      # [5, largest bucket] int64: the rows below
    slot: Tensor        # KV / state slot (padding rows: the dummy slot)
    position: Tensor    # where the frame's row goes in the slot's KV
    step: Tensor        # frame index: keys the sampling noise
    allow_stop: Tensor  # 0 before min_frames
    valid: Tensor       # 1 for real rows

    @classmethod
    def allocate(cls, rows: int, dummy_slot: int, device: torch.device) -> "FrameInputs":
        packed = torch.zeros(5, rows, dtype=torch.long, device=device)
        packed[0] = dummy_slot
        return cls(packed, *packed.unbind(0))


@dataclass(slots=True)
class FrameLaunch:
    """A frame batch's inputs on the host, ready to launch."""

    host: Tensor                  # [5, bucket] int64, the FrameInputs rows
    key: tuple[int, int, int]     # graph key: (rows, keys attended, full sort)


@dataclass(slots=True)
class FrameBatch:
    """An AR_FRAME batch's result on the host, one entry per real row."""

    stop: list[bool]
    codes: list[list[int]]
    logprobs: list[list[float]]

    @classmethod
    def read(cls, host: np.ndarray, n: int) -> "FrameBatch":
        """host: the packed [bucket, 26] float32 result (stop flag, 12 codes, 13 logprobs per row)."""
        rows = host[:n]
        return cls((rows[:, 0] > 0.5).tolist(), rows[:, 1:13].astype(np.int64).tolist(), rows[:, 13:].tolist())

    def row(self, i: int) -> FrameRow:
        return FrameRow(self.stop[i], tuple(self.codes[i]), tuple(self.logprobs[i]))

    __getitem__ = row

    def __len__(self) -> int:
        return len(self.stop)


def context_buckets(max_len: int) -> list[int]:
    """Key lengths an AR_FRAME step attends over: powers of two from 64, then the cache length."""
    out, b = [], MIN_CONTEXT_BUCKET
    while b < max_len:
        out.append(b)
        b *= 2
    return out + [max_len]


class ARExecutor:
    """Backbone + local transformer over slot-indexed state and a paged KV pool; `num_slots` real slots and
    one dummy, `num_blocks` blocks of `block_size` rows and one dummy. A slot's KV row p lives in block
    `tables[slot, p // block_size]`; what the table holds is written by `apply` (the caller's block manager
    decides). Default `num_blocks`: every slot at `max_len` rows (the contiguous cache's memory)."""

    def __init__(self, model: MossTTSLocal, *, num_slots: int, max_len: int, batch_buckets: list[int],
                 graphs: bool = True, num_blocks: int | None = None, block_size: int = 16) -> None:
        self.model = model
        width = -(-max_len // block_size)  # blocks of one request at max_len rows
        self.kv = model.allocate_paged_kv(num_slots * width if num_blocks is None else num_blocks, block_size)
        s, dev, cfg = num_slots + 1, model.device, model.cfg
        self.tables = torch.full((s, width), self.kv.dummy_block, dtype=torch.long, device=dev)  # [S + 1, W]
        self.hidden = torch.zeros(s, cfg.hidden_size, dtype=model.dtype, device=dev)
        self.sampling = SamplingTensors.build([SamplingSettings()] * s, [0] * s, dev)
        self.presence = torch.zeros(s, cfg.n_vq, cfg.codebook_size, dtype=torch.bool, device=dev)
        self.full_sort: set[int] = set()  # slots whose codebook settings need the full sort (host side)
        self.inputs = FrameInputs.allocate(batch_buckets[-1], s - 1, dev)
        # the decode kernel reads each row's own length through its table, so one graph per batch bucket
        # (grid sized for max_len) serves any lengths; the torch path gathers keys up to a context bucket
        self.contexts = [max_len] if kernels_on(dev) else context_buckets(max_len)
        keys = [(b, c, 1) for b in batch_buckets for c in self.contexts]  # graphs always run the full sort
        self.graphs = StepGraphs("ar_frame", self._frame_step, keys, device=dev, enabled=graphs)
        self.graphs.capture()
        self.reset_dummy()  # capture's warm-ups ran padding rows through the dummy slot

    def reset_dummy(self) -> None:
        """Clear the dummy slot's state and presence and the dummy block (only padding rows touch them)."""
        d = self.dummy_slot
        self.hidden[d] = 0
        self.presence[d] = False
        self.kv.k[:, self.kv.dummy_block] = 0
        self.kv.v[:, self.kv.dummy_block] = 0

    @property
    def dummy_slot(self) -> int:
        return self.tables.shape[0] - 1

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
        positions = to_device(starts[:, None] + torch.arange(width), dev)  # [B, W]
        valid = to_device(torch.arange(width)[None] < lengths[:, None], dev)  # [B, W]
        slots = to_device(torch.tensor([p.slot for p in plans]), dev)
        context = int((starts + lengths).max())
        out = self.model.transformer.forward_cached(self.model.embed_rows(to_device(rows, dev)), self.kv,
                                                    self.tables[slots], positions, valid, context)  # [B, W, H]
        last = [i for i, p in enumerate(plans) if p.last]
        if last:
            idx = to_device(torch.tensor(last), dev)
            self.hidden[slots[idx]] = out[idx, to_device(lengths[last] - 1, dev)]

    def prepare(self, plans: Sequence[FramePlan], bucket: int) -> FrameLaunch:
        """Host half: the plans as the static inputs' rows (padding rows -> dummy slot) and the graph key."""
        n = len(plans)
        host = torch.zeros(5, bucket, dtype=torch.long)  # [5, bucket]
        host[0, n:] = self.dummy_slot
        host[3, n:] = 1
        host[4, :n] = 1
        host[:4, :n] = torch.tensor([(p.slot, p.position, p.step, p.allow_stop) for p in plans]).T
        context = int(host[1, :n].max()) + 1
        if self.graphs.enabled:
            return FrameLaunch(host, self.graph_key(bucket, context))
        return FrameLaunch(host, (bucket, context, int(any(p.slot in self.full_sort for p in plans))))

    def launch(self, batch: FrameLaunch) -> Tensor:
        """Device half: one upload, then the frame step -> packed [bucket, 26] float32 on the device: stop
        flag, 12 codes, 13 logprobs per row (padding rows last, meaningless)."""
        upload(batch.host, self.inputs.packed[:, : batch.key[0]])
        if self.graphs.enabled:
            return self.graphs.run(batch.key)
        self.graphs.fallbacks[self.graphs.reason_off] += 1
        return self._frame_step(batch.key)

    def frame(self, plans: Sequence[FramePlan], bucket: int) -> Tensor:
        """Both halves at once."""
        return self.launch(self.prepare(plans, bucket))

    def stage(self, plans: Sequence[FramePlan], bucket: int) -> int:
        """Upload the plans into the static inputs; returns the keys they attend (for benchmarks)."""
        batch = self.prepare(plans, bucket)
        upload(batch.host, self.inputs.packed[:, :bucket])
        return int(batch.host[1, : len(plans)].max()) + 1

    def graph_key(self, bucket: int, context: int) -> tuple[int, int, int]:
        return (bucket, bucket_for(context, self.contexts), 1)

    @torch.no_grad()
    def _frame_step(self, key: tuple[int, ...]) -> Tensor:
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


class OnStream:
    """The executors' state changes, launched on the device stream in order with the steps (a slot's
    settings are written after the steps already launched have read the old ones). `launch`: the stream's."""

    def __init__(self, ar: ARExecutor, launch: Callable[[Callable[[], Any]], Any]) -> None:
        self.target, self._launch = ar, launch

    @property
    def kv(self) -> Any:
        return self.target.kv

    def admit(self, slot: int, settings: SamplingSettings, seed: int) -> None:
        self.target.admit_host(slot, settings)
        self._launch(lambda: self.target.admit_device(slot, settings, seed))

    def apply(self, copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> None:
        if copies or entries:
            self._launch(lambda: self.target.apply(copies, entries))

    def fork(self, src: int, dst: int) -> None:
        self._launch(lambda: self.target.fork(src, dst))
