"""What a user submits: the pydantic `SpeechRequest`, checked field by field before anything runs.

Owns: the request schema (text or explicit prompt rows, reference codes, style fields, per-head
sampling, seed, frame limits, streaming, profile), its validation against a card's limits and the
model's id ranges (every error names the field), and turning it into prompt rows + sampling settings.
Must not know: the engine, slots, devices.
"""

from __future__ import annotations

import numbers
import os
import re
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from v2.card import ModelCard
from v2.contracts import ExecutionProfile
from v2.fields import (
    INT64_MAX, TOP_K_MAX, FieldError, StrictBool, StrictFloat, StrictInt, StrictText, check_penalty, check_temperature, int_tensor,
)
from v2.models.config import MossTTSLocalConfig
from v2.models.prompt import PromptError, build_prompt, check_rows
from v2.models.sampling import HeadSampling, SamplingSettings
from v2.models.tokenizer import TextTokenizer


class RequestError(ValueError):
    """A request field is invalid; the message starts with the field's name."""


class OverloadedError(RuntimeError):
    """The waiting queue is full: try again later (nothing was queued)."""


class _Strict(BaseModel):
    # revalidate_instances: an instance made by model_copy(update=...) or model_construct() is checked again
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True,
                              revalidate_instances="always")


Temperature = Annotated[StrictFloat | None, AfterValidator(check_temperature)]
TopK = Annotated[StrictInt | None, Field(ge=0, le=TOP_K_MAX)]
TopP = Annotated[StrictFloat | None, Field(gt=0, le=1)]
Penalty = Annotated[StrictFloat | None, AfterValidator(check_penalty)]
OptionalText = StrictText | None


class HeadParams(_Strict):
    """Sampling of one head; a field left out takes the card's default."""

    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None

    def over(self, base: HeadSampling) -> HeadSampling:
        return HeadSampling(base.temperature if self.temperature is None else self.temperature,
                            base.top_k if self.top_k is None else self.top_k,
                            base.top_p if self.top_p is None else self.top_p)


class SamplingParams(_Strict):
    """Per-head settings; a top-level temperature/top_k/top_p applies to both heads (the heads' own win)."""

    stop: HeadParams = HeadParams()
    audio: HeadParams = HeadParams()
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None
    repetition_penalty: Penalty = None

    def resolve(self, defaults: SamplingSettings) -> SamplingSettings:
        both = HeadParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)
        return SamplingSettings(
            stop=self.stop.over(both.over(defaults.stop)),
            audio=self.audio.over(both.over(defaults.audio)),
            repetition_penalty=defaults.repetition_penalty if self.repetition_penalty is None else self.repetition_penalty,
        )


class SpeechRequest(_Strict):
    text: OptionalText = None
    prompt_rows: Any = None          # explicit rows [T, 13] (list, array or tensor) instead of text
    reference_codes: Any = None      # [N, 12] codes of a voice prompt (or a list of them)
    reference_audio: Any = None      # a recording (path, file bytes, or (samples, sample_rate)) or a list of them
    reference_text: OptionalText = None  # the one reference's transcript: "continuation" mode
    voice: OptionalText = None       # the name of a stored voice (rt.voices)
    instruction: OptionalText = None
    language: OptionalText = None
    duration_frames: Annotated[StrictInt | None, Field(ge=1)] = None  # the prompt's "Tokens" duration target
    sampling: SamplingParams = SamplingParams()
    seed: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = 0
    max_frames: Annotated[StrictInt | None, Field(ge=1, le=INT64_MAX)] = None
    min_frames: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = 0
    stream: StrictBool = False
    profile: ExecutionProfile = ExecutionProfile.SERVE
    decode_audio: StrictBool = True  # False: codes (and, under ROLLOUT, the trajectory) only, no codec work
    timeout: Annotated[StrictFloat | None, Field(gt=0, le=86400)] = None  # seconds from submit; then "abort"

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
            return tuple(int_tensor(r, f"reference_codes[{i}]") for i, r in enumerate(v))
        codes = int_tensor(v, "reference_codes")
        return tuple(codes.unbind(0)) if codes.dim() == 3 else (codes,)

    @field_validator("reference_audio")
    @classmethod
    def _recordings(cls, v: Any) -> tuple[Any, ...] | None:
        """One recording or a list of them; raw samples are copied now (files are read at submit)."""
        if v is None:
            return None
        items = v if isinstance(v, list) or (isinstance(v, tuple) and not _is_samples(v)) else [v]
        if not items:
            raise ValueError("give at least one recording")
        return tuple(_recording(x, f"reference_audio[{i}]" if len(items) > 1 else "reference_audio")
                     for i, x in enumerate(items))

    @model_validator(mode="after")
    def _one_source(self) -> "SpeechRequest":
        if (self.text is None) == (self.prompt_rows is None):
            raise ValueError("give exactly one of 'text' and 'prompt_rows'")
        if self.text is not None and not self.text.strip():
            raise ValueError("text: must not be empty or whitespace")
        given = [f for f in ("reference_codes", "reference_audio", "voice") if getattr(self, f) is not None]
        if self.prompt_rows is not None and (given or self.reference_text is not None):
            raise ValueError(f"{(given or ['reference_text'])[0]}: give references inside prompt_rows when prompt_rows is used")
        if len(given) > 1:
            raise ValueError(f"{given[1]}: give only one of reference_codes, reference_audio and voice")
        if self.reference_text is not None:
            count = 1 if self.voice is not None else len(getattr(self, given[0])) if given else 0
            if count != 1:
                raise ValueError("reference_text: continuation needs exactly one reference (audio, codes or voice)")
            if not self.reference_text.strip():
                raise ValueError("reference_text: must not be empty or whitespace")
        if self.max_frames is not None and self.min_frames > self.max_frames:
            raise ValueError(f"min_frames ({self.min_frames}) exceeds max_frames ({self.max_frames})")
        if self.stream and not self.decode_audio:
            raise ValueError("stream: a stream needs decode_audio")
        return self


