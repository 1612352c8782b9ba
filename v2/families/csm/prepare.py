"""Checking a CSM request against its card and checkpoint, and laying out its prompt rows from its turns.

Owns: the cheap bounds first (each turn's text against the card's character cap, the number of context
turns), the conversation as turns in order (a stored voice's turn, a reference recording's turn, the
context turns, then the turn to speak, which has no audio), each turn's ids (`[{speaker}]{text}` through
the checkpoint's tokenizer, or its `text_ids`; a checkpoint without a tokenizer refuses text naming the
field), its audio frames (given codes, a stored voice's codes, or a recording read now and encoded by the
front loop before admission: placeholders of the exact length until then, `ceil(samples / hop)` frames),
the prompt as int rows [T, 1 + N] (`rows_of`: column 0 the prompt id as the reference's processor lays it
out, `<|AUDIO|>` / `<|audio_eos|>` included; columns 1..N the frame's codes on audio rows, -1 on text rows),
the frame budget (the request's, else generation_config.json's `max_new_tokens`, within the card's cap) and
the sampling of both stages (the card's section, else generation_config.json, then the request's knobs).
Errors name the request's field.
Must not know: the engine, slots, devices, the weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from v2.errors import RequestError
from v2.families.csm.audio import read_context
from v2.kit.checks import frame_budget, over
from v2.families.csm.request import CsmRequest
from v2.fields import check_text_chars
from v2.models.csm.config import CsmConfig, CsmSampling
from v2.models.csm.prompt import PromptError, Turn, layout

__all__ = ["CodecSpec", "EncodeInput", "Prepared", "TurnPlan", "check_rows", "prepare", "rows_of", "turn_ids", "with_encoded"]


@dataclass(frozen=True)
class CodecSpec:
    """What reading context audio needs to know of the codec."""

    sample_rate: int
    hop: int
    codebook_size: int   # the codes its encoder gives lie in [0, codebook_size)
    has_encoder: bool


@dataclass(frozen=True)
class EncodeInput:
    """A request's recordings for the front loop: mono float32 at the codec's rate, in turn order."""

    audio: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class TurnPlan:
    """One turn of the prompt: its ids between `<|begin_of_text|>` and `<|end_of_text|>`, its audio frames
    (0: none) and where they come from (`recording`: an index into the request's recordings)."""

    ids: tuple[int, ...]
    frames: int
    field: str                    # the request field it came from (refusals about it name this)
    codes: np.ndarray | None = None  # int64 [frames, N], when known
    recording: int | None = None


@dataclass
class Prepared:
    rows: torch.Tensor                  # int64 [T, 1 + N] (placeholder codes until the recordings are encoded)
    turns: tuple[TurnPlan, ...]
    recordings: tuple[np.ndarray, ...]  # mono float32 at the codec's rate, encoded before admission
    sampling: CsmSampling
    max_frames: int
    speaker: int                        # the spoken turn's speaker (None-free: the card's default applied)
    segments: tuple[()] = field(default=())  # a CSM request is one prompt (no long-text segments)

    @property
    def inputs(self) -> tuple[EncodeInput, ...]:
        return (EncodeInput(self.recordings),) if self.recordings else ()


def turn_ids(tokenizer: Any, speaker: int, text: str | None, ids: list[int] | None, name: str) -> tuple[int, ...]:
    """A turn's ids between `<|begin_of_text|>` and `<|end_of_text|>`: its `ids`, or `[{speaker}]{text}`
    tokenised (refused naming `name` without a tokenizer, or when it gives no ids)."""
    if ids is not None:
        return tuple(ids)
    assert text is not None
    if tokenizer is None:
        instead = ("give the turn as context: its text_ids and codes" if name == "voice"
                   else f"give {name}_ids, the ids of '[{speaker}]{{text}}'")
        raise RequestError(f"{name}: this checkpoint has no tokenizer (no tokenizer.json) for text; {instead}",
                           field=name)
    out = tuple(tokenizer.turn_ids(speaker, text))
    if not out:
        raise RequestError(f"{name}: encodes to no tokens", field=name)
    return out


def _codes(codes: Any, cfg: CsmConfig, name: str) -> np.ndarray:
    """A turn's frames [F, N]: each code one of the model's ids of its codebook, [0, V) (the codec's codes
    and the spare ids a sampled frame may hold: an earlier result's codes are taken as the model made them;
    context frames are only embedded, never decoded)."""
    a = np.asarray(codes, dtype=np.int64)
    if a.ndim != 2 or a.shape[1] != cfg.num_codebooks or not len(a):
        raise RequestError(f"{name}: expected codes [frames >= 1, {cfg.num_codebooks}], got {list(a.shape)}", field=name)
    if a.min() < 0 or a.max() >= cfg.vocab_size:
        raise RequestError(f"{name}: codes must lie in [0, {cfg.vocab_size})", field=name)
    return a


def _sampling(request: CsmRequest, defaults: CsmSampling) -> CsmSampling:
    backbone = over(defaults.backbone, request.temperature, request.top_k, request.top_p)
    depth_t = request.depth_decoder_temperature
    if depth_t is None:
        depth_t = 0.0 if request.temperature == 0 else defaults.depth.temperature  # temperature 0 alone: both greedy
    return CsmSampling(backbone, over(defaults.depth, depth_t, request.depth_decoder_top_k, request.depth_decoder_top_p))


def rows_of(cfg: CsmConfig, turns: tuple[TurnPlan, ...]) -> torch.Tensor:
    """The turns as int rows [T, 1 + N]: the prompt id, then the frame's codes on audio rows (the context
    frame at each `<|AUDIO|>`, the all-`codebook_eos` frame at each `<|audio_eos|>`), -1 on text rows. A
    turn whose codes are not known yet holds placeholder frames of its length."""
    n = cfg.num_codebooks
    spec = []
    for t in turns:
        audio = None
        if t.frames:
            audio = torch.from_numpy(t.codes) if t.codes is not None else torch.zeros(t.frames, n, dtype=torch.long)
        spec.append(Turn(speaker=0, text_ids=t.ids, audio=audio))
    try:
        lay = layout(cfg, spec)
    except PromptError as e:
        raise _field(str(e), turns) from None
    ids = torch.tensor(lay.ids, dtype=torch.long)  # [T]
    rows = torch.full((len(ids), 1 + n), -1, dtype=torch.long)  # [T, 1 + N]
    rows[:, 0] = ids
    rows[ids == cfg.ids.audio, 1:] = lay.frames
    rows[ids == cfg.ids.audio_eos, 1:] = cfg.ids.codebook_eos
    return rows


def _field(message: str, turns: tuple[TurnPlan, ...]) -> RequestError:
    """A prompt-builder refusal ("turns[i].text_ids: ...") as the request's: the field turn i came from."""
    head, _, rest = message.partition(":")
    try:
        i = int(head.split("[", 1)[1].split("]", 1)[0])
        name = turns[i].field
    except (IndexError, ValueError):
        return RequestError(message, field=None)
    return RequestError(f"{name}:{rest}", field=name)


def _turns(request: CsmRequest, card: Any, cfg: CsmConfig, tokenizer: Any, codec: CodecSpec | None,
           voice: Any) -> tuple[list[TurnPlan], list[np.ndarray]]:
    """Every turn of the prompt in order, and the recordings its audio turns need encoded."""
    limits, enc = card.loops.backbone, card.loops.encode
    speaker = limits.default_speaker if request.speaker is None else request.speaker
    turns: list[TurnPlan] = []
    recordings: list[np.ndarray] = []

    def audio_turn(ids: tuple[int, ...], source: Any, name: str) -> TurnPlan:
        if codec is None or not codec.has_encoder:
            raise RequestError(f"{name}: this runtime has no codec encoder for context audio (the card does not "
                               "load it); give the turn's codes instead", field=name)
        wav = read_context(source, sample_rate=codec.sample_rate, hop=codec.hop, max_seconds=enc.max_context_seconds,
                           field=name)
        recordings.append(wav)
        return TurnPlan(ids, -(-len(wav) // codec.hop), name, None, len(recordings) - 1)

    if voice is not None:
        if voice.text is None:
            raise RequestError(f"voice: {voice.name!r} has no transcript; a CSM voice is a context turn, its text "
                               "and audio (store it with its text)", field="voice")
        ids = turn_ids(tokenizer, speaker, voice.text, None, "voice")
        turns.append(TurnPlan(ids, len(voice.codes), "voice", _codes(voice.codes, cfg, "voice")))
    if request.reference_audio is not None:
        ids = turn_ids(tokenizer, speaker, request.reference_text, request.reference_text_ids, "reference_text")
        turns.append(audio_turn(ids, request.reference_audio, "reference_audio"))
    for turn in request.context or ():
        who = limits.default_speaker if turn.speaker is None else turn.speaker
        ids = turn_ids(tokenizer, who, turn.text, turn.text_ids, "context.text")
        if turn.audio is not None:
            turns.append(audio_turn(ids, turn.audio, "context.audio"))
        elif turn.codes is not None:
            codes = _codes(turn.codes, cfg, "context.codes")
            turns.append(TurnPlan(ids, len(codes), "context.codes", codes))
        else:
            turns.append(TurnPlan(ids, 0, "context.text"))
    if len(turns) > enc.max_context_turns:
        raise RequestError(f"context: {len(turns)} turns, over the card's max_context_turns ({enc.max_context_turns})",
                           field="context")
    name = "text" if request.text is not None else "text_ids"
    turns.append(TurnPlan(turn_ids(tokenizer, speaker, request.text, request.text_ids, "text"), 0, name))
    return turns, recordings


def check_rows(turns: tuple[TurnPlan, ...], max_rows: int) -> None:
    """The prompt's rows within the card's cap, from the turns alone (per turn its ids between
    `<|begin_of_text|>` and `<|end_of_text|>`; an audio turn its frames' `<|AUDIO|>` rows and `<|audio_eos|>`);
    over it, refused naming the spoken turn's field when its own rows are too many, else `context`."""
    count = sum(len(t.ids) + 2 + (t.frames + 1 if t.frames else 0) for t in turns)
    if count > max_rows:
        spoken = len(turns[-1].ids) + 2  # the spoken turn's own rows
        name = turns[-1].field if spoken > max_rows else "context"
        raise RequestError(f"{name}: the prompt is {count} rows, over the card's max_prompt_rows ({max_rows})",
                           field=name)


def prepare(request: CsmRequest, card: Any, cfg: CsmConfig, tokenizer: Any, defaults: CsmSampling,
            default_frames: int, codec: CodecSpec | None, voice: Any = None) -> Prepared:
    """`defaults`: the sampling of both stages (the card's, else generation_config.json's); `default_frames`:
    the frame budget when the request gives none; `voice`: the stored voice `request.voice` names."""
    limits = card.loops.backbone
    texts = [("text", request.text), ("reference_text", request.reference_text)]
    texts += [("context.text", t.text) for t in request.context or ()]
    check_text_chars(texts, limits.max_text_chars)
    turns, recordings = _turns(request, card, cfg, tokenizer, codec, voice)
    check_rows(tuple(turns), limits.max_prompt_rows)
    rows = rows_of(cfg, tuple(turns))
    max_frames = frame_budget(request.max_frames, limits.max_frames, min(default_frames, limits.max_frames))
    try:
        sampling = _sampling(request, defaults)
    except ValueError as e:
        raise RequestError(f"sampling: {e}", field="sampling") from None
    speaker = limits.default_speaker if request.speaker is None else request.speaker
    return Prepared(rows, tuple(turns), tuple(recordings), sampling, max_frames, speaker)


def with_encoded(work: Prepared, cfg: CsmConfig, codes: list[np.ndarray]) -> torch.Tensor:
    """The prompt rows again, with each recording's codes (in the order of `work.recordings`)."""
    turns = []
    for t in work.turns:
        if t.recording is not None:
            c = np.asarray(codes[t.recording], dtype=np.int64)
            if c.shape != (t.frames, cfg.num_codebooks):
                raise RuntimeError(f"{t.field}: the encoder gave {c.shape[0]} frames of {c.shape[1:]}, expected "
                                   f"{t.frames} of ({cfg.num_codebooks},)")
            t = TurnPlan(t.ids, t.frames, t.field, c, t.recording)
        turns.append(t)
    work.turns = tuple(turns)
    return rows_of(cfg, work.turns)
