"""`SpeechParams` (the server's request, in no family's terms) onto this family's request fields.

Owns: `SPEECH_PARAMS` (the bound family's `speech_params`): the fields v2 names alike (`v2.params.common_fields`:
a built-in speaker as `speaker`, a stored voice as `voice`) plus the talker's sampling knobs under the same
flat names (`temperature`, `top_k`, `top_p`: group 0, as the reference API's top-level names are;
`repetition_penalty`) and `x_vector_only` (vllm-omni's `x_vector_only_mode`); `FIELDS`, this family's
request fields -> the `SpeechParams` field each comes from (how a refusal names the client's parameter);
the inputs it honours (a recording to clone, its x-vector-only mode, stored voices and speakers).
Must not know: HTTP, the runtime, the engine.
"""

from __future__ import annotations

from typing import Any

from v2.params import COMMON_FIELDS, FamilyParams, Resolved, SpeechParams, common_fields

KNOBS = ("temperature", "top_p", "top_k", "repetition_penalty")  # the talker's, named as SpeechParams names them

FIELDS: dict[str, str] = {**COMMON_FIELDS, **{k: k for k in KNOBS}, "x_vector_only": "x_vector_only_mode"}


def request_fields(params: SpeechParams, resolved: Resolved) -> dict[str, Any]:
    """The request's fields (`request.parse` makes them a `Qwen3Request`)."""
    fields = common_fields(params, resolved)
    fields.update({k: getattr(params, k) for k in KNOBS if getattr(params, k) is not None})
    if resolved.reference_audio is not None and params.x_vector_only_mode is not None:
        fields["x_vector_only"] = params.x_vector_only_mode
    return fields


SPEECH_PARAMS = FamilyParams(request=request_fields, fields=FIELDS,
                             takes=frozenset({"ref_audio", "x_vector_only_mode", "voice"}))
