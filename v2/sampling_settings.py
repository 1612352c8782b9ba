"""Sampling settings as plain data: what a request asks of the stop head and the 12 codebook draws.

Owns: `HeadSampling` (one head's temperature / top-k / top-p, checked), `SamplingSettings` (both heads
and the codebook repetition penalty, the release defaults), the channel count (`CHANNELS`: channel 0 is
the stop decision, channel 1 + c is codebook c), the greedy threshold (`MIN_TEMPERATURE`), the
top-`SORT_WIDTH` fast path's width and `needs_full_sort` (the host-side test of whether a request's
codebook draws need the full sort). Torch-free and numpy-free, so the card, requests and loops can hold
settings without loading torch.
Must not know: tensors, how a draw is made (v2/models/sampling.py), the model, requests, the runtime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CHANNELS = 13  # stop decision + 12 codebooks
SORT_WIDTH = 64  # rows with 1 <= top_k <= SORT_WIDTH sort only their top SORT_WIDTH values
MIN_TEMPERATURE = 1e-4  # below this a head is greedy (dividing by a smaller one overflows float32 logits)


@dataclass(frozen=True)
class HeadSampling:
    """Sampling settings of one head. temperature 0 = greedy; top_k 0 = off; top_p 1 = off."""

    temperature: float
    top_k: int
    top_p: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k!r}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p!r}")


@dataclass(frozen=True)
class SamplingSettings:
    """Settings for one request: the stop head, the audio codebooks, and the codebook repetition penalty."""

    stop: HeadSampling = field(default_factory=lambda: HeadSampling(1.0, 50, 1.0))
    audio: HeadSampling = field(default_factory=lambda: HeadSampling(1.7, 25, 0.8))
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be a finite number > 0, got {self.repetition_penalty!r}")

    @classmethod
    def uniform(cls, temperature: float, top_k: int = 0, top_p: float = 1.0,
                repetition_penalty: float = 1.0) -> "SamplingSettings":
        """One setting for both heads (a single user-given temperature/top_k/top_p overrides both)."""
        head = HeadSampling(temperature, top_k, top_p)
        return cls(stop=head, audio=head, repetition_penalty=repetition_penalty)


def needs_full_sort(settings: SamplingSettings) -> bool:
    """Host-side: whether this request's codebook draws need the full sort (rows with a top_k in
    1..SORT_WIDTH, or greedy rows, take the exact top-`SORT_WIDTH` path; see `sampling.fast_rows`)."""
    a = settings.audio
    return a.temperature >= MIN_TEMPERATURE and not 1 <= a.top_k <= SORT_WIDTH
