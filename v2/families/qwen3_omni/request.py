"""What a Qwen3-Omni request may say: the pydantic `OmniRequest`, checked field by field before anything runs.

Owns: the request schema of this family: `messages` (OpenAI's chat shape, rendered by chat.py) or `prompt_ids`
(the whole templated prompt as ids, audio placeholders expanded) with `audio` (a list of (samples, rate), one per
run of placeholders, in order); `speaker`; `modalities` (["text"]: the thinker alone; ["text", "audio"], the
default: the whole cascade); `max_tokens` (the thinker's cap) and the tail's `max_frames` (the talker's); the
thinker's `temperature`, `top_p`, `top_k` (greedy by default, as the reference) and the talker's
`talker_temperature`, `talker_top_k`, `talker_top_p`, `talker_repetition_penalty` (None: the checkpoint's
defaults); and `parse` (errors name the field). What needs the checkpoint (vocab bounds, speakers, the
placeholder count) is prepare.py's.
Must not know: the engine, slots, devices, cards.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, StrictInt, ValidationError, field_validator, model_validator

from v2.errors import FieldError, RequestError, from_validation
from v2.fields import INT64_MAX, Penalty, RequestTail, StrictRequest, StrictText, Temperature, TokenIds, TopK, TopP

Modality = Literal["text", "audio"]


class _OmniFields(StrictRequest):
    messages: list[dict[str, Any]] | None = None
    prompt_ids: TokenIds = None
    audio: list[Any] | None = None            # (samples, sample_rate) per clip, in the prompt's order
    speaker: StrictText | None = None         # Ethan, Chelsie, Aiden (case-insensitive); None: the first
    modalities: list[Modality] = ["text", "audio"]
    max_tokens: Annotated[StrictInt | None, Field(ge=1, le=INT64_MAX)] = None
    temperature: Temperature = None           # the thinker's; None / 0: greedy
    top_p: TopP = None
    top_k: TopK = None
    talker_temperature: Temperature = None
    talker_top_k: TopK = None
    talker_top_p: TopP = None
    talker_repetition_penalty: Penalty = None
    voice: StrictText | None = None           # stored voices are not spoken by this family (refused)

    @field_validator("audio")
    @classmethod
    def _clips(cls, v: list[Any] | None) -> list[tuple[np.ndarray, int]] | None:
        if v is None:
            return None
        out = []
        for i, clip in enumerate(v):
            if not isinstance(clip, (tuple, list)) or len(clip) != 2:
                raise ValueError(f"[{i}]: each clip is (samples, sample_rate)")
            samples, rate = clip
            if isinstance(rate, bool) or not isinstance(rate, int) or not 1000 <= rate <= 384_000:
                raise ValueError(f"[{i}]: sample_rate must be an int in 1000..384000, got {rate!r}")
            a = np.array(samples, dtype=np.float32, copy=True)
            if a.ndim != 1 or a.shape[0] < 1 or not np.isfinite(a).all():
                raise ValueError(f"[{i}]: samples must be a finite mono 1-D array with at least one sample")
            out.append((a, rate))
        return out


class OmniRequest(RequestTail, _OmniFields):
    """What a Qwen3-Omni request may say (the module's docstring)."""

    @property
    def decodes_speech(self) -> bool:
        """The cascade runs (the talker and, with `decode_audio`, code2wav)."""
        return "audio" in self.modalities

    @model_validator(mode="after")
    def _consistent(self) -> "OmniRequest":
        if (self.messages is None) == (self.prompt_ids is None):
            raise FieldError("messages: give messages or prompt_ids, not both and not neither", field="messages")
        if self.prompt_ids is not None and not self.prompt_ids:
            raise FieldError("prompt_ids: must hold at least one id", field="prompt_ids")
        if self.messages is not None and self.audio is not None:
            raise FieldError("audio: goes with prompt_ids (messages carry their audio as input_audio parts)",
                             field="audio")
        if not self.modalities or "text" not in self.modalities or len(set(self.modalities)) != len(self.modalities):
            raise FieldError('modalities: ["text"] or ["text", "audio"]', field="modalities")
        if self.voice is not None:
            raise FieldError("voice: this family speaks its checkpoint's speakers; name one as speaker",
                             field="voice")
        if self.speaker is not None and not self.speaker.strip():
            raise FieldError("speaker: must not be empty", field="speaker")
        return self.checked_stream()


def parse(request: Any) -> OmniRequest:
    """A validated `OmniRequest` from an instance or a dict of fields; a pydantic error becomes a RequestError
    naming the field."""
    if not isinstance(request, (OmniRequest, dict)):
        raise RequestError(f"request: expected an OmniRequest or a dict of fields, got {type(request).__name__}",
                           field="request")
    try:
        return OmniRequest.model_validate(request)
    except ValidationError as e:
        raise from_validation(e) from None
