"""The prompt layouts after the first: a long text's next segment, and the rows a preempted request recomputes.

Owns: `next_segment`: when a segment that another follows has ended, lay out the next prompt (its text rows,
laid out at submit, then the ended segment's codes as assistant rows `[audio_assistant_slot, codes]`: the
continuation layout, which carries the voice), hand it to the AR loop (`begin_segment`: it waits for KV
blocks, which the paged KV's resume path gives it before the prompt is prefilled, as for a preempted
request) and write the segment's seed into the request's slot (`segment_seed`; presence masks cleared, as
for a new request); the runtime makes the new prompt the record's (`RequestKV.new_prompt`: the ended
segment's blocks go back, its prefix-cache keys are made again). The request keeps its slot and its codec
stream, so its audio simply goes on; the ended and the next segment are marked on the handle
(`v2.kit.results.mark_switch`). `recompute_rows`: a resumed request's prompt, then one assistant row per
frame made so far.
Must not know: scheduling, threads, streams, the engine's queues.
"""

from __future__ import annotations

from typing import Any

import torch

from v2.families.moss_tts_local.ar_decode import ARDecodeLoop, ARState
from v2.long_text import segment_seed
from v2.kit.results import mark_switch

__all__ = ["carried_rows", "next_segment", "recompute_rows", "segment_seed"]


def carried_rows(text_rows: torch.Tensor, codes: list[tuple[int, ...]], assistant_slot: int) -> torch.Tensor:
    """A later segment's prompt: its text rows (ending with audio_start), then the previous segment's frames."""
    frames = torch.tensor([(assistant_slot, *c) for c in codes], dtype=torch.long).reshape(-1, text_rows.shape[1])
    return torch.cat([text_rows, frames])  # [T + F, 1 + G]


def recompute_rows(state: ARState, assistant_slot: int) -> torch.Tensor:
    """The rows whose KV a resumed request needs: its prompt, then one row per frame made so far."""
    prompt = state.rows[: state.prompt_len]
    if not state.codes:
        return prompt
    return carried_rows(prompt, state.codes, assistant_slot)  # [T + F, 1 + G]


def next_segment(req: Any, ar: ARState, loop: ARDecodeLoop, executor: Any, assistant_slot: int) -> torch.Tensor:
    """`req`: the engine's record; `executor`: the family's `OnStream`. Returns the new prompt."""
    assert ar.switching
    segment = req.work.segments[ar.segment + 1]
    assert segment.rows is not None
    mark_switch(req, ar)  # the ended segment and this one, on the handle
    rows = carried_rows(segment.rows, ar.codes, assistant_slot)
    req.handle.segments = (ar.segment + 1, len(req.work.segments))  # the progress a caller may show
    loop.begin_segment(ar, rows)
    executor.admit(ar.slot, req.work.sampling, segment_seed(req.request.seed, ar.segment))
    return rows
