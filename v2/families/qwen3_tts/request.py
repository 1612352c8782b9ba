"""What a Qwen3-TTS request may say: the pydantic `Qwen3Request`, checked field by field before anything runs.

Owns: the request schema of this family (text or the text's own token ids; a CustomVoice `speaker`; a
`language`; an instruction or its ids; one reference recording with its transcript or transcript ids (in
context clone) or `x_vector_only`, or a stored `voice` instead of the recording; the text feed; frame limits; seed; the talker's sampling (`temperature`,
`top_k`, `top_p`, `repetition_penalty`) and the code predictor's (`subtalker_temperature`, `subtalker_top_k`,
`subtalker_top_p`); streaming, timeout, profile, decode_audio), its field rules (strict types, bounded
integers, private copies of arrays), and `parse` (errors name the field; given the checkpoint's language
names, `language` resolved onto them: an ISO 639-1 code or any case of a name, languages.py). What else
needs the checkpoint (speaker names, vocab bounds, the mode a checkpoint supports) is prepare.py's.
Must not know: the engine, slots, devices, cards.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

from pydantic import ValidationError, field_validator, model_validator

from v2.errors import FieldError, RequestError, from_validation
from v2.families.qwen3_tts import languages as language_names
from v2.families.qwen3_tts.sampling_names import unfold_sampling
from v2.fields import Penalty, RequestTail, StrictBool, StrictRequest, StrictText, Temperature, TokenIds, TopK, TopP
from v2.recording import is_samples, recording

Ids = TokenIds  # a list, tuple, 1-D array or tensor of ids (v2.fields)


class _Qwen3Fields(StrictRequest):
    """The fields of `Qwen3Request` before the common tail (`v2.fields.RequestTail`: its `max_frames` counts the
    frames produced; the stop id is masked until `min_frames`)."""

    text: StrictText | None = None
    text_ids: Ids = None                 # the text's own token ids (no chat template)
    speaker: StrictText | None = None    # a CustomVoice speaker name (case-insensitive)
    language: StrictText | None = None   # the checkpoint's names or ISO 639-1 codes (any case); None = "Auto"
    instruction: StrictText | None = None
    instruction_ids: Ids = None
    reference_audio: Any = None          # one recording: a path, file bytes, or (samples, sample_rate)
    voice: StrictText | None = None      # a stored voice's name (rt.voices): its codes, x-vector, transcript
    reference_text: StrictText | None = None
    reference_text_ids: Ids = None
    x_vector_only: StrictBool = False    # clone from the speaker embedding alone (no reference codes, no transcript)
    text_feed: Literal["streaming", "whole"] | None = None  # None: the reference API's default for the mode
    temperature: Temperature = None      # the talker's (group 0); 0 without subtalker_temperature: both greedy
    top_k: TopK = None
    top_p: TopP = None
    repetition_penalty: Penalty = None   # the talker's group 0 only, as the reference applies it
    subtalker_temperature: Temperature = None  # the code predictor's (groups 1..G-1)
    subtalker_top_k: TopK = None
    subtalker_top_p: TopP = None

    @field_validator("reference_audio")
    @classmethod
    def _recording(cls, v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, list) or (isinstance(v, tuple) and not is_samples(v)):
            raise ValueError("give one recording (a path, file bytes, or (samples, sample_rate))")
        return recording(v, "reference_audio")


class Qwen3Request(RequestTail, _Qwen3Fields):
    """What a Qwen3-TTS request may say (the module's docstring)."""

    @model_validator(mode="after")
    def _consistent(self) -> "Qwen3Request":
        for name in ("text", "instruction", "reference_text"):
            if getattr(self, name) is not None and getattr(self, f"{name}_ids" if name != "text" else "text_ids") is not None:
                raise FieldError(f"{name}: give {name} or {name}_ids, not both", field=name)
        if self.text is None and self.text_ids is None:
            raise FieldError("text: give text or text_ids", field='text')
        if self.text is not None and not self.text.strip():
            raise FieldError("text: must not be empty or whitespace", field='text')
        if self.text_ids is not None and not self.text_ids:
            raise FieldError("text_ids: must hold at least one id", field='text_ids')
        clone = self.reference_audio is not None or self.voice is not None
        transcript = self.reference_text is not None or self.reference_text_ids is not None
        if self.reference_audio is not None and self.voice is not None:
            raise FieldError("voice: give voice or reference_audio, not both", field='voice')
        if not clone:
            if transcript:
                name = "reference_text" if self.reference_text is not None else "reference_text_ids"
                raise FieldError(f"{name}: a transcript goes with reference_audio or voice", field=name)
            if self.x_vector_only:
                raise FieldError("x_vector_only: goes with reference_audio or voice", field='x_vector_only')
        else:
            source = "reference_audio" if self.voice is None else "voice"
            if self.speaker is not None:
                raise FieldError(f"speaker: a voice clone takes its voice from {source}, not a speaker name",
                                 field="speaker")
            if self.instruction is not None or self.instruction_ids is not None:
                name = "instruction" if self.instruction is not None else "instruction_ids"
                raise FieldError(f"{name}: a voice clone takes no instruction (the reference's clone has none)",
                                 field=name)
            if not self.x_vector_only and not transcript and self.voice is None:  # a voice may hold its transcript
                raise FieldError("reference_text: an in-context clone needs the reference's transcript "
                                 "(or x_vector_only: true)", field='reference_text')
            if self.reference_text is not None and not self.reference_text.strip():
                raise FieldError("reference_text: must not be empty or whitespace", field='reference_text')
        if self.speaker is not None and not self.speaker.strip():
            raise FieldError("speaker: must not be empty", field='speaker')
        if self.max_frames is not None and self.min_frames > self.max_frames:
            raise FieldError(f"min_frames: {self.min_frames} exceeds max_frames ({self.max_frames})",
                             field="min_frames")
        return self.checked_stream()


def parse(request: Any, *, languages: Iterable[str] | None = None) -> Qwen3Request:
    """A validated `Qwen3Request` (from an instance or a dict, whose `sampling` may be nested as the runtime's:
    `sampling_names.py`); a pydantic error becomes a RequestError naming the field. `languages`: the
    checkpoint's language names; given, `language` comes back as one of them ("en" -> "English") or is
    refused naming `language` with the values accepted."""
    if not isinstance(request, (Qwen3Request, dict)):
        raise RequestError(f"request: expected a Qwen3Request or a dict of fields, got {type(request).__name__}",
                           field='request')
    if isinstance(request, dict):
        request = unfold_sampling(request)  # the runtime's nested `sampling` (HTTP, rollouts) as flat names
    try:
        parsed = Qwen3Request.model_validate(request)
    except ValidationError as e:
        raise from_validation(e) from None
    if languages is None or parsed.language is None:
        return parsed
    return parsed.model_copy(update={"language": language_names.resolve(parsed.language, languages)})
