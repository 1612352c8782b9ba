"""The aligner loop's mono mix of a chunk (`channel_mean`): one channel as it is; the bits of numpy's
`mean(axis=0, dtype=float32)` for two (its own two-pass form) and more channels, in the chunks' layout ([n, 2]
transposed) and a contiguous one, over random bit patterns (NaN payloads included) and the edge values (signed
zeros, infinities, subnormals, the largest finite values, whose sum overflows)."""

from __future__ import annotations

import numpy as np
import pytest

from v2.aligner.loop import channel_mean

EDGE = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1.4e-45, -1.4e-45, 1.2e-38, -1.2e-38, 1.0,
                 -1.0, 2.5e-45], dtype=np.float32)


def samples(channels: int) -> list[np.ndarray]:
    """[n, channels] rows: every pair / tuple of edge values, random bits, random normals."""
    rng = np.random.default_rng(channels)
    grid = np.stack(np.meshgrid(*[EDGE] * min(channels, 2), indexing="ij"), -1).reshape(-1, min(channels, 2))
    if channels > 2:
        grid = np.concatenate([grid, rng.choice(EDGE, (grid.shape[0], channels - 2))], 1)
    bits = rng.integers(0, 2 ** 32, size=(50000, channels), dtype=np.uint64).astype(np.uint32).view(np.float32)
    return [grid.astype(np.float32), bits, rng.standard_normal((5000, channels)).astype(np.float32)]


@pytest.mark.parametrize("channels", [1, 2, 3])
def test_channel_mean_is_the_samples_or_numpys_mean_bit_for_bit(channels: int) -> None:
    for rows in samples(channels):
        for audio in (rows.T, np.ascontiguousarray(rows.T)):  # [channels, n]: the chunks' strides, contiguous
            with np.errstate(all="ignore"):
                want = audio[0] if channels == 1 else audio.mean(axis=0, dtype=np.float32)
                got = channel_mean(audio)
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
