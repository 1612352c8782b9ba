"""What a user submits: the pydantic `SpeechRequest`, checked field by field before anything runs.

Owns: the request schema (text or explicit prompt rows, reference codes, style fields, per-head
sampling, seed, frame limits, streaming, profile), its validation against a card's limits and the
model's id ranges (every error names the field), and turning it into prompt rows + sampling settings.
Must not know: the engine, slots, devices.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from v2.card import ModelCard
from v2.contracts import ExecutionProfile
from v2.models.config import MossTTSLocalConfig
from v2.models.prompt import PromptError, build_prompt, check_rows
from v2.models.sampling import HeadSampling, SamplingSettings
from v2.models.tokenizer import TextTokenizer


class RequestError(ValueError):
    """A request field is invalid; the message starts with the field's name."""


class OverloadedError(RuntimeError):
    """The waiting queue is full: try again later (nothing was queued)."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


def _finite(name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number")


class HeadParams(_Strict):
    """Sampling of one head; a field left out takes the card's default."""

    temperature: float | None = Field(default=None, ge=0, le=100)
    top_k: int | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)

    @field_validator("temperature")
    @classmethod
    def _finite_temperature(cls, v: float | None) -> float | None:
        _finite("temperature", v)
        return v

    def over(self, base: HeadSampling) -> HeadSampling:
        return HeadSampling(base.temperature if self.temperature is None else self.temperature,
                            base.top_k if self.top_k is None else self.top_k,
                            base.top_p if self.top_p is None else self.top_p)


class SamplingParams(_Strict):
    """Per-head settings; a top-level temperature/top_k/top_p applies to both heads (the heads' own win)."""

    stop: HeadParams = HeadParams()
    audio: HeadParams = HeadParams()
    temperature: float | None = Field(default=None, ge=0, le=100)
    top_k: int | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=100)

    @field_validator("temperature", "repetition_penalty")
    @classmethod
    def _finite_values(cls, v: float | None) -> float | None:
        _finite("value", v)
        return v

    def resolve(self, defaults: SamplingSettings) -> SamplingSettings:
        both = HeadParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)
        return SamplingSettings(
            stop=self.stop.over(both.over(defaults.stop)),
            audio=self.audio.over(both.over(defaults.audio)),
            repetition_penalty=defaults.repetition_penalty if self.repetition_penalty is None else self.repetition_penalty,
        )


class SpeechRequest(_Strict):
    text: str | None = None
    prompt_rows: Any = None          # explicit rows [T, 13] (list, array or tensor) instead of text
    reference_codes: Any = None      # [N, 12] codes of a voice prompt (or a list of them)
    instruction: str | None = None
    language: str | None = None
    duration_frames: int | None = Field(default=None, ge=1)  # the prompt's "Tokens" duration target
    sampling: SamplingParams = SamplingParams()
    seed: int = Field(default=0, ge=0, lt=2**63)
    max_frames: int | None = Field(default=None, ge=1)
    min_frames: int = Field(default=0, ge=0)
    stream: bool = False
    profile: ExecutionProfile = ExecutionProfile.SERVE
    decode_audio: bool = True        # False: codes (and, under ROLLOUT, the trajectory) only, no codec work
    timeout: float | None = Field(default=None, gt=0, le=86400)  # seconds from submit; then it ends with "abort"

    @model_validator(mode="after")
    def _one_source(self) -> "SpeechRequest":
        if (self.text is None) == (self.prompt_rows is None):
            raise ValueError("give exactly one of 'text' and 'prompt_rows'")
        if self.text is not None and not self.text.strip():
            raise ValueError("text: must not be empty or whitespace")
        if self.prompt_rows is not None and self.reference_codes is not None:
            raise ValueError("reference_codes: give them inside prompt_rows when prompt_rows is used")
        if self.max_frames is not None and self.min_frames > self.max_frames:
            raise ValueError(f"min_frames ({self.min_frames}) exceeds max_frames ({self.max_frames})")
        if self.stream and not self.decode_audio:
            raise ValueError("stream: a stream needs decode_audio")
        return self


def parse_request(request: SpeechRequest | dict[str, Any]) -> SpeechRequest:
    """A `SpeechRequest` from itself or a dict; a pydantic error becomes a RequestError naming the field."""
    if isinstance(request, SpeechRequest):
        return request
    try:
        return SpeechRequest.model_validate(request)
    except ValidationError as e:
        raise RequestError("; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'request'}: {err['msg']}"
                                     for err in e.errors())) from None


def _references(value: Any) -> list[torch.Tensor] | None:
    """One [N, 12] reference (tensor, array or nested list) or a list of them -> a list of tensors."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and value and (
            not isinstance(value[0], (list, tuple)) or (value[0] and isinstance(value[0][0], (list, tuple)))):
        return [torch.as_tensor(v) for v in value]  # a list of references
    return [torch.as_tensor(value)]


def prepare(request: SpeechRequest, card: ModelCard, cfg: MossTTSLocalConfig,
            tokenizer: TextTokenizer) -> tuple[torch.Tensor, SamplingSettings, int]:
    """Prompt rows [T, 13], resolved sampling and max frames for a request, checked against the card."""
    limits = card.loops.ar_decode
    try:
        if request.prompt_rows is not None:
            rows = check_rows(cfg, torch.as_tensor(request.prompt_rows))
        else:
            refs = _references(request.reference_codes)
            rows = build_prompt(tokenizer, cfg, request.text or "", reference_codes=refs,
                                instruction=request.instruction, language=request.language,
                                tokens=request.duration_frames)
    except (PromptError, ValueError, TypeError) as e:
        raise RequestError(str(e)) from None
    if len(rows) > limits.max_prompt_rows:
        field = "prompt_rows" if request.prompt_rows is not None else "text"
        raise RequestError(f"{field}: the prompt is {len(rows)} rows, over the card's max_prompt_rows ({limits.max_prompt_rows})")
    max_frames = request.max_frames if request.max_frames is not None else limits.max_frames
    if max_frames > limits.max_frames:
        raise RequestError(f"max_frames: {max_frames} exceeds the card's cap ({limits.max_frames})")
    if request.min_frames > max_frames:
        raise RequestError(f"min_frames: {request.min_frames} exceeds max_frames ({max_frames})")
    try:
        sampling = request.sampling.resolve(limits.sampling.settings())
    except ValueError as e:
        raise RequestError(f"sampling: {e}") from None
    return rows, sampling, max_frames
