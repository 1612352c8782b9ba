"""A nested `sampling` (what the command line and rollouts send) onto this family's flat sampling names.

Owns: `Nested` and `Head`, the nested shape it takes (`audio.{temperature, top_k, top_p}`, the same three
at its top level, `repetition_penalty`; `subtalker.{temperature, top_k, top_p}`, this family's code
predictor; `stop`, only to refuse it by name), `SAMPLING_KEYS` (its keys a rollout may set), and
`unfold_sampling(fields)`: a request dict's `sampling` rewritten as the flat fields `Qwen3Request` takes:
the audio head's knobs (the top level's where `audio` leaves one out) are the talker's group-0
`temperature` / `top_k` / `top_p`, as the reference API's top-level names are; `repetition_penalty` the
talker's; `subtalker.*` -> `subtalker_*`. Refused, naming the dotted field: a bad value, an unknown key,
`stop` (this family has no separate stop head: EOS is an id of group 0's distribution), a knob given both
nested and flat.
Must not know: the engine, cards, checkpoints.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from v2.errors import RequestError, from_validation
from v2.fields import Penalty, Temperature, TopK, TopP
from v2.sampling_names import KNOBS, Given, Head, unfold

class Nested(BaseModel):
    """The nested `sampling`, less `subtalker` (unfolded apart, so its refusals name it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    stop: Head = Head()
    audio: Head = Head()
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None
    repetition_penalty: Penalty = None


SAMPLING_KEYS = (*(k for k in Nested.model_fields if k != "stop"), "subtalker")  # what rollouts may set


def _parsed(model: Any, raw: Any, prefix: str) -> Any:
    if isinstance(raw, model):
        return raw
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise from_validation(e, at=prefix.split(".")) from None


def _given(raw: Any) -> Given:
    """The nested `sampling` checked (`stop` refused): the flat field each knob fills (the audio head's and the
    top level's: the talker's; `subtalker`'s: `subtalker_*`; `repetition_penalty`)."""
    subtalker: Any = None
    if isinstance(raw, dict) and "subtalker" in raw:
        raw = dict(raw)
        subtalker = _parsed(Head, raw.pop("subtalker"), "sampling.subtalker")
    nested = _parsed(Nested, raw, "sampling")
    if any(getattr(nested.stop, k) is not None for k in KNOBS):
        raise RequestError("sampling.stop: this family has no separate stop head (the stop is an id of the talker's "
                           "group-0 choice, drawn under temperature / top_k / top_p)", field='sampling.stop')
    given: Given = {}
    for k in KNOBS:
        audio, top = getattr(nested.audio, k), getattr(nested, k)
        if audio is not None or top is not None:
            given[k] = (f"sampling.audio.{k}" if audio is not None else f"sampling.{k}", audio if audio is not None else top)
        if subtalker is not None and getattr(subtalker, k) is not None:
            given[f"subtalker_{k}"] = (f"sampling.subtalker.{k}", getattr(subtalker, k))
    if nested.repetition_penalty is not None:
        given["repetition_penalty"] = ("sampling.repetition_penalty", nested.repetition_penalty)
    return given


def unfold_sampling(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with `sampling` moved onto `Qwen3Request`'s flat names (a copy: v2.sampling_names.unfold)."""
    return unfold(fields, _given)
