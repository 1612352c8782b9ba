"""Benchmark arithmetic on timelines: percentiles, real-time factor, stream underruns. Pure Python.

Owns: the definitions every reported figure uses, so they are tested on hand-made timelines.
Must not know: the runtime, models, clocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"q must lie in [0, 100], got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def rtf(generation_seconds: float, audio_seconds: float) -> float:
    """Real-time factor = generation time / audio duration (lower is better; < 1 is faster than real time)."""
    return generation_seconds / audio_seconds if audio_seconds > 0 else math.inf


@dataclass(frozen=True)
class ChunkArrival:
    at: float        # wall time the chunk reached the client
    seconds: float   # audio it carries


def underruns(chunks: list[ChunkArrival]) -> int:
    """Chunks that arrive after the audio before them has finished playing.

    Playback starts when the first chunk arrives and plays without pause while there is audio; a chunk
    that arrives late makes a gap, and playback resumes from its arrival.
    """
    count = 0
    play_until = None
    for chunk in chunks:
        if play_until is None:
            play_until = chunk.at
        elif chunk.at > play_until + 1e-9:
            count += 1
            play_until = chunk.at
        play_until += chunk.seconds
    return count
