"""`SpeechParams` (the server's request, in no family's terms) onto this family's request fields.

Owns: `SPEECH_PARAMS` (the bound family's `speech_params`): the fields v2 names alike
(`v2.params.common_fields`: a built-in speaker, a speaker id such as "0", as `speaker`; a stored voice as
`voice`, a context turn with its transcript; a recording with its transcript as `reference_audio` /
`reference_text`, one more context turn) plus the backbone's sampling knobs under the same flat names
(`temperature`, `top_k`, `top_p`: codebook 0, as the reference's top-level generate arguments are) and the
conversation (`context`: each resolved turn as a `Turn`, its recording's file bytes as `audio` or its frames
as `codes`, a stored voice's transcript as `text`); `FIELDS`, this family's request fields -> the
`SpeechParams` field each comes from (how a refusal names the client's parameter: a turn's fields name
`context`, their message keeps the path); the inputs it honours (a recording, stored voices and speakers,
a context). `repetition_penalty`, `instructions`, `language` and `min_frames` go through so that the family
refuses them by name.
Must not know: HTTP, the runtime, the engine.
"""

from __future__ import annotations

from typing import Any

from v2.params import COMMON_FIELDS, FamilyParams, Resolved, ResolvedTurn, SpeechParams, common_fields

KNOBS = ("temperature", "top_p", "top_k", "repetition_penalty")  # as SpeechParams names them
TURN_FIELDS = ("speaker", "text", "text_ids", "audio", "codes")  # a `Turn`'s fields, each from a ResolvedTurn's

FIELDS: dict[str, str] = {**COMMON_FIELDS, **{k: k for k in KNOBS}, "sampling.repetition_penalty": "repetition_penalty",
                          "context": "context", **{f"context.{k}": "context" for k in TURN_FIELDS}}


def turn_fields(turn: ResolvedTurn) -> dict[str, Any]:
    """One context turn's fields (`request.Turn`); a field left out where its value is."""
    values = {"speaker": turn.speaker, "text": turn.text, "audio": turn.audio, "codes": turn.codes,
              "text_ids": None if turn.text_ids is None else list(turn.text_ids)}
    return {k: v for k, v in values.items() if v is not None}


def request_fields(params: SpeechParams, resolved: Resolved) -> dict[str, Any]:
    """The request's fields (`request.parse` makes them a `CsmRequest`)."""
    fields = common_fields(params, resolved)
    fields.update({k: getattr(params, k) for k in KNOBS[:3] if getattr(params, k) is not None})
    if params.repetition_penalty is not None:  # refused by the family, named as the client's parameter
        fields["sampling"] = {"repetition_penalty": params.repetition_penalty}
    if resolved.context is not None:
        fields["context"] = [turn_fields(t) for t in resolved.context]
    return fields


SPEECH_PARAMS = FamilyParams(request=request_fields, fields=FIELDS,
                             takes=frozenset({"ref_audio", "voice", "context"}), speaks_while_written=False)
