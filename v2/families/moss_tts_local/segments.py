"""Long text at run time: moving a request from one segment to the next, inside one request.

Owns: `next_segment`: when a segment that another follows has ended, lay out the next prompt (its text rows,
laid out at submit, then the ended segment's codes as assistant rows `[audio_assistant_slot, codes]`: the
continuation layout, which carries the voice), give the ended segment's KV blocks back, make the new prompt
the record's (its prefix-cache keys are made again), write the segment's seed into the request's slot
(`segment_seed`; presence masks cleared, as for a new request) and leave the AR state waiting for KV blocks,
which the paged KV's resume path (`RequestKV.resume`, the path of a preempted request) gives it before the
prompt is prefilled. The request keeps its slot and its codec stream, so its audio simply goes on.
Must not know: scheduling, threads, streams, the engine's queues.
"""

from __future__ import annotations

from typing import Any

import torch

from v2.families.moss_tts_local.ar_decode import ARDecodeLoop
from v2.runtime.records import RequestRecord
from v2.rl.batch import sample_seed


def segment_seed(seed: int, index: int) -> int:
    """The seed segment `index` samples with: the request's own for the first, then one derived per segment, so
    no two segments of a request draw the same noise."""
    return seed if index == 0 else sample_seed(seed, index, 0)


def carried_rows(text_rows: torch.Tensor, codes: list[tuple[int, ...]], assistant_slot: int) -> torch.Tensor:
    """A later segment's prompt: its text rows (ending with audio_start), then the previous segment's frames."""
    frames = torch.tensor([(assistant_slot, *c) for c in codes], dtype=torch.long).reshape(-1, text_rows.shape[1])
    return torch.cat([text_rows, frames])  # [T + F, 13]


def next_segment(req: RequestRecord, loop: ARDecodeLoop, kv: Any, executor: Any) -> None:
    """`kv`: the engine's `RequestKV`; `executor`: its `ARExecutor`."""
    ar = req.ar
    assert ar is not None and ar.switching
    segment = req.segments[ar.segment + 1]
    assert segment.rows is not None
    rows = carried_rows(segment.rows, ar.codes, kv.assistant_slot)
    kv.release(req)
    req.rows, req.kv_keys = rows, None
    loop.begin_segment(ar, rows)
    kv.pause(req)
    executor.admit(ar.slot, req.sampling, segment_seed(req.request.seed, ar.segment))
