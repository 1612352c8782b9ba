"""What a CSM request may say: the pydantic `CsmRequest` (one turn to speak, in the context of earlier turns),
checked field by field before anything runs.

Owns: the request schema of this family: the turn to speak (`text` with its `speaker`, an integer rendered
`[{speaker}]{text}` as the reference's processor does, or `text_ids`, the ids between `<|begin_of_text|>`
and `<|end_of_text|>` with the speaker tag included), the conversation before it (`context`: `Turn`s, each
`{speaker, text}` or `{text_ids}` with optional `audio`, a recording, or `codes`, its frames), a stored
`voice` or a `reference_audio` with its transcript (each one more context turn, first, in the request's
speaker), the frame budget (`max_frames`, counting frames as the reference's `max_new_tokens`), the seed,
both stages' sampling under flat names (`temperature` / `top_k` / `top_p`: codebook 0; `depth_decoder_*`:
codebooks 1..N-1; `temperature: 0` alone makes both greedy), streaming, timeout, profile, decode_audio;
field rules (strict types, bounded integers, private copies of arrays and raw samples) and `parse` (errors
name the field: `context.audio`, `sampling.depth_decoder.top_k`, ...). What needs the checkpoint (the
tokenizer, id bounds, code ranges) is prepare.py's.
Must not know: the engine, slots, devices, cards.
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from v2.errors import FieldError, RequestError, from_validation
from v2.families.csm.sampling_names import unfold_sampling
from v2.fields import (
    RequestTail, StrictInt, StrictRequest, StrictText, Temperature, TokenIds, TopK, TopP, check_reference_size,
    check_sample_rate,
)

MAX_TURNS = 1_000     # context turns in one request (the card's own cap is checked at prepare)
MAX_SPEAKER = 2**31 - 1
UNTAKEN = ("language", "instruction")  # common request fields this family has no use for (None is fine)


def _speaker(v: Any) -> Any:
    """An integer, or its decimal text (a voice name such as "0" over HTTP or the command line)."""
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return v


def recording(x: Any, field: str) -> Any:
    """A path (as str), a private copy of file bytes, or (a private copy of the samples, rate); the rate and
    size of raw samples are checked from their shape before the copy. Refusals name `field`."""
    if x is None:
        return None
    if isinstance(x, (str, os.PathLike)):
        return os.fspath(x)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], (int, float)) and not isinstance(x[1], bool):
        samples, rate = x
        try:
            check_sample_rate(rate)
            shape = tuple(getattr(samples, "shape", ())) or ((len(samples),) if isinstance(samples, (list, tuple)) else ())
            if shape and max(shape) > 0:
                check_reference_size(max(shape), math.prod(shape) // max(shape))  # the longer axis is time
        except ValueError as e:
            raise FieldError(f"{field}: {e}", field=field) from None
        if hasattr(samples, "detach"):  # a tensor
            samples = samples.detach().cpu().numpy()
        if isinstance(samples, np.ndarray) and samples.dtype.kind not in "fi":
            raise FieldError(f"{field}: samples must be float, int16 or int32 PCM, got {samples.dtype}", field=field)
        try:
            return (np.array(samples, copy=True), x[1])
        except (TypeError, ValueError) as e:
            raise FieldError(f"{field}: samples are not an array of numbers ({e})", field=field) from None
    raise FieldError(f"{field}: expected a path, the bytes of an audio file, or (samples, sample_rate); got "
                     f"{type(x).__name__}", field=field)


def codes_array(v: Any, field: str) -> Any:
    """A private int64 [frames, codebooks] copy of a turn's codes (a list, array or tensor)."""
    if v is None:
        return None
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    try:
        a = np.array(v, copy=True)
    except (TypeError, ValueError) as e:
        raise FieldError(f"{field}: not an array of integers ({e})", field=field) from None
    if a.dtype.kind not in "iu" or a.ndim != 2 or a.shape[0] < 1:
        raise FieldError(f"{field}: expected integer codes [frames >= 1, codebooks], got {a.dtype} {a.shape}",
                         field=field)
    return a.astype(np.int64)


Speaker = Annotated[Annotated[StrictInt, Field(ge=0, le=MAX_SPEAKER)] | None, BeforeValidator(_speaker)]  # None: unchecked
Ids = TokenIds


def _one_text(text: str | None, ids: list[int] | None, speaker: int | None, where: str) -> None:
    if text is not None and ids is not None:
        raise FieldError(f"{where}text: give text or text_ids, not both", field=f"{where}text")
    if text is None and ids is None:
        raise FieldError(f"{where}text: give text or text_ids", field=f"{where}text")
    if text is not None and not text.strip():
        raise FieldError(f"{where}text: must not be empty or whitespace", field=f"{where}text")
    if ids is not None and not ids:
        raise FieldError(f"{where}text_ids: must hold at least one id", field=f"{where}text_ids")
    if ids is not None and speaker is not None:
        raise FieldError(f"{where}speaker: text_ids hold the speaker tag already; give text with a speaker, or "
                         "text_ids alone", field=f"{where}speaker")


