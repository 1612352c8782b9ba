"""Checking a Qwen3-Omni request against the checkpoint and laying out what its loops start from.

Owns: `OmniWork` (what `prepare` makes: the thinker's prompt rows, the talker's prefix rows, the encoded audio
rows, the caps and both loops' sampling) and `prepare`: `messages` rendered by chat.py's `render_messages`
(imported when a request has messages), the prompt's ids checked (vocab, length, no image / video
placeholder, the generation prompt at its end for speech), each clip resampled to 16 kHz and its log-mel (the
front loop's input; the encoder's row count must match the placeholders), the talker's
prefix (talker_handoff.py's layout as rows). Row layouts:
- thinker [T, 3] int64: (token id, audio row index or -1, audio tag or 0): an audio placeholder's embedding
  is the encoder's row of that index; the tag (fresh per request) keeps its KV blocks from being shared with
  another request's audio through the prefix cache;
- talker [P, 3 + G] int64: (thinker text id or -1 -> Pt(embed_tokens[id]), codec id or -1 -> C[id], audio row
  index or -1 -> Ph(A[index]), G codes or -1 -> the frame's embedding); an audio row's second code column
  holds its tag (not a frame: its first code is -1). The prefix's last row waits for the first text token.
Must not know: the engine, slots, executors, scheduling.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from v2.errors import FieldError, RequestError
from v2.families.qwen3_omni.card import OmniCard
from v2.families.qwen3_omni.front import AudioInput
from v2.families.qwen3_omni.request import OmniRequest
from v2.models.aut.features import audio_token_count, log_mel
from v2.models.qwen3_omni.config import Qwen3OmniConfig
from v2.models.qwen3_omni.talker import talker_sampling
from v2.models.qwen3_omni.talker_handoff import assistant_start, user_positions
from v2.models.qwen3_tts.config import Qwen3TTSSampling

_TAGS = itertools.count(1)  # audio tags: one per request with audio, never reused in a process


@dataclass
class ThinkerSampling:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0


@dataclass
class OmniWork:
    rows: Tensor                         # the thinker's prompt [T, 3]
    prompt_ids: tuple[int, ...]
    audio_rows: Tensor | None            # [N, H_thinker] the encoder's rows of the prompt's clips (the front loop's)
    talker_prefix: Tensor | None         # [P, 3 + G] (None: text only)
    speaker: int
    max_tokens: int
    max_frames: int
    thinker_sampling: ThinkerSampling
    talker_sampling: Qwen3TTSSampling | None
    inputs: tuple[object, ...] = ()      # (AudioInput,) when the prompt has audio: the front loop encodes it


def render(request: OmniRequest, tokenizer: Any,
           cfg: Qwen3OmniConfig) -> tuple[list[int], list[tuple[np.ndarray, int]]]:
    """The request's prompt ids and clips: `prompt_ids` + `audio` as given, or `messages` rendered."""
    if request.messages is None:
        assert request.prompt_ids is not None
        return list(request.prompt_ids), list(request.audio or [])
    for i, m in enumerate(request.messages):
        content = m.get("content") if isinstance(m, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("image_url", "input_image", "image", "video", "video_url", "input_video"):
                raise RequestError(f"messages[{i}].content[{j}]: {kind} parts are not supported (no vision input)",
                                 field="messages")
    from v2.families.qwen3_omni.chat import render_messages  # base64 audio and soxr: only for messages

    if tokenizer is None:
        raise RequestError("messages: this checkpoint ships no tokenizer; give prompt_ids", field="messages")
    try:
        out = render_messages(request.messages, tokenizer, cfg)
    except FieldError as e:
        raise RequestError(str(e), field=e.field or "messages") from None
    return list(out.prompt_ids), list(out.audio)


def audio_input(clips: list[tuple[np.ndarray, int]], cfg: Qwen3OmniConfig, placeholders: int,
                max_seconds: float) -> AudioInput | None:
    """The prompt's clips -> their log-mels for the front loop (the encoder's rows must fill the placeholders)."""
    from v2.models.audio_in import resample

    if not clips:
        if placeholders:
            raise RequestError(f"audio: the prompt holds {placeholders} audio placeholders but no audio is given",
                               field="audio")
        return None
    a = cfg.thinker.audio
    waves = [resample(s[None], rate, a.sampling_rate)[0] for s, rate in clips]
    seconds = sum(w.shape[0] for w in waves) / a.sampling_rate
    if seconds > max_seconds:
        raise RequestError(f"audio: {seconds:.1f} s in all, over the card's max_audio_seconds ({max_seconds})",
                           field="audio")
    try:
        mels = tuple(log_mel(torch.from_numpy(np.ascontiguousarray(w)), a) for w in waves)
    except ValueError as e:
        raise RequestError(str(e), field="audio") from None
    count = sum(audio_token_count(int(m.shape[1]), a) for m in mels)
    if count != placeholders:
        raise RequestError(f"audio: the clips make {count} audio rows but the prompt holds {placeholders} "
                           f"placeholders ({cfg.ids.audio})", field="audio")
    return AudioInput(mels, count)


def thinker_rows(ids: list[int], audio_id: int, tag: int) -> Tensor:
    rows = torch.zeros(len(ids), 3, dtype=torch.long)  # [T, 3]
    rows[:, 0] = torch.tensor(ids)
    audio = rows[:, 0] == audio_id
    rows[:, 1] = torch.where(audio, torch.cumsum(audio.long(), 0) - 1, -1)
    rows[:, 2] = torch.where(audio, tag, 0)
    return rows


def talker_prefix(ids: list[int], cfg: Qwen3OmniConfig, speaker: int, tag: int) -> Tensor:
    """talker_handoff.talker_prefix as rows [P, 3 + G]; the last row's text id (-1) is the first token's."""
    assert cfg.talker is not None
    t, c, g = cfg.ids, cfg.talker.codec, cfg.talker.num_code_groups
    s = assistant_start(ids, t)
    out: list[list[int]] = []
    audio_index, users = -1, set(user_positions(ids, t))
    for p, tok in enumerate(ids):
        audio_index += tok == t.audio
        if p >= s or p not in users:
            continue
        out.append([-1, -1, audio_index, -1, tag] + [-1] * (g - 2) if tok == t.audio else [tok, -1, -1] + [-1] * g)
    out += [[ids[s + k], -1, -1] + [-1] * g for k in range(3)]
    for text, codec in ((t.tts_pad, c.nothink), (t.tts_pad, c.think_bos), (t.tts_pad, c.think_eos),
                        (t.tts_pad, speaker), (t.tts_bos, c.pad), (-1, c.bos)):
        out.append([text, codec, -1] + [-1] * g)
    return torch.tensor(out, dtype=torch.long)


def prepare(request: OmniRequest, card: OmniCard, cfg: Qwen3OmniConfig, tokenizer: Any, *,
            speech_loops: bool) -> OmniWork:
    th, tk = card.loops.thinker, card.loops.talker
    ids, clips = render(request, tokenizer, cfg)
    vocab = cfg.thinker.text.decoder.vocab_size
    if len(ids) > th.max_prompt_rows:
        raise RequestError(f"prompt_ids: {len(ids)} ids, over the card's max_prompt_rows ({th.max_prompt_rows})",
                         field="prompt_ids")
    bad = [i for i in ids if i >= vocab]
    if bad:
        raise RequestError(f"prompt_ids: id {bad[0]} is outside the text vocab ({vocab})", field="prompt_ids")
    t = cfg.ids
    vision = sorted({i for i in ids if i in (t.image, t.video, t.vision_start, t.vision_end)})
    if vision:
        raise RequestError(f"prompt_ids: image / video ids {vision} are not supported (no vision input)",
                         field="prompt_ids")
    max_tokens = request.max_tokens if request.max_tokens is not None else th.max_frames
    if max_tokens > th.max_frames:
        raise RequestError(f"max_tokens: {max_tokens} exceeds the card's cap ({th.max_frames})", field="max_tokens")
    speech = request.decodes_speech
    if speech and (cfg.talker is None or not speech_loops):
        raise RequestError('modalities: this card makes no speech; ask for ["text"]', field="modalities")
    max_frames = request.max_frames if request.max_frames is not None else tk.max_frames
    if max_frames > tk.max_frames:
        raise RequestError(f"max_frames: {max_frames} exceeds the card's cap ({tk.max_frames})", field="max_frames")
    speaker, prefix, sampling = 0, None, None
    placeholders = sum(i == t.audio for i in ids)
    tag = next(_TAGS) if placeholders else 0
    if speech:
        assert cfg.talker is not None
        names = [n for n, _ in cfg.talker.speakers]
        name = request.speaker or ("ethan" if "ethan" in names else names[0])
        try:
            speaker = cfg.talker.speaker_id(name)
        except ValueError as e:
            raise RequestError(str(e), field="speaker") from None
        try:
            prefix = talker_prefix(ids, cfg, speaker, tag)
            sampling = talker_sampling(cfg.talker_defaults, temperature=request.talker_temperature,
                                       top_k=request.talker_top_k, top_p=request.talker_top_p,
                                       repetition_penalty=request.talker_repetition_penalty)
        except ValueError as e:
            field = str(e).split(":")[0] if str(e).startswith("talker_") else "prompt_ids"
            raise RequestError(str(e), field=field) from None
        if prefix.shape[0] > tk.max_prompt_rows:
            raise RequestError(f"prompt_ids: the talker's prefix holds {prefix.shape[0]} rows, over the card's "
                             f"talker max_prompt_rows ({tk.max_prompt_rows})", field="prompt_ids")
    elif request.speaker is not None:
        raise RequestError('speaker: goes with modalities ["text", "audio"]', field="speaker")
    audio = audio_input(clips, cfg, placeholders, th.max_audio_seconds)
    temperature = request.temperature or 0.0
    return OmniWork(thinker_rows(ids, t.audio, tag), tuple(ids), None, prefix, speaker, max_tokens, max_frames,
                    ThinkerSampling(temperature, request.top_k or 0, request.top_p or 1.0), sampling,
                    (audio,) if audio is not None else ())
