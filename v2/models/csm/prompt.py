"""CSM prompts: a conversation's turns -> the backbone's prompt ids (host-side) -> its rows.

Owns: `Turn` (a speaker, its text as text or as ids, optional context audio as codec frames), the layout
(per turn `<|begin_of_text|>` + ids of `[{speaker}]{text}` + `<|end_of_text|>`, then for a turn with audio
one `<|AUDIO|>` per frame and `<|audio_eos|>`; generation continues after the last row), checks that
name the field, and the rows: a text row for every id except `<|AUDIO|>` / `<|audio_eos|>`, the k-th
`<|AUDIO|>` row = the audio row of the prompt's k-th context frame, an `<|audio_eos|>` row = the audio row
of the all-`codebook_eos` frame. Row counts are known from the layout before any tensor work.
Must not know: the codec (frames come in as codes), sampling, requests, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from v2.models.csm.config import CsmConfig
from v2.models.csm.model import Csm
from v2.models.csm.tokenizer import CsmTokenizer


class PromptError(ValueError):
    """A conversation the prompt builder cannot lay out; the message names the field."""


@dataclass(frozen=True, eq=False)
class Turn:
    """One turn. Give `text` (needs a tokenizer) or `text_ids` (the ids of `[{speaker}]{text}`, without
    `<|begin_of_text|>` / `<|end_of_text|>`). `audio`: the turn's audio as codec frames [F, N] (context)."""

    speaker: str | int
    text: str | None = None
    text_ids: tuple[int, ...] | None = None
    audio: Tensor | None = None


@dataclass(frozen=True, eq=False)
class PromptLayout:
    """ids: one backbone row each; frames [A, N] int64: the context frames, the k-th for the k-th `<|AUDIO|>`."""

    ids: tuple[int, ...]
    frames: Tensor

    @property
    def rows(self) -> int:
        return len(self.ids)


def _turn_ids(cfg: CsmConfig, turn: Turn, i: int, tokenizer: CsmTokenizer | None) -> tuple[int, ...]:
    where = f"turns[{i}]"
    if (turn.text is None) == (turn.text_ids is None):
        raise PromptError(f"{where}: give exactly one of '{where}.text' and '{where}.text_ids'")
    if turn.text is not None:
        if not isinstance(turn.text, str):
            raise PromptError(f"{where}.text: must be a string, got {type(turn.text).__name__}")
        if tokenizer is None:
            raise PromptError(f"{where}.text: this checkpoint has no tokenizer.json; give '{where}.text_ids' "
                              f"(the ids of '[{turn.speaker}]{{text}}') instead")
        ids, field = tokenizer.turn_ids(turn.speaker, turn.text), f"{where}.text"
    else:
        ids, field = tuple(turn.text_ids or ()), f"{where}.text_ids"
        if not ids:
            raise PromptError(f"{field}: must not be empty")
    for j, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < cfg.text_vocab_size:
            raise PromptError(f"{field}: id {t!r} at {j} is not a text id in [0, {cfg.text_vocab_size})")
        if t in (cfg.ids.audio, cfg.ids.audio_eos):
            raise PromptError(f"{field}: holds the audio id {t} at {j} (audio rows come from '{where}.audio')")
    return ids


def _turn_frames(cfg: CsmConfig, turn: Turn, i: int) -> Tensor | None:
    a = turn.audio
    if a is None:
        return None
    field = f"turns[{i}].audio"
    if not isinstance(a, Tensor) or a.dim() != 2 or a.shape[1] != cfg.num_codebooks:
        shape = list(a.shape) if isinstance(a, Tensor) else type(a).__name__
        raise PromptError(f"{field}: must be codec frames [F, {cfg.num_codebooks}], got {shape}")
    if a.dtype.is_floating_point or a.dtype == torch.bool or a.is_complex():
        raise PromptError(f"{field}: must hold integer codes, got {a.dtype}")
    if a.numel() and not bool(((a >= 0) & (a < cfg.vocab_size)).all()):
        raise PromptError(f"{field}: codes must lie in [0, {cfg.vocab_size})")
    return a.detach().to("cpu", torch.long)


def layout(cfg: CsmConfig, turns: Sequence[Turn], tokenizer: CsmTokenizer | None = None) -> PromptLayout:
    """The conversation's prompt ids and context frames (host-side)."""
    if isinstance(turns, Turn) or not len(turns):
        raise PromptError("turns: must be a non-empty list of Turn")
    ids: list[int] = []
    frames: list[Tensor] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, Turn):
            raise PromptError(f"turns[{i}]: must be a Turn, got {type(turn).__name__}")
        ids += [cfg.ids.bos, *_turn_ids(cfg, turn, i, tokenizer), cfg.ids.eos]
        f = _turn_frames(cfg, turn, i)
        if f is not None:
            ids += [cfg.ids.audio] * f.shape[0] + [cfg.ids.audio_eos]
            frames.append(f)
    stacked = torch.cat(frames) if frames else torch.zeros(0, cfg.num_codebooks, dtype=torch.long)
    return PromptLayout(tuple(ids), stacked)


def embed_layout(model: Csm, lay: PromptLayout) -> Tensor:
    """The layout's rows [T, H]: text rows, context-frame rows at the `<|AUDIO|>` ids, the all-
    `codebook_eos` frame's row at the `<|audio_eos|>` ids."""
    ids_cfg = model.cfg.ids
    ids = torch.tensor(lay.ids, dtype=torch.long, device=model.device)  # [T]
    is_audio, is_eos = ids == ids_cfg.audio, ids == ids_cfg.audio_eos
    if int(is_audio.sum()) != lay.frames.shape[0]:
        raise PromptError(f"layout: {int(is_audio.sum())} audio rows for {lay.frames.shape[0]} frames")
    rows = model.embed_text(torch.where(is_audio | is_eos, torch.zeros_like(ids), ids))  # [T, H]
    if lay.frames.shape[0]:
        rows[is_audio] = model.embed_frame(lay.frames)
    if bool(is_eos.any()):
        rows[is_eos] = model.embed_frame(model.eos_frame(1)).to(rows.dtype)
    return rows


def prompt_rows(model: Csm, turns: Sequence[Turn], tokenizer: CsmTokenizer | None = None) -> Tensor:
    """Turns -> backbone prompt rows [T, H]."""
    return embed_layout(model, layout(model.cfg, turns, tokenizer))
