"""Checking a Qwen3-TTS request against its card and checkpoint, and laying out its prompt rows.

Owns: the cheap bounds first (text fields against the card's character cap), the mode a request asks for
(a `speaker`: custom voice; `reference_audio`: voice clone, in context with its transcript or from the
x-vector alone; neither: voice design) and what the checkpoint supports (a speaker table, a speaker
encoder, a codec encoder; a CustomVoice checkpoint needs a speaker), token ids with the chat template (from
the text through the release tokenizer, or the text's own ids), the prompt layout (`v2.models.qwen3_tts.
prompt`: every mode and text feed, the dialect rule, the 0.6B rule) as int rows [T, 2 + G] (text id,
codec id or SPEAKER, G codes; -1 = none) with the trailing text ids, reading the reference recording
(refusals name `reference_audio`), placeholder codes and x-vector until the front loop has encoded them
(`with_encoded` lays the rows out again), frame limits and the sampling (card or generation_config.json
defaults, then the request's), and a long text's segments (split at sentence ends, `v2/long_text.py`; the
first is laid out here, the carried prompts of the others in segments.py). Errors name the request's field.
Must not know: the engine, slots, devices, the weights.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from v2.errors import RequestError
from v2.kit.checks import frame_budget, over
from v2.families.qwen3_tts import segments as long_text
from v2.families.qwen3_tts.request import Qwen3Request
from v2.fields import check_text_chars
from v2.long_text import first_text, spans, unsplit
from v2.sentences import spoken
from v2.models.qwen3_tts.config import Qwen3TTSConfig, Qwen3TTSSampling
from v2.models.qwen3_tts.prompt import SPEAKER, PromptError, PromptLayout, PromptSpec, layout

MIN_NEW_TOKENS = 2  # the reference's floor: EOS is masked at the first two group-0 choices
QWEN_ROLE_IDS = {"assistant\n": (77091, 198), "user\n": (872, 198), "\n": (198,)}  # the Qwen2 vocab's
# the request's field a prompt-builder error is about
_FIELDS = {"input_ids": "text", "instruct_ids": "instruction", "ref_ids": "reference_text", "mode": "reference_audio",
           "language": "language", "speaker": "speaker"}


@dataclass(frozen=True)
class CodecSpec:
    """What reading a reference recording needs to know of the encoders."""

    codec_rate: int
    hop: int
    speaker_rate: int
    has_encoder: bool


@dataclass(frozen=True)
class EncodeInput:
    """A recording for the front loop: at the speaker encoder's rate (x-vector) and at the codec's (codes)."""

    speaker_audio: np.ndarray | None
    codec_audio: np.ndarray | None


@dataclass
class Prepared:
    rows: torch.Tensor                  # int64 [T, 2 + G] (placeholders until the recording is encoded)
    layout: PromptLayout
    trailing: tuple[int, ...]
    sampling: Qwen3TTSSampling
    max_frames: int
    floor: int                          # EOS allowed from this frame on
    mode: str
    recording: EncodeInput | None = None
    xvector: np.ndarray | None = None   # float32 [H], once encoded
    ref_codes: np.ndarray | None = None  # int64 [R, G] (in-context clone), once encoded
    segments: tuple[long_text.Segment, ...] = field(default=())  # long text: every segment (`max_frames`: the first's)

    @property
    def inputs(self) -> tuple[EncodeInput, ...]:
        return (self.recording,) if self.recording is not None else ()

    @property
    def context(self) -> list[tuple[int, ...]]:
        """The reference frames the codec decodes first (in-context clone)."""
        return [] if self.ref_codes is None else [tuple(int(c) for c in r) for r in self.ref_codes]


def role_ids(tokenizer: Any) -> dict[str, tuple[int, ...]]:
    if tokenizer is None:
        return QWEN_ROLE_IDS
    return {k: tuple(tokenizer.encode(k)) for k in QWEN_ROLE_IDS}


def _template(cfg: Qwen3TTSConfig, roles: dict[str, tuple[int, ...]], body: tuple[int, ...], kind: str) -> tuple[int, ...]:
    s, e = cfg.text.im_start, cfg.text.im_end
    if kind == "text":
        return (s, *roles["assistant\n"], *body, e, *roles["\n"], s, *roles["assistant\n"])
    if kind == "instruction":
        return (s, *roles["user\n"], *body, e, *roles["\n"])
    return (s, *roles["assistant\n"], *body, e, *roles["\n"])


def _ids(request: Qwen3Request, name: str, cfg: Qwen3TTSConfig, tokenizer: Any,
         said: str | None = None) -> tuple[int, ...] | None:
    """The templated ids of `text` / `instruction` / `reference_text` (or their `_ids` field); `said`: what
    the prompt says instead of the field (a long text's first segment)."""
    given = getattr(request, f"{name}_ids")
    text = getattr(request, name) if said is None else said
    if given is None and text is None:
        return None
    if given is not None:
        bad = [i for i in given if i >= cfg.talker.text_vocab_size]
        if bad:
            raise RequestError(f"{name}_ids: ids {bad[:5]} outside the text vocab ({cfg.talker.text_vocab_size})",
                               field=f"{name}_ids")
        body = tuple(given)
    else:
        if tokenizer is None:
            raise RequestError(f"{name}: this checkpoint has no tokenizer (no tokenizer.json, nor vocab.json + "
                               f"merges.txt); give {name}_ids", field=name)
        body = tuple(tokenizer.encode(text))
        if not body and name != "instruction":
            raise RequestError(f"{name}: encodes to no tokens", field=name)
    return _template(cfg, role_ids(tokenizer), body, name)


def check_speaker(speaker: str, cfg: Qwen3TTSConfig) -> None:
    """A `speaker` of the checkpoint's table (case-insensitive), else a RequestError naming `speaker` with
    the names it has."""
    if speaker.lower() not in cfg.speakers:
        known = ", ".join(sorted(cfg.speakers)) or "none: this checkpoint has no speaker table"
        raise RequestError(f"speaker: {speaker!r} is not a speaker of this checkpoint ({known})", field='speaker')


def _mode(request: Qwen3Request, cfg: Qwen3TTSConfig, codec: CodecSpec | None) -> str:
    if request.voice is not None:
        if cfg.speaker_encoder is None:
            raise RequestError(f"voice: this checkpoint ({cfg.model_type}) clones no stored voice (no speaker "
                               "encoder); name a speaker", field='voice')
        return "voice_clone"
    if request.reference_audio is not None:
        if cfg.speaker_encoder is None:
            raise RequestError(f"reference_audio: this checkpoint ({cfg.model_type}) has no speaker encoder; "
                               "voice cloning needs a Base checkpoint", field='reference_audio')
        if not request.x_vector_only and (codec is None or not codec.has_encoder):
            raise RequestError("reference_audio: an in-context clone needs the codec's encoder (the card does not "
                               "load it); or pass x_vector_only: true", field='reference_audio')
        return "voice_clone"
    if request.speaker is not None:
        check_speaker(request.speaker, cfg)
        return "custom_voice"
    if cfg.model_type == "custom_voice":
        raise RequestError(f"speaker: this CustomVoice checkpoint speaks as a named speaker (one of "
                           f"{', '.join(sorted(cfg.speakers))})", field='speaker')
    return "voice_design"


def _field(message: str, request: Qwen3Request) -> RequestError:
    """A prompt-builder refusal as the request's: its field (the builder's messages open with the prompt
    field they concern) mapped to the request field that set it, and named first in the message."""
    head, _, rest = message.partition(":")
    name = _FIELDS.get(head.strip())
    if name is None:
        return RequestError(message, field=None)
    if name in ("text", "instruction", "reference_text") and getattr(request, f"{name}_ids") is not None:
        name = f"{name}_ids"
    return RequestError(f"{name}:{rest}", field=name)


def speaker_key(xvector: np.ndarray | None) -> int:
    """A fingerprint of the x-vector for the speaker row (the prefix cache keys rows: two voices never match)."""
    if xvector is None:
        return 0
    digest = hashlib.blake2b(np.ascontiguousarray(xvector, dtype=np.float32).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def rows_of(lay: PromptLayout, groups: int, *, ref_codes: np.ndarray | None = None,
            xvector: np.ndarray | None = None) -> torch.Tensor:
    """The layout as int rows [T, 2 + G]: text id, codec id (SPEAKER: the x-vector), G codes (-1: none)."""
    t = len(lay)
    rows = torch.full((t, 2 + groups), -1, dtype=torch.long)
    rows[:, 0] = torch.tensor(lay.text, dtype=torch.long)
    rows[:, 1] = torch.tensor(lay.codec, dtype=torch.long)
    ref = torch.tensor(lay.ref_frame, dtype=torch.long)
    has = ref >= 0
    if bool(has.any()):
        codes = torch.zeros(int(ref.max()) + 1, groups, dtype=torch.long) if ref_codes is None \
            else torch.as_tensor(ref_codes, dtype=torch.long)
        rows[has, 2:] = codes[ref[has]]
    speaker = rows[:, 1] == SPEAKER
    rows[speaker, 2:] = 0
    rows[speaker, 2] = speaker_key(xvector)
    return rows


def _sampling(request: Qwen3Request, defaults: Qwen3TTSSampling) -> Qwen3TTSSampling:
    talker = over(defaults.talker, request.temperature, request.top_k, request.top_p)
    sub_t = request.subtalker_temperature
    if sub_t is None:
        sub_t = 0.0 if request.temperature == 0 else defaults.subtalker.temperature  # temperature 0: both greedy
    sub = over(defaults.subtalker, sub_t, request.subtalker_top_k, request.subtalker_top_p)
    penalty = defaults.repetition_penalty if request.repetition_penalty is None else request.repetition_penalty
    return Qwen3TTSSampling(talker, sub, penalty)


def read_recording(source: Any, codec: CodecSpec | None, max_seconds: float, *, codes: bool,
                   speaker: bool = True) -> EncodeInput:
    """One reference recording read, resampled to each encoder's rate (refusals name `reference_audio`)."""
    from v2.models.qwen3_codec.audio_in import AudioError, prepare_mono

    if codec is None:
        raise RequestError("reference_audio: this runtime has no encoder for reference audio", field='reference_audio')
    try:
        base = prepare_mono(source, sample_rate=codec.codec_rate, min_seconds=codec.hop / codec.codec_rate,
                            max_seconds=max_seconds)
        spk = base if codec.speaker_rate == codec.codec_rate else prepare_mono(
            source, sample_rate=codec.speaker_rate, max_seconds=max_seconds)
    except AudioError as e:
        raise RequestError(f"reference_audio: {e}", field='reference_audio') from None
    return EncodeInput(spk if speaker else None, base if codes else None)


def prepare(request: Qwen3Request, card: Any, cfg: Qwen3TTSConfig, tokenizer: Any, defaults: Qwen3TTSSampling,
            codec: CodecSpec | None, voice: Any = None) -> Prepared:
    """`voice`: the stored voice `request.voice` names (its codes, `x_vector` and transcript): an in-context
    clone when it has a transcript (or `reference_text` is given), else from the x-vector alone."""
    limits = card.loops.talker
    names = ("text", "instruction", "reference_text", "language", "speaker")
    check_text_chars([(name, getattr(request, name)) for name in names], limits.max_text_chars)
    parts = spans(request, limits.max_segment_chars)  # long text: split at sentence ends (refusals name `text`)
    said = first_text(request, parts, limits.max_segment_chars)
    mode = _mode(request, cfg, codec)
    if mode == "custom_voice" and cfg.model_size == "0b6" and (request.instruction or request.instruction_ids):
        name = "instruction" if request.instruction is not None else "instruction_ids"  # refused, not dropped
        raise RequestError(f"{name}: the 0.6B CustomVoice checkpoint takes no instruction (its reference API "
                           "drops it; the 1.7B CustomVoice and the VoiceDesign checkpoints take one)", field=name)
    transcript = request.reference_text is not None or request.reference_text_ids is not None
    icl = mode == "voice_clone" and not request.x_vector_only and (voice is None or transcript or voice.text is not None)
    recording, xvector, ref_codes = None, None, None
    if voice is not None and icl and not len(voice.codes):
        raise RequestError("reference_text: the voice was made from a speaker embedding, so it has no recording to "
                           "speak in context (omit reference_text)", field="reference_text")
    if voice is not None:
        xvector, ref_codes = voice.arrays["x_vector"], (np.asarray(voice.codes, dtype=np.int64) if icl else None)
        frames = 0 if ref_codes is None else len(ref_codes)
    elif mode == "voice_clone":
        recording = read_recording(request.reference_audio, codec, card.loops.encode.max_reference_seconds, codes=icl)
        frames = 0 if recording.codec_audio is None else -(-len(recording.codec_audio) // codec.hop)  # type: ignore[union-attr]
    else:
        frames = 0
    text_ids = _ids(request, "text", cfg, tokenizer, said)
    assert text_ids is not None
    spec = PromptSpec(mode=mode, input_ids=text_ids, language=request.language or "Auto",  # type: ignore[arg-type]
                      speaker=request.speaker, instruct_ids=_ids(request, "instruction", cfg, tokenizer),
                      x_vector_only=not icl, ref_ids=_reference_ids(request, cfg, tokenizer, voice) if icl else None,
                      ref_frames=frames, non_streaming=None if request.text_feed is None else request.text_feed == "whole")
    try:
        lay = layout(cfg, spec)
    except PromptError as e:
        raise _field(str(e), request) from None
    if len(lay) > limits.max_prompt_rows:
        name = "reference_text" if icl and frames > len(text_ids) else "text"
        why = unsplit(request, limits.max_segment_chars) if name == "text" and request.text is not None else ""
        raise RequestError(f"{name}: the prompt is {len(lay)} rows, over the card's max_prompt_rows "
                           f"({limits.max_prompt_rows}){why}", field=name)
    max_frames = frame_budget(request.max_frames, limits.max_frames, limits.max_frames, request.min_frames)
    try:
        sampling = _sampling(request, defaults)
    except ValueError as e:
        raise RequestError(f"sampling: {e}", field='sampling') from None
    segments = _segments(request, parts, spec, cfg, tokenizer, max_frames, limits.max_prompt_rows)
    return Prepared(rows_of(lay, cfg.num_code_groups, ref_codes=ref_codes, xvector=xvector), lay, lay.trailing,
                    sampling, segments[0].max_frames if segments else max_frames,
                    max(request.min_frames, MIN_NEW_TOKENS), mode, recording, xvector, ref_codes, segments)


def _reference_ids(request: Qwen3Request, cfg: Qwen3TTSConfig, tokenizer: Any, voice: Any) -> tuple[int, ...] | None:
    """The reference transcript's templated ids: the request's, else the stored voice's."""
    if voice is None or request.reference_text is not None or request.reference_text_ids is not None:
        return _ids(request, "reference_text", cfg, tokenizer)
    if tokenizer is None:
        raise RequestError("voice: its transcript is text and this checkpoint has no tokenizer; give "
                           "reference_text_ids (or x_vector_only: true)", field='voice')
    return _template(cfg, role_ids(tokenizer), tuple(tokenizer.encode(voice.text)), "reference_text")


def _segments(request: Qwen3Request, parts: list[tuple[int, int]], first: PromptSpec, cfg: Qwen3TTSConfig,
              tokenizer: Any, max_frames: int, max_prompt_rows: int) -> tuple[long_text.Segment, ...]:
    """A long text's segments (none for one prompt): each one's text ids, carried prompt and frame cap."""
    if len(parts) <= 1:
        return ()
    text, roles = request.text or "", role_ids(tokenizer)
    bodies = [tuple(tokenizer.encode(spoken(text[s:e]))) for s, e in parts]
    return long_text.plan(parts, bodies, first, cfg, lambda body, kind: _template(cfg, roles, body, kind),
                          max_frames=max_frames, min_frames=request.min_frames, max_prompt_rows=max_prompt_rows)


def with_encoded(work: Prepared, groups: int, xvector: np.ndarray | None, codes: np.ndarray | None) -> torch.Tensor:
    """The prompt rows again, with the recording's x-vector and codes (kept on `work` for the codec's context)."""
    work.xvector, work.ref_codes = xvector, codes
    return rows_of(work.layout, groups, ref_codes=codes, xvector=xvector)