class Turn(StrictRequest):
    """One earlier turn of the conversation: who spoke (`speaker`) and what (`text`), or its ids
    (`text_ids`), with what it sounded like: `audio` (a recording, encoded with the codec before the request
    is admitted) or `codes` (its frames [F, N], e.g. an earlier result's codes), or neither."""

    speaker: Speaker = None
    text: StrictText | None = None
    text_ids: Ids = None
    audio: Any = None
    codes: Any = None

    @field_validator("audio")
    @classmethod
    def _audio(cls, v: Any) -> Any:
        return recording(v, "context.audio")

    @field_validator("codes")
    @classmethod
    def _codes(cls, v: Any) -> Any:
        return codes_array(v, "context.codes")

    @model_validator(mode="after")
    def _consistent(self) -> "Turn":
        _one_text(self.text, self.text_ids, self.speaker, "context.")
        if self.audio is not None and self.codes is not None:
            raise FieldError("context.audio: give a turn's audio or its codes, not both", field="context.audio")
        return self


class _CsmFields(StrictRequest):
    """The fields of `CsmRequest` before the common tail (`v2.fields.RequestTail`: its `max_frames` counts the
    stop frame; its `min_frames` is only 0, as the reference has no floor)."""

    text: StrictText | None = None
    text_ids: Ids = None                  # the turn's ids between <|begin_of_text|> and <|end_of_text|>
    speaker: Speaker = None               # None: the card's default speaker
    context: list[Turn] | None = Field(default=None, max_length=MAX_TURNS)
    voice: StrictText | None = None       # a stored voice (rt.voices): its codes and transcript, a context turn
    reference_audio: Any = None           # one recording with its transcript: a context turn in `speaker`
    reference_text: StrictText | None = None
    reference_text_ids: Ids = None
    temperature: Temperature = None       # codebook 0 (the backbone's head); 0 alone: both stages greedy
    top_k: TopK = None
    top_p: TopP = None
    depth_decoder_temperature: Temperature = None  # codebooks 1..N-1
    depth_decoder_top_k: TopK = None
    depth_decoder_top_p: TopP = None

    @field_validator("reference_audio")
    @classmethod
    def _reference(cls, v: Any) -> Any:
        if isinstance(v, list):
            raise ValueError("give one recording (a path, file bytes, or (samples, sample_rate)); more turns go "
                             "in context")
        return recording(v, "reference_audio")


class CsmRequest(RequestTail, _CsmFields):
    """One turn to speak, in the context of earlier turns (the module's docstring)."""

    @model_validator(mode="after")
    def _consistent(self) -> "CsmRequest":
        _one_text(self.text, self.text_ids, self.speaker, "")
        transcript = self.reference_text is not None or self.reference_text_ids is not None
        if self.reference_audio is None and transcript:
            name = "reference_text" if self.reference_text is not None else "reference_text_ids"
            raise FieldError(f"{name}: a transcript goes with reference_audio", field=name)
        if self.reference_audio is not None:
            if self.voice is not None:
                raise FieldError("voice: give voice or reference_audio, not both", field="voice")
            if not transcript:
                raise FieldError("reference_text: the recording's transcript is part of its turn (or "
                                 "reference_text_ids)", field="reference_text")
            if self.reference_text is not None and self.reference_text_ids is not None:
                raise FieldError("reference_text: give reference_text or reference_text_ids, not both",
                                 field="reference_text")
            if self.reference_text is not None and not self.reference_text.strip():
                raise FieldError("reference_text: must not be empty or whitespace", field="reference_text")
        if self.min_frames:
            raise FieldError(f"min_frames: this family has no frame floor (its stop is a frame whose codebooks "
                             f"0..N-2 are all 0, as the reference's, which has none); got {self.min_frames}",
                             field="min_frames")
        return self.checked_stream()


def parse(request: Any) -> CsmRequest:
    """A validated `CsmRequest` (from an instance or a dict, whose `sampling` may be nested as the runtime's:
    sampling_names.py); every refusal is a `RequestError` naming the first error's field. `language` and
    `instruction` (fields other families take) are accepted only as None."""
    if not isinstance(request, (CsmRequest, dict)):
        raise RequestError(f"request: expected a CsmRequest or a dict of fields, got {type(request).__name__}",
                           field=None)
    try:
        if isinstance(request, dict):
            for name in UNTAKEN:
                if request.get(name) is not None:
                    raise FieldError(f"{name}: this family takes no {name} (the voice comes from speaker, voice "
                                     "or context)", field=name)
            request = unfold_sampling({k: v for k, v in request.items() if k not in UNTAKEN})
        return CsmRequest.model_validate(request)
    except ValidationError as e:
        raise from_validation(e) from None
    except FieldError as e:
        raise RequestError(str(e), field=e.field) from None
