"""Checking a request against a card and laying out its prompt: what the engine runs.

Owns: the cheap bounds first (text fields against the card's character cap), reading, resampling and
level-setting reference recordings (refusals name `reference_audio`), the prompt layout (explicit rows;
the template with references in the user turn, "clone"; or one reference as assistant audio after its
transcript, "continuation"), placeholder codes of the right length while recordings wait for the encoder,
naming the field that makes a prompt too long, frame limits, resolving sampling against the card, and
long text's segments. Every prompt's text and rows come from `long_text.py` beside this (the family's one
text route: the split, the first prompt's rows, the later segments' plans).
Must not know: the engine, slots, devices, the encoder's weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from v2.errors import RequestError
from v2.families.moss_tts_local.card import MossCard as ModelCard
from v2.families.moss_tts_local.long_text import TextSegment, build_rows, plan, split
from v2.families.moss_tts_local.request import SpeechRequest
from v2.kit.checks import frame_budget
from v2.fields import check_text_chars
from v2.long_text import unsplit
from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.prompt import PromptError
from v2.sampling_settings import SamplingSettings
from v2.models.moss_tts_local.tokenizer import TextTokenizer


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
    segments: tuple[TextSegment, ...] = ()  # long text: the segments it is spoken as (`max_frames` is the first's cap)

    @property
    def inputs(self) -> tuple[np.ndarray, ...]:
        """What waits for the front loop before admission: the recordings to encode."""
        return self.audio


def _text_limits(request: SpeechRequest, limits: Any) -> None:
    """Cheap bounds first: a text field over the card's character cap is refused before any tokenising."""
    names = ("text", "instruction", "language", "reference_text")
    check_text_chars(((name, getattr(request, name)) for name in names), limits.max_text_chars)
    if request.duration_frames is not None and request.duration_frames > limits.max_frames:
        raise RequestError(f"duration_frames: {request.duration_frames} exceeds the card's max_frames ({limits.max_frames})",
                           field="duration_frames")


def _longest_field(request: SpeechRequest, tokenizer: TextTokenizer, references: tuple[torch.Tensor, ...]) -> str:
    """Which field contributes the most rows to a prompt that is too long (only on that error path)."""
    if request.prompt_rows is not None:
        return "prompt_rows"
    sizes = {name: len(tokenizer.encode(getattr(request, name)))
             for name in ("text", "instruction", "language", "reference_text") if getattr(request, name)}
    source = next((f for f in ("reference_audio", "voice") if getattr(request, f) is not None), "reference_codes")
    sizes[source] = sum(len(r) + 2 for r in references)
    return max(sizes, key=lambda k: sizes[k])


def _prompt_field(request: SpeechRequest, argument: str) -> str:
    """The request field behind a prompt layout argument: the reference's source for its codes, `duration_frames`
    for the duration target, else the argument itself (`text`, `prompt_rows`)."""
    if argument in ("reference_codes", "assistant_codes"):
        return next((f for f in ("reference_audio", "voice") if getattr(request, f) is not None), "reference_codes")
    return "duration_frames" if argument == "tokens" else argument


def prepare_recording(source: Any, card: ModelCard, codec: CodecSpec | None, label: str = "reference_audio") -> np.ndarray:
    """One reference recording read, resampled and level-set for the encoder: [channels, n] float32 at the
    codec's rate (the caller's thread; encoding runs later). Refusals are of `reference_audio`, their messages
    naming `label` (e.g. "reference_audio[1]")."""
    from v2.models.moss_codec.audio_in import AudioError, prepare_reference

    if codec is None:
        raise RequestError(f"{label}: this runtime has no codec encoder (the card does not enable it)",
                           field="reference_audio")
    try:
        return prepare_reference(source, sample_rate=codec.sample_rate, min_seconds=codec.hop / codec.sample_rate,
                                 max_seconds=card.loops.encode.max_reference_seconds)
    except AudioError as e:
        raise RequestError(f"{label}: {e}", field="reference_audio") from None


def _recordings(request: SpeechRequest, card: ModelCard, codec: CodecSpec | None) -> tuple[np.ndarray, ...]:
    audio = request.reference_audio or ()
    if len(audio) > card.loops.encode.max_references:
        raise RequestError(f"reference_audio: {len(audio)} recordings, over the card's max_references "
                           f"({card.loops.encode.max_references})", field="reference_audio")
    return tuple(prepare_recording(source, card, codec, f"reference_audio[{i}]" if len(audio) > 1 else "reference_audio")
                 for i, source in enumerate(audio))


def reference_codes(request: SpeechRequest, audio: tuple[np.ndarray, ...], voice: Any, codec: CodecSpec | None,
                    cfg: MossTTSLocalConfig) -> tuple[torch.Tensor, ...]:
    """The codes a prompt carries: placeholders of the right length while `audio` waits for the encoder, else
    the stored voice's, else the request's `reference_codes`."""
    if audio:
        assert codec is not None
        return tuple(torch.zeros(a.shape[1] // codec.hop, cfg.n_vq, dtype=torch.long) for a in audio)
    if voice is not None:
        return (torch.as_tensor(voice.codes, dtype=torch.long),)
    return tuple(request.reference_codes or ())


def prepare(request: SpeechRequest, card: ModelCard, cfg: MossTTSLocalConfig, tokenizer: TextTokenizer, *,
            codec: CodecSpec | None = None, voice: Any = None) -> Prepared:
    """Check a request against the card and lay out its prompt. `voice`: the stored voice `request.voice`
    names (its codes, and its transcript unless `reference_text` is given). Reference recordings are
    read and prepared here; their rows hold placeholder codes of the right length until encoded."""
    limits = card.loops.ar_decode
    _text_limits(request, limits)
    parts, said = split(request, limits.max_segment_chars)  # long text: split at sentence ends (refusals name `text`)
    audio = _recordings(request, card, codec)
    references = reference_codes(request, audio, voice, codec, cfg)
    transcript = request.reference_text if request.reference_text is not None else getattr(voice, "text", None)
    try:
        rows = build_rows(request, cfg, tokenizer, references, transcript, said)
    except PromptError as e:
        raise RequestError(str(e), field=_prompt_field(request, e.field)) from None
    except (ValueError, TypeError) as e:  # the tokenizer's: no one field to blame
        raise RequestError(str(e), field=None) from None
    if len(rows) > limits.max_prompt_rows:
        field = _longest_field(request, tokenizer, references)
        why = unsplit(request, limits.max_segment_chars) if field == "text" else ""
        raise RequestError(f"{field}: the prompt is {len(rows)} rows, over the card's max_prompt_rows "
                           f"({limits.max_prompt_rows}){why}", field=field)
    max_frames = frame_budget(request.max_frames, limits.max_frames, limits.max_frames, request.min_frames)
    try:
        sampling = request.sampling.resolve(limits.sampling.settings())
    except ValueError as e:
        raise RequestError(f"sampling: {e}", field="sampling") from None
    segments = plan(request, parts, said, cfg, tokenizer, max_frames=max_frames, min_frames=request.min_frames,
                    max_prompt_rows=limits.max_prompt_rows)
    return Prepared(rows, sampling, segments[0].max_frames if segments else max_frames, audio, transcript, segments)
