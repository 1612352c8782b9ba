"""Long text at submit: which segments a request's text is spoken as (every family's rule).

Owns: splitting `text` at sentence ends when it is longer than the card's `max_segment_chars` (a text with a
sentence over that cap stays one prompt, refused naming `text` only when it does not fit one; long text
under the ROLLOUT profile or with a `duration_frames` target is refused, naming the field),
what a prompt says (a text within the cap: as written; a longer one: each segment `spoken`, trimmed with
every whitespace run as one character, so blank lines and spaces cost neither segments nor prompt rows),
and each segment's seed (`segment_seed`). A family lays out each segment's prompt itself (its package's
long-text or segments module).
Must not know: the engine, KV, devices, loops, any family's prompt.
"""

from __future__ import annotations

from typing import Any

from v2.contracts import ExecutionProfile
from v2.errors import RequestError
from v2.rl.batch import sample_seed
from v2.sentences import SplitError, segments, spoken


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
