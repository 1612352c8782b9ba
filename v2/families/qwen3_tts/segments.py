"""A long text's later segments for Qwen3-TTS: what each says, its frame cap, and its carried prompt.

Owns: the segments' plans at submit (`plan`: each later segment's prompt spec, its text ids and the
previous segment's as the reference transcript, and every segment's frame cap, lowered so that the codes it
makes fit in the next prompt), and `next_segment`: when a segment that another follows has ended, lay out
the next prompt (the carried layout below), hand it to the talker loop (`begin_text_segment`: it waits for KV
blocks, then prefills) and write the segment's seed into the request's slot (`segment_seed`: the penalty
set cleared, the x-vector kept); the ended and the next segment are marked on the handle (`mark_switch`).
The carried layout is the in-context clone's: the previous segment's text as the reference transcript and
its codes as the reference frames, after the request's own speaker row (the x-vector of a clone, the
speaker's E_0 row of custom voice, none for voice design) and instruction rows, fed as the first segment
was (designs/qwen3_tts.md, "Long text"). The codec stream is not restarted: it has just decoded those
frames, so it holds them as the in-context decode's context would.
Must not know: scheduling, threads, streams, the engine's queues.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch

from v2.errors import RequestError
from v2.families.qwen3_tts.talker import TalkerLoop, TalkerState
from v2.kit.results import mark_switch
from v2.long_text import segment_seed
from v2.models.qwen3_tts.config import Qwen3TTSConfig
from v2.models.qwen3_tts.prompt import PromptError, PromptSpec, layout


@dataclass(frozen=True)
class Segment:
    start: int                     # its span of `request.text`: [start, end)
    end: int
    max_frames: int                # its frame cap
    spec: PromptSpec | None = None  # segments after the first: the carried prompt, `ref_frames` set when it begins


def carried_spec(first: PromptSpec, text_ids: tuple[int, ...], ref_ids: tuple[int, ...]) -> PromptSpec:
    """Segment i's prompt from the first's: its text, the previous segment's text as the reference, in context;
    the first's speaker row, instruction, language and text feed. `ref_frames` is 0 until it begins."""
    clone = first.mode == "voice_clone"
    return replace(first, input_ids=text_ids, ref_ids=ref_ids, ref_frames=0, x_vector_only=not clone and first.x_vector_only,
                   in_context=not clone, non_streaming=not first.streaming_feed())


def rows_for(cfg: Qwen3TTSConfig, spec: PromptSpec, frames: int) -> int:
    """Prompt rows of a carried spec with `frames` reference frames (one more frame, one more row)."""
    return len(layout(cfg, replace(spec, ref_frames=frames)))


def plan(parts: list[tuple[int, int]], bodies: list[tuple[int, ...]], first: PromptSpec, cfg: Qwen3TTSConfig,
         template: Callable[[tuple[int, ...], str], tuple[int, ...]], *, max_frames: int, min_frames: int,
         max_prompt_rows: int) -> tuple[Segment, ...]:
    """Every segment's plan; `bodies`: each segment's text ids (no template). Raises RequestError naming `text`
    when a later prompt leaves no room for the frames it carries (or the frames `min_frames` asks for)."""
    if len(parts) <= 1:
        return ()
    specs: list[PromptSpec | None] = [None]
    for prev, body in zip(bodies, bodies[1:]):
        try:
            specs.append(carried_spec(first, template(body, "text"), template(prev, "reference_text")))
            rows_for(cfg, specs[-1], 1)  # type: ignore[arg-type]
        except PromptError as err:
            raise RequestError(f"text: a later segment's prompt: {err}", field='text') from None
    out = []
    for i, (s, e) in enumerate(parts):
        nxt = specs[i + 1] if i + 1 < len(specs) else None
        cap = max_frames if nxt is None else min(max_frames, max_prompt_rows - (rows_for(cfg, nxt, 1) - 1))
        if cap < max(1, min_frames):
            assert nxt is not None
            raise RequestError(f"text: segment {i + 2} (characters {parts[i + 1][0]}-{parts[i + 1][1]}) lays out "
                               f"{rows_for(cfg, nxt, 1) - 1} prompt rows before its carried frames, leaving "
                               f"{max(cap, 0)} for them within max_prompt_rows ({max_prompt_rows}); at least "
                               f"{max(1, min_frames)} are needed: lower the card's max_segment_chars", field='text')
        out.append(Segment(s, e, cap, specs[i]))
    return tuple(out)


def next_segment(req: Any, state: TalkerState, loop: TalkerLoop, calls: Any, cfg: Qwen3TTSConfig,
                 rows_of: Callable[..., torch.Tensor]) -> torch.Tensor:
    """`req`: the engine's record; `calls`: the family's `OnStream`. Returns the new prompt rows."""
    assert state.switching
    work = req.work
    mark_switch(req, state)  # the ended segment and this one, on the handle
    spec = work.segments[state.segment + 1].spec
    codes = np.array(state.codes, dtype=np.int64).reshape(len(state.codes), cfg.num_code_groups)  # [R, G]
    lay = layout(cfg, replace(spec, ref_frames=len(codes)))
    rows = rows_of(lay, cfg.num_code_groups, ref_codes=codes, xvector=work.xvector)
    req.handle.segments = (state.segment + 1, len(work.segments))  # the progress a caller may show
    loop.begin_text_segment(state, rows, lay.trailing)
    xvec = None if work.xvector is None else torch.from_numpy(work.xvector)
    calls.admit(state.slot, work.sampling, segment_seed(req.request.seed, state.segment), xvec)
    return rows
