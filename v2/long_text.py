"""Long text at submit: which segments a request's text is spoken as, and the prompts of the later ones.

Owns: splitting `text` at sentence ends when it is longer than the card's `max_segment_chars` (a text with a
sentence over that cap stays one prompt, refused naming `text` only when it does not fit one; long text
under the ROLLOUT profile or with a `duration_frames` target is refused, naming the field),
what a prompt says (a text within the cap: as written; a longer one: each segment `spoken`, trimmed with
every whitespace run as one character, so blank lines and spaces cost neither segments nor prompt rows),
each segment's seed (`segment_seed`, every family's), and, for MOSS-TTS-Local, each segment's plan: its
span of the text, its prompt text, the continuation prompt's text rows of every segment after the first
(the previous segment's text as the transcript, then its own; the previous segment's codes are appended as
assistant rows when it has been spoken), and its frame cap. A segment's
cap is `max_frames`, lowered for every segment but the last so that its codes fit in the next prompt
(`max_prompt_rows` minus the next prompt's text rows).
Must not know: the engine, KV, devices, loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from v2.contracts import ExecutionProfile
from v2.models.config import MossTTSLocalConfig
from v2.models.prompt import build_prompt
from v2.models.tokenizer import TextTokenizer
from v2.request import RequestError, SpeechRequest
from v2.rl.batch import sample_seed
from v2.sentences import SplitError, segments, spoken


@dataclass(frozen=True)
class TextSegment:
    start: int                        # the segment's span of `request.text`: [start, end)
    end: int
    text: str                         # what its prompt says (the first segment's; a later one's own part)
    rows: torch.Tensor | None = None  # segments after the first: the continuation prompt's rows [T, 13], up to
                                      # and including audio_start; the previous segment's codes follow at run time
    max_frames: int = 0               # frame cap of this segment


def segment_seed(seed: int, index: int) -> int:
    """The seed segment `index` samples with: the request's own for the first, then one derived per segment, so
    no two segments of a request draw the same noise (every family's rule)."""
    return seed if index == 0 else sample_seed(seed, index, 0)


def spans(request: Any, max_chars: int) -> list[tuple[int, int]]:
    """The segments' spans of the request's text (one span when it needs no split or has a sentence too long
    to split at: it is then one prompt, as any text that fits one; none for prompt rows)."""
    if request.text is None:
        return []
    try:
        out = segments(request.text, max_chars)
    except SplitError:
        return [(0, len(request.text))]
    if len(out) > 1:
        if request.profile is ExecutionProfile.ROLLOUT:
            raise RequestError(f"text: {len(request.text)} characters would be spoken as {len(out)} segments; "
                               f"a rollout trajectory is one prompt (max_segment_chars {max_chars})", field="text")
        if getattr(request, "duration_frames", None) is not None:
            raise RequestError(f"duration_frames: a duration target is for one prompt; this text is spoken as "
                               f"{len(out)} segments (max_segment_chars {max_chars})", field="duration_frames")
    return out


def unsplit(request: Any, max_chars: int) -> str:
    """Why a text too long for one prompt was not split (only on that error path), or ""."""
    try:
        segments(request.text or "", max_chars)
    except SplitError as e:
        return f"; it cannot be split into segments: {e}"
    return ""


def first_text(request: Any, parts: list[tuple[int, int]], max_chars: int) -> str | None:
    """What the first prompt says: a text within `max_chars` as written, else its first segment `spoken`."""
    if request.text is None or len(request.text) <= max_chars:
        return request.text
    s, e = parts[0]
    return spoken(request.text[s:e])


def plan(request: SpeechRequest, parts: list[tuple[int, int]], cfg: MossTTSLocalConfig, tokenizer: TextTokenizer, *,
         max_frames: int, min_frames: int, max_prompt_rows: int, max_chars: int) -> tuple[TextSegment, ...]:
    """Every segment's plan; `max_frames` caps each. Raises RequestError (naming the field) when a later
    prompt leaves no room for its carried frames or the frames `min_frames` asks for."""
    text = request.text or ""
    if len(parts) <= 1:
        return (TextSegment(0, len(text), first_text(request, parts, max_chars) or text, None, max_frames),)
    rows: list[torch.Tensor | None] = [None]
    for (ps, _), (s, e) in zip(parts, parts[1:]):  # transcript (the previous segment) + this segment, spoken
        rows.append(build_prompt(tokenizer, cfg, spoken(text[ps:e]), instruction=request.instruction,
                                 language=request.language))
    out = []
    for i, (s, e) in enumerate(parts):
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        cap = max_frames if nxt is None else min(max_frames, max_prompt_rows - int(nxt.shape[0]))
        if cap < max(1, min_frames):
            assert nxt is not None
            raise RequestError(f"text: segment {i + 2} (characters {parts[i + 1][0]}-{parts[i + 1][1]}) lays out "
                               f"{int(nxt.shape[0])} prompt rows, leaving {max(cap, 0)} for the previous segment's "
                               f"frames within max_prompt_rows ({max_prompt_rows}); at least {max(1, min_frames)} "
                               "are needed: lower the card's max_segment_chars", field="text")
        out.append(TextSegment(s, e, spoken(text[s:e]), rows[i], cap))
    return tuple(out)
