"""MOSS-TTS-Local's AR executor: the kit's paged frame executor (v2/kit/frames.py) with this
family's model, state and packed row.

Owns: the device-side state of the AR experts besides what every frame executor has (per-slot sampling
settings, seeds and repetition-penalty presence masks); writing a request's settings at admission
(`admit`, or its host and device halves, which `OnStream` queues on the stream); the prompt forward (the
backbone over embedded [T, 13] rows), the padding row (text pad, audio pad codes), and the frame step on
the static inputs: the local transformer's stop decision and 12 codes from each slot's state, the
presence update, the new frame's row through the backbone -> the state for the next frame. One route wherever it
runs; what differs is one seam (how the rows' slot state is reached, `_SlotState`, and which flag tensors are
passed): on a device, gathers at the slot ids (what a step graph captures); on a CPU, whose static inputs are host
memory, picked by the inputs' values (consecutive slots' state through kept views, flags all set or all clear as
kept tensors, no presence read for a batch without a repetition penalty: the host record of penalized slots); one packed
float32 result [B, 26] (stop flag, 12 codes, 13 logprobs), read back as `FrameBatch` (`read`). The
packed frame-row layout is known here and nowhere else (the codec's side: codec_executor.py).
Must not know: requests, loops' state, scheduling policy, which blocks are free, threads.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from v2.models.kernels import kernels_on
from v2.models.moss_tts_local.model import MossTTSLocal
from v2.models.persist import persistent
from v2.models.sampling import SamplingTensors
from v2.runtime.device import upload
from v2.kit.frames import FrameBatch, FrameInputs, OnStream, PagedFrames, context_buckets
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
        self.code_index = torch.arange(cfg.n_vq, device=dev)  # [12]: the presence update's codebook index
        self.penalized: set[int] = set()  # slots whose settings have a repetition penalty (host side)
        # a CPU's static inputs are host memory: the frame step reads them to pick its operations (no step graphs)
        self.host_inputs = dev.type == "cpu"
        self._inputs_kept: dict[int, _KeptInputs] = {}
        self._views_kept: dict[tuple[int, int], _SlotViews] = {}
        for b in batch_buckets:  # made before the capture: a captured step makes no tensors of its own
            self._kept_inputs(b)
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
        self.penalized.discard(slot)
        if needs_full_sort(settings):
            self.full_sort.add(slot)
        if settings.repetition_penalty != 1:
            self.penalized.add(slot)

    @torch.no_grad()
    def admit_device(self, slot: int, settings: SamplingSettings, seed: int) -> None:
        """The slot's settings, seed and presence on the device: pinned copies and fills, no host sync."""
        row = SamplingTensors.build([settings], [seed])  # on the host
        s = self.sampling
        for dst, src in ((s.temperature, row.temperature), (s.top_k, row.top_k), (s.top_p, row.top_p),
                         (s.penalty, row.penalty), (s.seed, row.seed)):
            upload(src[0], dst[slot])
        self.presence[slot] = False

    def frame_step(self, key: tuple[int, ...]) -> Tensor:
        """The whole frame step on the static inputs: key = (rows, keys attended, full sort). One route wherever it
        runs: only how the rows' slot state is reached and which flag tensors are passed (`_device_rows` /
        `_host_rows`) differ."""
        if torch.is_grad_enabled():  # a direct call (benchmarks, tests); the runtime's steps run in inference mode
            with torch.no_grad():
                return self.frame_step(key)
        b, context, full = key
        kept = self._kept_inputs(b)
        rows, penalized, allow, valid = self._host_rows(kept, b) if self.host_inputs else self._device_rows(kept)
        hidden, tables, sampling, presence = rows.read(self, penalized)
        frame = self.model.decode_frame(hidden, sampling, kept.steps, presence=presence, allow_stop=allow,
                                        full_sort=bool(full))
        rows.record(self, frame.codes)  # padding rows write only the dummy slot's presence, state and KV
        out = self.model.transformer.forward_cached(frame.next_embed[:, None], self.kv, tables, kept.positions,
                                                    valid, context)  # [b, 1, H]
        rows.store(self, out[:, 0])
        return torch.cat([frame.stop[:, None], frame.codes, frame.logprobs], dim=1)  # float32: cat converts as it copies

    def _device_rows(self, kept: "_KeptInputs") -> "_Rows":
        """The rows where the static inputs are device memory (a step graph's capture: no host reads): the slot
        state gathered at the inputs' slots, every presence mask read, the flags compared on the device."""
        return kept.gathers, True, kept.allow != 0, kept.valid != 0  # (flags as masks: a comparison, no dtype copy)

    def _host_rows(self, kept: "_KeptInputs", b: int) -> "_Rows":
        """The rows where the static inputs are host memory (a CPU, no step graphs): their values, read once, choose.
        Consecutive slots' state through kept views (no gathers or indexed writes); flags all set or all clear as
        kept tensors (no comparisons); no presence read for a batch none of whose rows has a repetition penalty (a
        penalty of 1 changes no logit). The same values as `_device_rows`, bit for bit."""
        slot_ids, _, _, allow_ids, valid_ids, _ = kept.packed.tolist()
        run = _run_of(slot_ids)
        rows: _SlotState = kept.gathers if run is None else self._slot_views(run, b)
        allow = None if all(allow_ids) else kept.no_stop if not any(allow_ids) else kept.allow != 0
        valid = kept.all_valid if all(valid_ids) else kept.valid != 0
        return rows, not self.penalized.isdisjoint(slot_ids), allow, valid

    def _kept_inputs(self, b: int) -> "_KeptInputs":
        hit = self._inputs_kept.get(b)
        if hit is None:
            hit = self._inputs_kept[b] = persistent(_KeptInputs)(self.inputs, b)
        return hit

    def _slot_views(self, first: int, b: int) -> "_SlotViews":
        hit = self._views_kept.get((first, b))
        if hit is None or not hit.of(self):  # (made again if a state tensor was replaced)
            if len(self._views_kept) >= 64:
                self._views_kept.pop(next(iter(self._views_kept)))
            hit = self._views_kept[(first, b)] = persistent(_SlotViews)(self, first, b)
        return hit


