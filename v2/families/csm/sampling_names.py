"""The runtime's nested `sampling` (what HTTP, the command line and rollouts send) onto this family's flat names.

Owns: `unfold_sampling(fields)`: a request dict's `sampling` (`audio.{temperature, top_k, top_p}` and the same
three at its top level: the backbone's codebook-0 head, as the reference's top-level generate arguments
are; `depth_decoder.{temperature, top_k, top_p}`: the depth decoder's codebooks) rewritten as the flat
fields `CsmRequest` takes (`temperature`, `top_k`, `top_p`, `depth_decoder_temperature`, ...). Refused,
naming the dotted field: a bad value, an unknown key, `stop` (no separate stop head: the stop is a frame
whose codebooks 0..N-2 are all 0), `repetition_penalty` (the reference applies none), a knob given both
nested and flat.
Must not know: the engine, cards, checkpoints.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from v2.errors import FieldError, from_validation
from v2.fields import Temperature, TopK, TopP
from v2.sampling_names import KNOBS, Given, Head, unfold


class Nested(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    audio: Head = Head()
    depth_decoder: Head = Head()
    stop: Any = None
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None
    repetition_penalty: Any = None


def _empty(value: Any) -> bool:
    """None, or a mapping (or typed object) whose every value is empty."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    return value is None


def _given(raw: Any) -> Given:
    """The nested `sampling` checked (`stop` and `repetition_penalty` refused): the flat field each knob fills
    (the audio head's and the top level's: codebook 0's; the depth decoder's: `depth_decoder_*`)."""
    if hasattr(raw, "model_dump"):  # a typed sampling object: its fields as data
        raw = raw.model_dump(exclude_none=True)
    try:
        nested = Nested.model_validate(raw)
    except ValidationError as e:
        raise from_validation(e, at=("sampling",)) from None
    for name, why in (("stop", "this family has no separate stop head: a frame whose codebooks 0..N-2 are all 0 "
                       "ends the speech"), ("repetition_penalty", "this family takes none: its reference applies no "
                                            "repetition penalty")):
        if not _empty(getattr(nested, name)):
            raise FieldError(f"sampling.{name}: {why}", field=f"sampling.{name}")
    given: Given = {}
    for k in KNOBS:
        audio, top, depth = getattr(nested.audio, k), getattr(nested, k), getattr(nested.depth_decoder, k)
        if audio is not None and top is not None:
            raise FieldError(f"sampling.audio.{k}: give sampling.audio.{k} or sampling.{k}, not both",
                             field=f"sampling.audio.{k}")
        if audio is not None or top is not None:
            given[k] = (f"sampling.audio.{k}" if audio is not None else f"sampling.{k}", audio if audio is not None else top)
        if depth is not None:
            given[f"depth_decoder_{k}"] = (f"sampling.depth_decoder.{k}", depth)
    return given


def unfold_sampling(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with `sampling` moved onto `CsmRequest`'s flat names (a copy: v2.sampling_names.unfold)."""
    return unfold(fields, _given)


SAMPLING_KEYS = ("audio", "depth_decoder", "temperature", "top_k", "top_p")  # what rollouts may set
