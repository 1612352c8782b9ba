"""MOSS-TTS-Local's long text: each segment's plan (the split itself is every family's, v2/long_text.py).

Owns: `TextSegment` and `plan`: a segment's span of the text, its prompt text, the continuation prompt's
text rows of every segment after the first (the previous segment's text as the transcript, then its own;
the previous segment's codes are appended as assistant rows when it has been spoken), and its frame cap.
A segment's cap is `max_frames`, lowered for every segment but the last so that its codes fit in the next
prompt (`max_prompt_rows` minus the next prompt's text rows).
Must not know: the engine, KV, devices, loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from v2.errors import RequestError
from v2.families.moss_tts_local.request import SpeechRequest
from v2.long_text import first_text
from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.prompt import build_prompt
from v2.models.moss_tts_local.tokenizer import TextTokenizer
from v2.sentences import spoken


@dataclass(frozen=True)
class TextSegment:
    start: int                        # the segment's span of `request.text`: [start, end)
    end: int
    text: str                         # what its prompt says (the first segment's; a later one's own part)
    rows: torch.Tensor | None = None  # segments after the first: the continuation prompt's rows [T, 13], up to
                                      # and including audio_start; the previous segment's codes follow at run time
    max_frames: int = 0               # frame cap of this segment



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
