"""`SpeechParams` (the server's request, in no family's terms) onto this family's request fields.

Owns: `SPEECH_PARAMS` (the bound family's `speech_params`): the fields v2 names alike (`v2.params.common_fields`)
plus the sampling knobs on the audio head (`sampling.audio.temperature` / `top_k` / `top_p`, as the reference
`generate()` treats plain sampling arguments; the stop head keeps the card's) and
`sampling.repetition_penalty`; `FIELDS`, this family's request fields -> the `SpeechParams` field each comes
from (how a refusal names the client's parameter); the inputs it honours (a recording to clone, with or
without its transcript, and stored voices; no x-vector-only mode).
Must not know: HTTP, the runtime, the engine.
"""

from __future__ import annotations

from typing import Any

from v2.params import COMMON_FIELDS, FamilyParams, Resolved, SpeechParams, common_fields

KNOBS = ("temperature", "top_p", "top_k")  # the audio head's, under their flat names

FIELDS: dict[str, str] = {
    **COMMON_FIELDS, **{f"sampling.audio.{k}": k for k in KNOBS},
    "sampling.repetition_penalty": "repetition_penalty",
}


def request_fields(params: SpeechParams, resolved: Resolved) -> dict[str, Any]:
    """The request's fields (`parse_request` makes them a `SpeechRequest`). A speaker name, which this
    family has none of, is passed on for its schema to refuse."""
    fields = common_fields(params, resolved)
    audio = {k: getattr(params, k) for k in KNOBS if getattr(params, k) is not None}
    sampling: dict[str, Any] = {"audio": audio} if audio else {}
    if params.repetition_penalty is not None:
        sampling["repetition_penalty"] = params.repetition_penalty
    if sampling:
        fields["sampling"] = sampling
    return fields


SPEECH_PARAMS = FamilyParams(request=request_fields, fields=FIELDS, takes=frozenset({"ref_audio", "voice"}))
