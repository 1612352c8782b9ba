"""MOSS-TTS-Local's text route: what each prompt of a request says and its rows, for `prepare`, open requests and
the prompt laid out again once references are encoded (the split itself is every family's, v2/long_text.py).

Owns: `split` (the segments' spans and what the first prompt says), `build_rows` (the request's own prompt:
explicit rows, or the template saying the first segment's text), `later_rows` (the continuation prompt's
text rows of a segment after the first: the previous segment's text as the transcript, then its own; the
previous segment's codes are appended as assistant rows when it has been spoken), and `TextSegment` /
`plan`: every segment's span, prompt text, later rows and frame cap.
A segment's cap is `max_frames`, lowered for every segment but the last so that its codes fit in the next
prompt (`max_prompt_rows` minus the next prompt's text rows).
Must not know: the engine, KV, devices, loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from typing import Any

from v2.errors import RequestError
from v2.families.moss_tts_local.request import SpeechRequest
from v2.long_text import first_text, spans
from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.prompt import build_prompt, check_rows
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



def split(request: SpeechRequest, max_chars: int) -> tuple[list[tuple[int, int]], str | None]:
    """The segments' spans of the request's text (refusals name `text` or `duration_frames`) and what its first
    prompt says (None: no text, explicit rows)."""
    parts = spans(request, max_chars)
    return parts, first_text(request, parts, max_chars)


def build_rows(request: SpeechRequest, cfg: MossTTSLocalConfig, tokenizer: TextTokenizer,
               references: tuple[torch.Tensor, ...], transcript: str | None, text: str | None = None) -> torch.Tensor:
    """The request's own prompt rows [T, 13]: explicit rows, or the template saying `text` (the first segment's;
    None: the request's whole text)
    with the references in the user turn ("clone") or, with a transcript, the one reference as assistant audio
    after `transcript + text` ("continuation")."""
    if request.prompt_rows is not None:
        return check_rows(cfg, request.prompt_rows)
    common: dict[str, Any] = dict(instruction=request.instruction, language=request.language,
                                  tokens=request.duration_frames)
    said = (request.text or "") if text is None else text
    if transcript is not None:
        return build_prompt(tokenizer, cfg, transcript + said, assistant_codes=references[0], **common)
    return build_prompt(tokenizer, cfg, said, reference_codes=references or None, **common)


def later_rows(request: SpeechRequest, cfg: MossTTSLocalConfig, tokenizer: TextTokenizer, text: str) -> torch.Tensor:
    """A later segment's continuation prompt up to and including audio_start; `text`: the previous segment's
    text and its own, as written (spoken here)."""
    return build_prompt(tokenizer, cfg, spoken(text), instruction=request.instruction, language=request.language)


def plan(request: SpeechRequest, parts: list[tuple[int, int]], said: str | None, cfg: MossTTSLocalConfig,
         tokenizer: TextTokenizer, *, max_frames: int, min_frames: int, max_prompt_rows: int) -> tuple[TextSegment, ...]:
    """Every segment's plan (`said`: what the first prompt says, `split`'s); `max_frames` caps each. Raises
    RequestError (naming the field) when a later prompt leaves no room for its carried frames or the frames
    `min_frames` asks for."""
    text = request.text or ""
    if len(parts) <= 1:
        return (TextSegment(0, len(text), said or text, None, max_frames),)
    rows: list[torch.Tensor | None] = [None]
    for (ps, _), (s, e) in zip(parts, parts[1:]):  # transcript (the previous segment) + this segment, spoken
        rows.append(later_rows(request, cfg, tokenizer, text[ps:e]))
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
