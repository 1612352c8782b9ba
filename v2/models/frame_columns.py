"""A batch's per-group sampling settings in the forms `FrameSampler`'s draws read, made once per distinct settings.

Owns: `Columns` (per setting a numpy column [G, B, 1] per group, the host flags per group that skip what no row
needs, and a one-row batch's host numbers per group) and `columns`, which caches them by the settings' bytes: a
batch keeps its settings frame after frame, so a frame's sampler looks them up instead of making them again in
~30 small array operations. The arrays are read-only (shared between samplers).
Must not know: the draws themselves, the noise, the model or the runtime.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import numpy as np

from v2.sampling_settings import MIN_TEMPERATURE, SORT_WIDTH


class Columns(NamedTuple):
    """Settings [B, G] of a batch as `FrameSampler` reads them; the [G, B, 1] columns are group g's at [g]."""

    divisor: np.ndarray    # temperature, 1 for greedy rows
    kth_index: np.ndarray  # the k-th value's place in the stable top SORT_WIDTH
    kth_up: np.ndarray     # its place in the W + 1 candidates' ascending values
    no_k: np.ndarray       # top_k off (0 or the whole vocabulary)
    greedy: np.ndarray
    top_p: np.ndarray
    p_off: np.ndarray      # top_p >= 1
    cut: np.ndarray        # float64 top_p, or +inf where no top-p cut decides (off, greedy)
    rows: np.ndarray       # [B, 1] row numbers
    any_greedy: tuple[bool, ...]  # per group: any greedy row, only greedy rows, any without top-k, any with top-p
    all_greedy: tuple[bool, ...]
    any_no_k: tuple[bool, ...]
    any_p: tuple[bool, ...]
    # one row (B = 1) per group, else empty (whether its top-p cuts: any_p): its divisor [G], how many ids its top-k
    # keeps (0: greedy, or no top-k past SORT_WIDTH ids) and its float64 top_p -+ the margin [G, 2]
    row_divisor: np.ndarray
    row_k: tuple[int, ...]
    row_cut: np.ndarray


def columns(temperature: np.ndarray, top_k: np.ndarray, top_p: np.ndarray, vocabs: Sequence[int],
            margin: float) -> Columns:
    """The columns of temperature / top_k / top_p [B, G] for vocabularies [G] (one-row cuts top_p -+ margin)."""
    key = tuple((a.tobytes(), a.dtype.str) for a in (temperature, top_k, top_p))
    return _columns(key, temperature.shape, tuple(vocabs), margin)


def _flags(per_group: np.ndarray | np.bool_) -> tuple[bool, ...]:
    """A [G] bool array as host flags."""
    return tuple(np.asarray(per_group).tolist())


@functools.lru_cache(maxsize=32)
def _columns(key: tuple[tuple[bytes, str], ...], shape: tuple[int, ...], vocabs: tuple[int, ...],
             margin: float) -> Columns:
    temperature, top_k, top_p = (np.frombuffer(b, dtype=d).reshape(shape) for b, d in key)      # [B, G]
    greedy = temperature < np.float32(MIN_TEMPERATURE)
    divisor = np.where(greedy, np.ones_like(temperature), temperature)
    widths = np.array(vocabs, dtype=np.int64)                                                    # [G]
    no_k = ~((top_k > 0) & (top_k < widths))
    kth_index = np.minimum(np.maximum(top_k, 1), np.minimum(widths, SORT_WIDTH)) - 1             # [B, G]
    p_off = top_p >= 1
    cut = np.where(p_off | greedy, np.inf, top_p.astype(np.float64))
    col = {name: np.ascontiguousarray(a.T[..., None])                                            # [G, B, 1]
           for name, a in (("divisor", divisor), ("kth_index", kth_index), ("kth_up", SORT_WIDTH - kth_index),
                           ("no_k", no_k), ("greedy", greedy), ("top_p", top_p), ("p_off", p_off), ("cut", cut))}
    one = shape[0] == 1
    kept = np.where(no_k, np.where(widths <= SORT_WIDTH, widths, 0), kth_index + 1)[0]             # [G]
    out = Columns(**col, rows=np.arange(shape[0])[:, None], any_greedy=_flags(greedy.any(0)),
                  all_greedy=_flags(greedy.all(0)), any_no_k=_flags(no_k.any(0)), any_p=_flags((~p_off).any(0)),
                  row_divisor=divisor[0] if one else np.empty(0, np.float32),
                  row_k=tuple(np.where(greedy[0], 0, kept).tolist()) if one else (),
                  row_cut=top_p[0].astype(np.float64)[:, None] + np.array([-margin, margin]) if one
                  else np.empty((0, 2)))                                                        # [G, 2]
    for a in out:
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    return out
