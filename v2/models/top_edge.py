"""The entries of each row at or above its w-th highest value, found by a bound that leaves few values to
partition: the same entries as the whole rows' partition gives.

Owns: `at_or_above(z, w)`: for a float32 [B, V] array, the flat places (row-major, so by id within a row), the
values and the per-row counts of the entries at or above each row's w-th highest value, that value being numpy's
partition's (a NaN counts highest there and is never at or above). A row's values are split into `_BLOCKS * w`
disjoint strided blocks; the w-th highest of the blocks' maxima is a value that at least w of the row's entries
reach, so every entry at or above the row's w-th highest lies at or above it: only those (about w + a few,
not V) are partitioned (packed by row behind -inf) and compared. One or two rows, rows too short for the
blocks to pay, or a NaN anywhere take the whole rows.
Must not know: what the entries are drawn for (`FrameSampler` reads them), torch.
"""

from __future__ import annotations

import numpy as np

_BLOCKS = 4  # blocks per wanted value: more blocks bound tighter (fewer survivors) for a larger bound partition
_MIN_PER = 6  # values a block at least, and rows at least (measured [B, V] at w = 65: B 16 V 2,048-3,072
_MIN_ROWS = 3  # 0.3-0.45x, V 1,560 0.5x, V 1,024 lose; B 2 even at V 2,051, a loss at 1,560; B 3 0.6-0.9x)


def at_or_above(z: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """z [B, V] float32, 1 <= w <= V -> flat places [N] into z.reshape(-1), their values [N], counts [B]."""
    b, v = z.shape
    blocks = w * _BLOCKS
    per = v // blocks
    if b < _MIN_ROWS or per < _MIN_PER:
        return _whole(z, w)  # few rows or short rows: the bound's own operations cost what they would save
    maxima = np.maximum.reduce(z[:, : per * blocks].reshape(b, per, blocks), axis=1)     # [B, blocks] (NaN kept)
    if bool(np.isnan(maxima).any()) or bool(np.isnan(z[:, per * blocks:]).any()):
        return _whole(z, w)  # the whole rows' partition puts NaNs highest; the bound would not
    bound = np.partition(maxima, blocks - w, axis=-1)[:, blocks - w : blocks - w + 1]     # [B, 1]
    flat = np.flatnonzero(z >= bound)  # >= w a row, every entry at or above the w-th highest among them [S]
    rows = flat // v                                                                     # [S]
    counts = np.bincount(rows, minlength=b)                                              # [B]
    n = int(counts.max())
    values = z.reshape(-1)[flat]                                                         # [S]
    packed = np.full((b, n), -np.inf, dtype=z.dtype)  # each row's survivors first, -inf after (below or equal)
    packed[rows, np.arange(flat.shape[0]) - (np.cumsum(counts) - counts)[rows]] = values
    edge = np.partition(packed, n - w, axis=-1)[:, n - w]                                # [B] the w-th highest
    above = values >= edge[rows]                                                         # [S]
    return flat[above], values[above], np.bincount(rows[above], minlength=b)


def _whole(z: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b, v = z.shape
    above = z >= np.partition(z, v - w, axis=-1)[:, v - w : v - w + 1]                   # [B, V]
    flat = np.flatnonzero(above)
    return flat, z.reshape(-1)[flat], np.bincount(flat // v, minlength=b)
