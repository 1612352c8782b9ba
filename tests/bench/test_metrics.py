"""Benchmark metrics on hand-made timelines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from v2.bench.metrics import ChunkArrival, percentile, rtf, underruns


def test_percentile_interpolates_like_numpy():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0 and math.isnan(percentile([], 50))


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)


def test_rtf_is_generation_over_audio_time():
    assert rtf(2.0, 8.0) == 0.25 and rtf(1.0, 0.0) == math.inf


def test_underruns_count_late_chunks_from_the_first():
    on_time = [ChunkArrival(1.0, 0.24), ChunkArrival(1.2, 2.0), ChunkArrival(3.0, 2.0)]
    assert underruns(on_time) == 0
    # the second chunk comes 0.1 s after the first one's 0.24 s ran out; the third is then on time again
    late = [ChunkArrival(1.0, 0.24), ChunkArrival(1.34, 2.0), ChunkArrival(3.2, 1.0)]
    assert underruns(late) == 1
    # after a gap, playback resumes from the late chunk's arrival
    twice = [ChunkArrival(0.0, 0.5), ChunkArrival(1.0, 0.5), ChunkArrival(1.6, 0.5)]
    assert underruns(twice) == 2
    assert underruns([]) == 0 and underruns([ChunkArrival(5.0, 1.0)]) == 0
