"""What a MOSS-TTS-Local request may say: the pydantic `SpeechRequest`, checked field by field before anything runs.

Owns: this family's request schema (text or explicit prompt rows [T, 13]; a voice as reference codes
[N, 12], reference recordings, a transcript for continuation, or a stored voice's name; style fields,
per-head sampling (`sampling`: the stop head and the audio head, `SamplingParams`), seed, frame limits,
streaming, profile), the flat sampling names (`temperature`, `top_k`, `top_p`: the audio head's;
`repetition_penalty`) folded into `sampling`, its field rules (strict types; every integer bounded; arrays
and raw samples copied when validated, so nothing the caller holds is read later), and `parse_request` (a
pydantic error becomes a `RequestError` whose `field` comes from the error's location or from the rule that
raised it, never from its message: `v2.errors`). Checking a request against a card and laying out its
prompt is prepare.py's; taking `SpeechParams` (the server's request) is params.py's.
Must not know: the engine, slots, devices, cards.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import torch
from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from v2.errors import FieldError, RequestError, from_validation, reason
from v2.kit.checks import over
from v2.fields import (
    INT64_MAX, Penalty, RequestTail, StrictInt, StrictRequest, StrictText, Temperature, TopK, TopP, int_tensor,
)
from v2.recording import is_samples, recording
from v2.sampling_settings import HeadSampling, SamplingSettings


OptionalText = StrictText | None


class HeadParams(StrictRequest):
    """Sampling of one head; a field left out takes the card's default."""

    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None

    def over(self, base: HeadSampling) -> HeadSampling:
        return over(base, self.temperature, self.top_k, self.top_p)


class SamplingParams(StrictRequest):
    """Per-head settings. A top-level temperature/top_k/top_p is the audio head's, as in the reference
    implementation's `generate()` (the stop head keeps the card's unless `stop` sets it; `audio` wins over
    the top level)."""

    stop: HeadParams = HeadParams()
    audio: HeadParams = HeadParams()
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None
    repetition_penalty: Penalty = None

    def resolve(self, defaults: SamplingSettings) -> SamplingSettings:
        top = HeadParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)
        return SamplingSettings(
            stop=self.stop.over(defaults.stop),
            audio=self.audio.over(top.over(defaults.audio)),
            repetition_penalty=defaults.repetition_penalty if self.repetition_penalty is None else self.repetition_penalty,
        )


FLAT_SAMPLING: dict[str, str] = {
    "temperature": "sampling.audio.temperature", "top_k": "sampling.audio.top_k", "top_p": "sampling.audio.top_p",
    "repetition_penalty": "sampling.repetition_penalty"}
"""The top-level sampling names (HTTP's) -> the nested field each means: the audio head's knobs."""
_FLAT_CHECKS: dict[str, TypeAdapter[Any]] = {
    "temperature": TypeAdapter(Temperature), "top_k": TypeAdapter(TopK), "top_p": TypeAdapter(TopP),
    "repetition_penalty": TypeAdapter(Penalty)}


