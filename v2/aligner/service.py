"""`Aligner`: a forced aligner loaded from its card, and aligning any recording with its text (a service in
itself, behind `Runtime.align`; the added loop runs the same model).

Owns: loading (a checkpoint directory or hub id through `v2.checkpoints`, or the card's seeded weights: every
matrix and conv kernel ~ N(0, gain / sqrt(fan_in)), biases ~ N(0, 0.02), norms ~ 1 + N(0, 0.02), drawn from
the card's seed in name order), the tokenizer the card names, a recording made mono 16 kHz (the channel mean,
soxr "HQ": `v2.models.audio_in.resample`), the words of a text (the release's rule for `language`, in
`make_clip`; a language this build cannot split is refused, naming it), and `align` / `align_clips` (the
release's times: seconds from the clip's start, not clamped to its length).
Must not know: requests, the engine, families, HTTP.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from v2.aligner.card import AlignerCard
from v2.aligner.tokenizer import Tokenize, bpe_tokenizer, byte_ids
from v2.checkpoints import resolve_checkpoint
from v2.events import WordTime
from v2.models.audio_in import resample
from v2.models.forced_aligner.align import Alignment, Clip, align, make_clip
from v2.models.forced_aligner.config import ForcedAlignerConfig
from v2.models.forced_aligner.loader import load_aligner
from v2.models.forced_aligner.model import ForcedAligner
from v2.models.forced_aligner.words import LanguageError, check_language
from v2.models.weights import empty_model, set_tensor

RATE = 16000  # what the aligner reads
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def seeded_model(config: dict[str, Any], seed: int, gain: float, device: torch.device,
                 dtype: torch.dtype) -> ForcedAligner:
    """The seeded aligner: the release structure at the config's sizes, values drawn on the CPU from `seed`."""
    model = empty_model(ForcedAligner, ForcedAlignerConfig.from_dict(config))
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        value = torch.randn(shape, generator=gen)
        if len(shape) >= 2:  # matrices and conv kernels: fan_in is every axis but the first
            value *= gain / math.prod(shape[1:]) ** 0.5
        elif name.endswith("bias"):
            value *= 0.02
        else:
            value = value.mul_(0.02).add_(1.0)
        set_tensor(model, name, value.to(device=device, dtype=dtype))
    return model.eval()


def mono_16k(audio: Any, sample_rate: int, field: str = "audio") -> torch.Tensor:
    """Samples [n] or [channels, n] (numpy or torch, any float) at `sample_rate` -> mono float32 [m] at 16 kHz."""
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu().float().numpy()
    a = np.asarray(audio, dtype=np.float32)
    if a.ndim == 2:
        a = a.mean(axis=0, dtype=np.float32)
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"{field}: expected samples [n] or [channels, n] with n >= 1, got shape {list(np.shape(audio))}")
    if not np.isfinite(a).all():
        raise ValueError(f"{field}: holds NaN or infinite samples")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"sample_rate: a positive whole number of Hz, got {sample_rate!r}")
    return torch.from_numpy(resample(a[None], sample_rate, RATE)[0].copy())


class Aligner:
    """A loaded forced aligner: `model` (eval), `tokenize` (one word -> its ids), `card`."""

    def __init__(self, model: ForcedAligner, tokenize: Tokenize, card: AlignerCard) -> None:
        self.model, self.tokenize, self.card = model, tokenize, card
        self.segment_ms = model.cfg.segment_ms

    @classmethod
    def load(cls, card: AlignerCard, device: torch.device | str = "cpu") -> "Aligner":
        device, dtype = torch.device(device), DTYPES[card.dtype]
        seeded = card.seed_table
        path: Path | None = None
        if seeded is not None:
            model = seeded_model(seeded.config, seeded.seed, seeded.gain, device, dtype)
        else:
            path = resolve_checkpoint(card.checkpoint)
            model = load_aligner(path, dtype=dtype, device=device)
        if card.tokenizer == "bytes":
            tokenize: Tokenize = byte_ids
        else:
            if path is None:
                raise ValueError(f"aligner card {card.name}: tokenizer: 'checkpoint' needs a checkpoint directory, "
                                 "not seeded weights (use 'bytes')")
            tokenize = bpe_tokenizer(path)
        return cls(model, tokenize, card)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def clip(self, audio: Any, sample_rate: int, text: str | None = None, *, words: Sequence[str] | None = None,
             word_ids: Sequence[Sequence[int]] | None = None, language: str | None = None) -> Clip:
        """A checked clip of any recording: mono 16 kHz, its words and ids (refusals name the field)."""
        check_language(language)
        if words is not None and (isinstance(words, str) or not isinstance(words, (list, tuple))):
            raise ValueError("words: a list of words")
        wave = mono_16k(audio, sample_rate)
        return make_clip(wave, RATE, text, words=words, word_ids=word_ids, language=language,
                         tokenize=self.tokenize)

    def align_clips(self, clips: Sequence[Clip]) -> list[Alignment]:
        """Several clips in one forward (each clip's result as alone)."""
        return align(self.model, [Clip(c.wave.to(self.device), c.words, c.word_ids) for c in clips])

    def align(self, audio: Any, sample_rate: int, text: str | None = None, *, words: Sequence[str] | None = None,
              word_ids: Sequence[Sequence[int]] | None = None, language: str | None = None) -> list[WordTime]:
        """Each word's start and end (seconds from the recording's start, the release's values)."""
        return self.align_clips([self.clip(audio, sample_rate, text, words=words, word_ids=word_ids,
                                           language=language)])[0].words


__all__ = ["Aligner", "LanguageError", "RATE", "mono_16k", "seeded_model"]