def _is_samples(v: tuple[Any, ...]) -> bool:
    """(samples, sample_rate): a pair whose second item is a number."""
    return len(v) == 2 and isinstance(v[1], numbers.Real) and not isinstance(v[1], bool)


def _recording(x: Any, field: str) -> Any:
    """A path (as str), a private copy of file bytes, or (a private copy of the samples, rate)."""
    if isinstance(x, (str, os.PathLike)):
        return os.fspath(x)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, tuple) and _is_samples(x):
        samples = x[0].detach().cpu().numpy() if isinstance(x[0], torch.Tensor) else x[0]
        if isinstance(samples, np.ndarray) and samples.dtype.kind not in "fi":
            raise FieldError(f"{field}: samples must be float, int16 or int32 PCM, got {samples.dtype}")
        try:
            return (np.array(samples, copy=True), x[1])
        except (TypeError, ValueError) as e:
            raise FieldError(f"{field}: samples are not an array of numbers ({e})") from None
    raise FieldError(f"{field}: expected a path, the bytes of an audio file, or (samples, sample_rate); "
                     f"got {type(x).__name__}")


def parse_request(request: SpeechRequest | dict[str, Any]) -> SpeechRequest:
    """A validated `SpeechRequest` (an instance is validated again, and its arrays copied again); a pydantic
    error becomes a RequestError naming the field."""
    if not isinstance(request, (SpeechRequest, dict)):
        raise RequestError(f"request: expected a SpeechRequest or a dict of fields, got {type(request).__name__}")
    try:
        return SpeechRequest.model_validate(request)
    except ValidationError as e:
        raise RequestError("; ".join(_describe(err) for err in e.errors())) from None


def _describe(err: Any) -> str:
    """'field: message'; a converter's message that already names the field (and row) is kept as it is."""
    loc = ".".join(str(x) for x in err["loc"])
    message = str(err["ctx"]["error"]) if err["type"] == "value_error" and "error" in err.get("ctx", {}) else err["msg"]
    if not loc:  # a whole-request rule: its message names the field when one is to blame
        return message if _NAMED.match(message) else f"request: {message}"
    return message if message.startswith((f"{loc}:", f"{loc}[")) else f"{loc}: {message}"


_NAMED = re.compile(r"^[a-z_][a-z0-9_.]*(\[\d+\])*: ")


@dataclass(frozen=True)
class CodecSpec:
    """What preparing reference audio needs to know of the codec."""

    sample_rate: int
    hop: int  # samples per channel per frame


@dataclass(frozen=True)
class Prepared:
    """A request checked against the card and turned into what the engine runs."""

    rows: torch.Tensor            # [T, 13]; while `audio` waits for the encoder its rows hold placeholder codes
    sampling: SamplingSettings
    max_frames: int
    audio: tuple[np.ndarray, ...] = ()  # recordings to encode first: [channels, n] float32 at the codec's rate
    transcript: str | None = None       # continuation mode: the reference's transcript


def _text_limits(request: SpeechRequest, limits: Any) -> None:
    """Cheap bounds first: a text field over the card's character cap is refused before any tokenising."""
    for name in ("text", "instruction", "language", "reference_text"):
        value = getattr(request, name)
        if value is not None and len(value) > limits.max_text_chars:
            raise RequestError(f"{name}: {len(value)} characters, over the card's max_text_chars ({limits.max_text_chars})")
    if request.duration_frames is not None and request.duration_frames > limits.max_frames:
        raise RequestError(f"duration_frames: {request.duration_frames} exceeds the card's max_frames ({limits.max_frames})")


