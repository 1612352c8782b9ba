"""Qwen3-TTS prompts: from token ids to talker rows, for the four modes and both text feeds.

Owns: `PromptSpec` (what a request asks for: mode, ids, language, speaker, instruction, x-vector,
reference text and codes, the text feed), `layout` (host-side, no tensors: every prompt row and trailing
text row as "P(text id) + codec part", so the row counts are known before any work), and `embed_layout`
(the rows as vectors). The rules are the reference's: codec prefix `[think, think_bos, LANG, think_eos]`
or `[nothink, think_bos, think_eos]` for "auto", the dialect rule (Chinese / auto with a dialect speaker
-> that dialect's id), the speaker row (custom voice: E_0[spk_id]; voice clone: the x-vector; voice
design: none), the instruction rows first, and the text part of each feed (see designs/qwen3_tts.md).
Must not know: tokenizers (the ids come in), the loop, requests, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

import torch
from torch import Tensor

from v2.models.qwen3_tts.config import Qwen3TTSConfig

Mode = Literal["custom_voice", "voice_design", "voice_clone"]
MODES = ("custom_voice", "voice_design", "voice_clone")
NONE = -1
SPEAKER = -2  # codec part of the speaker row: the speaker vector (x-vector) instead of an E_0 row


class PromptError(ValueError):
    """A prompt field is missing or invalid; the message names the field."""


@dataclass(frozen=True)
class PromptSpec:
    """One prompt. `input_ids` = `<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n` as ids;
    `instruct_ids` = `<|im_start|>user\\n{instruction}<|im_end|>\\n`; `ref_ids` = `<|im_start|>assistant\\n
    {ref_text}<|im_end|>\\n`. Voice clone: `x_vector_only` False means ICL (needs `ref_ids` and R reference
    frames, passed to `embed_layout`). `in_context`: the same in-context part in the other modes, after their
    own speaker row (custom voice) or none (voice design): a long text's later segment, with the segment
    before as the reference. `non_streaming` None = the reference API's default for the mode."""

    mode: Mode
    input_ids: tuple[int, ...]
    language: str = "auto"
    speaker: str | None = None
    instruct_ids: tuple[int, ...] | None = None
    x_vector_only: bool = True
    ref_ids: tuple[int, ...] | None = None
    ref_frames: int = 0
    non_streaming: bool | None = None
    in_context: bool = False

    @property
    def icl(self) -> bool:
        return (self.mode == "voice_clone" and not self.x_vector_only) or self.in_context

    def streaming_feed(self) -> bool:
        """True = text fed alongside the frames (the reference's `non_streaming_mode` false)."""
        if self.non_streaming is not None:
            return not self.non_streaming
        return self.mode == "voice_clone"  # the API: custom voice / voice design non-streaming, clone streaming


@dataclass(frozen=True)
class PromptLayout:
    """Row r = P(text[r]) (if text[r] != NONE) + codec part: E_0[codec[r]] if codec[r] >= 0, the speaker
    vector if codec[r] == SPEAKER, frame(ref_codes[ref_frame[r]]) if ref_frame[r] >= 0. Trailing text
    rows are P(trailing[i])."""

    text: tuple[int, ...]
    codec: tuple[int, ...]
    ref_frame: tuple[int, ...]
    trailing: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.text)


def _language_id(cfg: Qwen3TTSConfig, spec: PromptSpec) -> int | None:
    lang = spec.language.lower()
    if lang == "auto":
        lang_id = None
    elif lang in cfg.languages:
        lang_id = cfg.languages[lang]
    else:
        raise PromptError(f"language: {spec.language!r} is not 'auto' or one of {sorted(cfg.languages)}")
    if lang in ("chinese", "auto") and spec.speaker:
        dialect = cfg.speaker_dialect.get(spec.speaker.lower())
        if dialect is not None:
            lang_id = cfg.languages[dialect]
    return lang_id