def _run_of(slots: list[int]) -> int | None:
    """The first slot when `slots` are consecutive (first, first + 1, ...), else None."""
    first = slots[0]
    return first if slots == list(range(first, first + len(slots))) else None


class _SlotState(Protocol):
    """How a frame step reaches its rows' per-slot state: `read` (backbone state, block tables, settings, and the
    presence masks when `penalized`), `record` (the drawn codes [b, 12] into the presence masks), `store` (the new
    backbone state [b, H])."""

    def read(self, ex: ARExecutor, penalized: bool) -> tuple[Tensor, Tensor, SamplingTensors, Tensor | None]: ...

    def record(self, ex: ARExecutor, codes: Tensor) -> None: ...

    def store(self, ex: ARExecutor, hidden: Tensor) -> None: ...


_Rows = tuple[_SlotState, bool, "Tensor | None", Tensor]  # the rows' state, penalized, allow stop [b], valid [b, 1]


class _Gathers:
    """The slot state of the static inputs' first b rows by their slot ids: gathers, written back by index (what a
    step graph captures: the ids are read on the device)."""

    def __init__(self, slots: Tensor) -> None:
        self.slots, self.index = slots, slots[:, None]  # [b], [b, 1]

    def read(self, ex: ARExecutor, penalized: bool) -> tuple[Tensor, Tensor, SamplingTensors, Tensor | None]:
        s = self.slots
        return ex.hidden[s], ex.tables[s], ex.sampling.rows(s), ex.presence[s] if penalized else None

    def record(self, ex: ARExecutor, codes: Tensor) -> None:
        ex.presence[self.index, ex.code_index, codes] = True

    def store(self, ex: ARExecutor, hidden: Tensor) -> None:
        ex.hidden[self.slots] = hidden


class _KeptInputs:
    """Views of the static inputs' first `b` rows (their values change from frame to frame, the views do not),
    their slots' `_Gathers`, and the all-set / all-clear flag tensors of b rows."""

    def __init__(self, x: FrameInputs, b: int) -> None:
        self.packed, self.steps = x.packed[:, :b], x.step[:b]  # [6, b], [b]
        self.positions = x.position[:b, None]  # [b, 1]
        self.allow, self.valid = x.allow_stop[:b], x.valid[:b, None]  # [b], [b, 1]
        self.gathers = _Gathers(x.slot[:b])
        self.no_stop = torch.zeros(b, dtype=torch.bool, device=x.packed.device)
        self.all_valid = torch.ones(b, 1, dtype=torch.bool, device=x.packed.device)


class _SlotViews:
    """The per-slot state of slots first .. first + b - 1 as views (what gathers of those rows would copy), read
    and written in place; the settings' views see a later admission's writes."""

    def __init__(self, ex: ARExecutor, first: int, b: int) -> None:
        rows = slice(first, first + b)
        self.hidden, self.presence, self.tables = ex.hidden[rows], ex.presence[rows], ex.tables[rows]
        s = ex.sampling
        self._settings = (s.temperature[rows], s.top_k[rows], s.top_p[rows], s.penalty[rows], s.seed[rows])
        self._of = (ex.hidden, ex.presence, ex.tables, ex.sampling)

    def of(self, ex: ARExecutor) -> bool:
        """Whether these are views of the executor's state tensors still."""
        a = self._of
        return a[0] is ex.hidden and a[1] is ex.presence and a[2] is ex.tables and a[3] is ex.sampling

    def read(self, ex: ARExecutor, penalized: bool) -> tuple[Tensor, Tensor, SamplingTensors, Tensor | None]:
        # a fresh settings object over the kept views (a consumer may key on the object)
        return self.hidden, self.tables, SamplingTensors(*self._settings), self.presence if penalized else None

    def record(self, ex: ARExecutor, codes: Tensor) -> None:
        self.presence.scatter_(2, codes[:, :, None], True)

    def store(self, ex: ARExecutor, hidden: Tensor) -> None:
        self.hidden.copy_(hidden)