def fold_flat_sampling(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with `temperature`, `top_k`, `top_p` (the audio head's) and `repetition_penalty` moved into
    `sampling` (copies: the caller's dicts are not changed); a setting given both ways is refused naming both."""
    flat = {k: fields[k] for k in FLAT_SAMPLING if k in fields}
    sampling = fields.get("sampling", {})
    sampling = sampling.model_dump(exclude_none=True) if isinstance(sampling, SamplingParams) else sampling
    audio = sampling.get("audio", {}) if isinstance(sampling, dict) else None
    audio = audio.model_dump(exclude_none=True) if isinstance(audio, HeadParams) else audio
    if not flat or not isinstance(audio, dict):
        return fields  # nothing to fold, or a malformed `sampling` that its own validation names
    sampling, audio = dict(sampling), dict(audio)
    for name, value in flat.items():
        try:
            _FLAT_CHECKS[name].validate_python(value)
        except ValidationError as e:
            raise FieldError(f"{name}: {reason(e.errors()[0])}", field=name) from None
        if value is None:  # None is the card's default, as when left out
            continue
        for label, place in ((f"sampling.audio.{name}", audio), (f"sampling.{name}", sampling)):
            if place.get(name) is not None:
                raise FieldError(f"{name}: give {name} or {label}, not both", field=name)
        (audio if FLAT_SAMPLING[name].startswith("sampling.audio.") else sampling)[name] = value
    if audio or "audio" in sampling:
        sampling["audio"] = audio
    return {**{k: v for k, v in fields.items() if k not in FLAT_SAMPLING}, "sampling": sampling}


class _SpeechFields(StrictRequest):
    """The fields of `SpeechRequest` before the common tail (`v2.fields.RequestTail`)."""

    text: OptionalText = None
    prompt_rows: Any = None          # explicit rows [T, 13] (list, array or tensor) instead of text
    reference_codes: Any = None      # [N, 12] codes of a voice prompt (or a list of them)
    reference_audio: Any = None      # a recording (path, file bytes, or (samples, sample_rate)) or a list of them
    reference_text: OptionalText = None  # the one reference's transcript: "continuation" mode
    voice: OptionalText = None       # the name of a stored voice (rt.voices)
    instruction: OptionalText = None
    language: OptionalText = None
    duration_frames: Annotated[StrictInt | None, Field(ge=1, le=INT64_MAX)] = None  # the prompt's "Tokens" target
    sampling: SamplingParams = SamplingParams()

    @field_validator("prompt_rows")
    @classmethod
    def _rows(cls, v: Any) -> torch.Tensor | None:
        """A private int64 copy, taken now: later changes to the caller's array reach nothing."""
        return None if v is None else int_tensor(v, "prompt_rows")

    @field_validator("reference_codes")
    @classmethod
    def _references(cls, v: Any) -> tuple[torch.Tensor, ...] | None:
        """One [N, 12] reference or a list of them (or a [K, N, 12] array) -> a tuple of private int64 copies."""
        if v is None:
            return None
        several = isinstance(v, (list, tuple)) and len(v) > 0 and (
            isinstance(v[0], (torch.Tensor, np.ndarray)) and v[0].ndim == 2
            or isinstance(v[0], (list, tuple)) and len(v[0]) > 0 and isinstance(v[0][0], (list, tuple)))
        if several:
            return tuple(int_tensor(r, "reference_codes", f"reference_codes[{i}]") for i, r in enumerate(v))
        codes = int_tensor(v, "reference_codes")
        return tuple(codes.unbind(0)) if codes.dim() == 3 else (codes,)

    @field_validator("reference_audio")
    @classmethod
    def _recordings(cls, v: Any) -> tuple[Any, ...] | None:
        """One recording or a list of them; raw samples are copied now (files are read at submit)."""
        if v is None:
            return None
        items = v if isinstance(v, list) or (isinstance(v, tuple) and not is_samples(v)) else [v]
        if not items:
            raise FieldError("reference_audio: give at least one recording", field="reference_audio")
        return tuple(recording(x, f"reference_audio[{i}]" if len(items) > 1 else "reference_audio")
                     for i, x in enumerate(items))


class SpeechRequest(RequestTail, _SpeechFields):
    """What a MOSS-TTS-Local request may say (the module's docstring)."""

    @model_validator(mode="before")
    @classmethod
    def _flat_sampling(cls, data: Any) -> Any:
        return fold_flat_sampling(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _one_source(self) -> "SpeechRequest":
        """The rules across fields; each names the field it blames (a `FieldError`, kept by `parse_request`)."""
        if (self.text is None) == (self.prompt_rows is None):
            raise FieldError("text: give exactly one of 'text' and 'prompt_rows'", field="text")
        if self.text is not None and not self.text.strip():
            raise FieldError("text: must not be empty or whitespace", field="text")
        given = [f for f in ("reference_codes", "reference_audio", "voice") if getattr(self, f) is not None]
        if self.prompt_rows is not None and (given or self.reference_text is not None):
            field = (given or ["reference_text"])[0]
            raise FieldError(f"{field}: give references inside prompt_rows when prompt_rows is used", field=field)
        if len(given) > 1:
            raise FieldError(f"{given[1]}: give only one of reference_codes, reference_audio and voice",
                             field=given[1])
        if self.reference_text is not None:
            count = 1 if self.voice is not None else len(getattr(self, given[0])) if given else 0
            if count != 1:
                raise FieldError("reference_text: continuation needs exactly one reference (audio, codes or voice)",
                                 field="reference_text")
            if not self.reference_text.strip():
                raise FieldError("reference_text: must not be empty or whitespace", field="reference_text")
        if self.max_frames is not None and self.min_frames > self.max_frames:
            raise FieldError(f"min_frames ({self.min_frames}) exceeds max_frames ({self.max_frames})",
                             field="min_frames")
        return self.checked_stream()


def parse_request(request: object) -> SpeechRequest:
    """A validated `SpeechRequest` (an instance is validated again, and its arrays copied again); a pydantic
    error becomes a RequestError of the first error's field (every error is in the message)."""
    if not isinstance(request, (SpeechRequest, dict)):
        raise RequestError(f"request: expected a SpeechRequest or a dict of fields, got {type(request).__name__}",
                           field=None)
    try:
        return SpeechRequest.model_validate(request)
    except ValidationError as e:
        raise from_validation(e) from None