def _longest_field(request: SpeechRequest, tokenizer: TextTokenizer, references: tuple[torch.Tensor, ...]) -> str:
    """Which field contributes the most rows to a prompt that is too long (only on that error path)."""
    if request.prompt_rows is not None:
        return "prompt_rows"
    sizes = {name: len(tokenizer.encode(getattr(request, name)))
             for name in ("text", "instruction", "language", "reference_text") if getattr(request, name)}
    source = next((f for f in ("reference_audio", "voice") if getattr(request, f) is not None), "reference_codes")
    sizes[source] = sum(len(r) + 2 for r in references)
    return max(sizes, key=lambda k: sizes[k])


def _recordings(request: SpeechRequest, card: ModelCard, codec: CodecSpec | None) -> tuple[np.ndarray, ...]:
    """Read, resample and level-set each reference recording (the caller's thread; encoding runs later)."""
    from v2.models.codec.audio_in import AudioError, prepare_reference

    limits = card.loops.encode
    audio = request.reference_audio or ()
    if not audio:
        return ()
    if codec is None:
        raise RequestError("reference_audio: this runtime has no codec encoder (the card does not enable it)")
    if len(audio) > limits.max_references:
        raise RequestError(f"reference_audio: {len(audio)} recordings, over the card's max_references ({limits.max_references})")
    out = []
    for i, source in enumerate(audio):
        field = f"reference_audio[{i}]" if len(audio) > 1 else "reference_audio"
        try:
            out.append(prepare_reference(source, sample_rate=codec.sample_rate, min_seconds=codec.hop / codec.sample_rate,
                                         max_seconds=limits.max_reference_seconds))
        except AudioError as e:
            raise RequestError(f"{field}: {e}") from None
    return tuple(out)


def build_rows(request: SpeechRequest, cfg: MossTTSLocalConfig, tokenizer: TextTokenizer,
               references: tuple[torch.Tensor, ...], transcript: str | None) -> torch.Tensor:
    """The prompt rows [T, 13]: explicit rows, or the template with the references in the user turn ("clone")
    or, with a transcript, the one reference as assistant audio after `transcript + text` ("continuation")."""
    if request.prompt_rows is not None:
        return check_rows(cfg, request.prompt_rows)
    common = dict(instruction=request.instruction, language=request.language, tokens=request.duration_frames)
    if transcript is not None:
        return build_prompt(tokenizer, cfg, transcript + (request.text or ""), assistant_codes=references[0], **common)
    return build_prompt(tokenizer, cfg, request.text or "", reference_codes=references or None, **common)


def prepare(request: SpeechRequest, card: ModelCard, cfg: MossTTSLocalConfig, tokenizer: TextTokenizer, *,
            codec: CodecSpec | None = None, voice: Any = None) -> Prepared:
    """Check a request against the card and lay out its prompt. `voice`: the stored voice `request.voice`
    names (its codes, and its transcript unless `reference_text` is given). Reference recordings are
    read and prepared here; their rows hold placeholder codes of the right length until encoded."""
    limits = card.loops.ar_decode
    _text_limits(request, limits)
    audio = _recordings(request, card, codec)
    if audio:
        assert codec is not None
        references = tuple(torch.zeros(a.shape[1] // codec.hop, cfg.n_vq, dtype=torch.long) for a in audio)
    elif voice is not None:
        references = (torch.as_tensor(voice.codes, dtype=torch.long),)
    else:
        references = tuple(request.reference_codes or ())
    transcript = request.reference_text if request.reference_text is not None else getattr(voice, "text", None)
    try:
        rows = build_rows(request, cfg, tokenizer, references, transcript)
    except (PromptError, ValueError, TypeError) as e:
        raise RequestError(str(e)) from None
    if len(rows) > limits.max_prompt_rows:
        field = _longest_field(request, tokenizer, references)
        raise RequestError(f"{field}: the prompt is {len(rows)} rows, over the card's max_prompt_rows "
                           f"({limits.max_prompt_rows})")
    max_frames = request.max_frames if request.max_frames is not None else limits.max_frames
    if max_frames > limits.max_frames:
        raise RequestError(f"max_frames: {max_frames} exceeds the card's cap ({limits.max_frames})")
    if request.min_frames > max_frames:
        raise RequestError(f"min_frames: {request.min_frames} exceeds max_frames ({max_frames})")
    try:
        sampling = request.sampling.resolve(limits.sampling.settings())
    except ValueError as e:
        raise RequestError(f"sampling: {e}") from None
    return Prepared(rows, sampling, max_frames, audio, transcript)
