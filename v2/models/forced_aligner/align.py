"""Aligning clips: 16 kHz audio and its words -> each word's start and end in seconds (one forward per batch).

Owns: `Clip` (a clip's samples, words and each word's token ids, checked, the error naming the field),
`make_clip` (text -> words by the release's rule, or given words; ids from a given tokenizer callable, or given
ids), the release prompt (`prompt_ids`: `<|audio_start|>`, one `<|audio_pad|>` per audio row, `<|audio_end|>`,
then each word's ids followed by two `<timestamp>` ids; no chat template, no BOS), and `align`: features per
clip, one `ForcedAligner.marker_logits` call for the batch, argmax (first on ties) x ms per class, the
release's fix-up, word times. A clip's result never depends on the others in its batch (features per clip,
`ForcedAligner` exact on the CPU). Resampling is the caller's (the model reads 16 kHz only).
Must not know: tokenizer files, requests, the runtime, cards, HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor

from v2.models.forced_aligner.config import AlignerIds
from v2.models.forced_aligner.features import audio_tokens, clip_features
from v2.models.forced_aligner.fixup import WordTime, fix_timestamps, word_times
from v2.models.forced_aligner.model import ForcedAligner
from v2.models.forced_aligner.words import split_words

Tokenize = Callable[[str], Sequence[int]]  # one word -> its ids (the release: BPE of the word, no leading space)


@dataclass(frozen=True)
class Clip:
    """One clip to align: samples [N] at 16 kHz, its words and each word's ids (non-empty)."""

    wave: Tensor
    words: tuple[str, ...]
    word_ids: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Alignment:
    """A clip's word times, with the head's classes and the fixed marker times (ms) they came from."""

    words: list[WordTime]
    classes: list[int]
    fixed_ms: list[int]


def make_clip(wave: Tensor, sample_rate: int, text: str | None = None, *, words: Sequence[str] | None = None,
              word_ids: Sequence[Sequence[int]] | None = None, language: str | None = None,
              tokenize: Tokenize | None = None, expected_rate: int = 16000,
              korean_dict: Path | None = None) -> Clip:
    """A checked `Clip`: words from `words`, else `text` split by the release's rule for `language` (Korean with
    the release's word list `korean_dict`, words.py); ids from `word_ids`, else `tokenize` per word."""
    if sample_rate != expected_rate:
        raise ValueError(f"sample_rate: the aligner reads {expected_rate} Hz audio, got {sample_rate} (resample first)")
    if words is None:
        if text is None:
            raise ValueError("text: give the text or its words")
        words = split_words(text, language, korean_dict=korean_dict)
    elif text is not None:
        raise ValueError("words: give either text or words, not both")
    if not all(isinstance(w, str) and w for w in words):
        raise ValueError("words: every word must be a non-empty string")
    if word_ids is None:
        if tokenize is None:
            raise ValueError("word_ids: no tokenizer is given, so each word's ids are needed")
        word_ids = [tokenize(w) for w in words]
    if len(word_ids) != len(words):
        raise ValueError(f"word_ids: {len(word_ids)} entries for {len(words)} words")
    ids = tuple(tuple(int(i) for i in w) for w in word_ids)
    if any(not w for w in ids):
        raise ValueError("word_ids: every word needs at least one id")
    return Clip(wave, tuple(words), ids)


def prompt_ids(word_ids: Sequence[Sequence[int]], n_audio: int, ids: AlignerIds) -> list[int]:
    """The release prompt: audio start, n_audio pads, audio end, then each word's ids and two markers."""
    out = [ids.audio_start, *[ids.audio_pad] * n_audio, ids.audio_end]
    for w in word_ids:
        out += [*w, ids.timestamp, ids.timestamp]
    return out


def _check_ids(clip: int, word_ids: tuple[tuple[int, ...], ...], ids: AlignerIds, vocab: int) -> None:
    special = set(vars(ids).values())
    for w in word_ids:
        for i in w:
            if not 0 <= i < vocab or i in special:
                raise ValueError(f"word_ids: clip {clip} holds id {i}, not a text id (0 <= id < {vocab}, "
                                 f"none of the prompt's special ids {sorted(special)})")


@torch.no_grad()
def align(model: ForcedAligner, clips: Sequence[Clip]) -> list[Alignment]:
    """Each clip's word times (seconds from the clip's start), in one decoder pass over the clips that have
    words (a clip without words gets an empty alignment)."""
    cfg = model.cfg
    device = next(model.parameters()).device
    mels, prompts, todo = [], [], []
    for n, clip in enumerate(clips):
        if not clip.words:
            continue
        _check_ids(n, clip.word_ids, cfg.ids, cfg.text.vocab_size)
        mel = clip_features(clip.wave.to(device), cfg.audio)  # [mel, T]
        mels.append(mel)
        prompts.append(torch.tensor(prompt_ids(clip.word_ids, audio_tokens(mel.shape[1], cfg.audio), cfg.ids),
                                    device=device))
        todo.append(n)
    out = [Alignment([], [], []) for _ in clips]
    if not todo:
        return out
    logits = model.marker_logits(prompts, mels)  # [2 words, classes] per clip
    for n, lg in zip(todo, logits):
        classes = lg.float().argmax(-1).tolist()  # the first maximum on ties
        fixed = fix_timestamps([c * float(cfg.segment_ms) for c in classes])
        out[n] = Alignment(word_times(list(clips[n].words), fixed), classes, fixed)
    return out