def _check(cfg: Qwen3TTSConfig, spec: PromptSpec) -> None:
    if spec.mode not in MODES:
        raise PromptError(f"mode: {spec.mode!r} is not one of {MODES}")
    ids = spec.input_ids
    tmpl = cfg.text
    if len(ids) < 9 or ids[0] != tmpl.im_start or ids[-5] != tmpl.im_end or ids[-3] != tmpl.im_start:
        raise PromptError("input_ids: must be <|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n "
                          "with at least one text token")
    for name in ("input_ids", "instruct_ids", "ref_ids"):
        seq = getattr(spec, name) or ()
        bad = [i for i in seq if not 0 <= i < cfg.talker.text_vocab_size]
        if bad:
            raise PromptError(f"{name}: ids {bad[:5]} outside the text vocab ({cfg.talker.text_vocab_size})")
    if spec.mode == "custom_voice":
        if not spec.speaker or spec.speaker.lower() not in cfg.speakers:
            raise PromptError(f"speaker: {spec.speaker!r} is not one of {sorted(cfg.speakers)}")
    elif spec.speaker:
        raise PromptError(f"speaker: only custom_voice takes a speaker name, got {spec.speaker!r} for {spec.mode}")
    if spec.mode == "voice_clone" and cfg.speaker_encoder is None:
        raise PromptError(f"mode: voice_clone needs a 'base' model, this is {cfg.model_type!r}")
    if spec.icl:
        if not spec.ref_ids or len(spec.ref_ids) < 6 or spec.ref_ids[0] != tmpl.im_start or spec.ref_ids[-2] != tmpl.im_end:
            raise PromptError("ref_ids: ICL voice clone needs <|im_start|>assistant\\n{ref_text}<|im_end|>\\n")
        if spec.ref_frames < 1:
            raise PromptError("ref_frames: ICL voice clone needs at least one reference frame")
    if spec.instruct_ids is not None and len(spec.instruct_ids) == 0:
        raise PromptError("instruct_ids: empty (pass None for no instruction)")


def layout(cfg: Qwen3TTSConfig, spec: PromptSpec) -> PromptLayout:
    """The rows of `spec`, host-side (raises PromptError naming the bad field)."""
    _check(cfg, spec)
    t, c = cfg.text, cfg.codec
    text: list[int] = []
    codec: list[int] = []
    ref: list[int] = []

    def add(tid: int, cid: int = NONE, rf: int = NONE) -> None:
        text.append(tid)
        codec.append(cid)
        ref.append(rf)

    instruct = spec.instruct_ids
    if spec.mode == "custom_voice" and cfg.model_size == "0b6":
        instruct = None  # the reference API drops the instruction for 0b6 custom voice
    for tid in instruct or ():
        add(tid)
    for tid in spec.input_ids[:3]:  # role: <|im_start|> assistant \n
        add(tid)
    lang = _language_id(cfg, spec)
    prefix = [c.nothink, c.think_bos, c.think_eos] if lang is None else [c.think, c.think_bos, lang, c.think_eos]
    for cid in prefix:
        add(t.tts_pad, cid)
    if spec.mode == "custom_voice":
        add(t.tts_pad, cfg.speakers[spec.speaker.lower()])  # type: ignore[union-attr]
    elif spec.mode == "voice_clone":
        add(t.tts_pad, SPEAKER)
    add(t.tts_bos, c.pad)
    body = list(spec.input_ids[3:-5])
    streaming = spec.streaming_feed()
    if spec.icl:
        assert spec.ref_ids is not None
        tt = list(spec.ref_ids[3:-2]) + body + [t.tts_eos]  # text side
        cc = [(c.bos, NONE)] + [(NONE, j) for j in range(spec.ref_frames)]  # codec side
        if not streaming:
            for tid in tt:
                add(tid, c.pad)
            for cid, rf in cc:
                add(t.tts_pad, cid, rf)
            trailing = [t.tts_pad]
        else:
            n = len(cc)
            padded = tt + [t.tts_pad] * max(n - len(tt), 0)
            for j, (cid, rf) in enumerate(cc):
                add(padded[j], cid, rf)
            trailing = tt[n:] if len(tt) > n else [t.tts_pad]
    elif streaming:
        add(body[0], c.bos)
        trailing = body[1:] + [t.tts_eos]
    else:
        for tid in body:
            add(tid, c.pad)
        add(t.tts_eos, c.pad)
        add(t.tts_pad, c.bos)
        trailing = [t.tts_pad]
    return PromptLayout(tuple(text), tuple(codec), tuple(ref), tuple(trailing))


class Qwen3TTSLike(Protocol):
    """The parts of the model the builder uses (`Qwen3TTS` has them)."""

    cfg: Qwen3TTSConfig

    @property
    def device(self) -> torch.device: ...
    @property
    def num_code_groups(self) -> int: ...
    def embed_text(self, ids: Tensor) -> Tensor: ...
    def embed_codec(self, ids: Tensor) -> Tensor: ...
    def embed_frame(self, codes: Tensor) -> Tensor: ...


@torch.no_grad()
def embed_layout(model: Qwen3TTSLike, lay: PromptLayout, *, speaker: Tensor | None = None,
                 ref_codes: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The prompt rows [T, H] and the trailing text rows [Tt, H] of a layout. speaker [H] (voice clone:
    the x-vector); ref_codes [R, G] (ICL)."""
    dev = model.device
    text = torch.tensor(lay.text, dtype=torch.long, device=dev)
    codec = torch.tensor(lay.codec, dtype=torch.long, device=dev)
    ref = torch.tensor(lay.ref_frame, dtype=torch.long, device=dev)
    has_text = text != NONE
    rows = model.embed_text(text.clamp(min=0))  # [T, H]
    rows = torch.where(has_text[:, None], rows, torch.zeros_like(rows))
    rows = rows + torch.where((codec >= 0)[:, None], model.embed_codec(codec.clamp(min=0)), torch.zeros_like(rows))
    if SPEAKER in lay.codec:
        if speaker is None:
            raise PromptError("speaker_embedding: voice clone needs the x-vector")
        rows = torch.where((codec == SPEAKER)[:, None], rows + speaker.to(rows), rows)
    if (ref >= 0).any():
        if ref_codes is None or ref_codes.dim() != 2 or ref_codes.shape[1] != model.num_code_groups:
            raise PromptError(f"ref_codes: ICL needs [R, {model.num_code_groups}] reference codes")
        if int(ref.max()) >= ref_codes.shape[0]:
            raise PromptError(f"ref_codes: {ref_codes.shape[0]} frames, the layout needs {int(ref.max()) + 1}")
        frames = model.embed_frame(ref_codes[ref.clamp(min=0)])  # [T, H]
        rows = torch.where((ref >= 0)[:, None], rows + frames, rows)
    trailing = model.embed_text(torch.tensor(lay.trailing, dtype=torch.long, device=dev))
    return rows, trailing


def build(model: Qwen3TTSLike, spec: PromptSpec, *, speaker: Tensor | None = None,
          ref_codes: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`layout` then `embed_layout`."""
    if spec.icl and ref_codes is not None and spec.ref_frames != ref_codes.shape[0]:
        raise PromptError(f"ref_frames: {spec.ref_frames} but ref_codes has {ref_codes.shape[0]} frames")
    return embed_layout(model, layout(model.cfg, spec), speaker=speaker, ref_codes=ref_codes)


def ids_tuple(x: Sequence[int] | Tensor | None) -> tuple[int, ...] | None:
    """Token ids as a tuple of ints (a 1-D tensor or array, or a sequence)."""
    if x is None:
        return None
    if isinstance(x, Tensor):
        return tuple(int(i) for i in x.flatten().tolist())
    return tuple(int(i) for i in x)
