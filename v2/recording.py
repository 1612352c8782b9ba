"""A reference recording as a request value: a path, the bytes of an audio file, or (samples, sample_rate).

Owns: `recording(value, label)` (a path as str, a private copy of file bytes, or a private copy of raw
samples with their rate; the rate and frames x channels of raw samples are checked from their shape before
the copy) and `is_samples` (whether a tuple is (samples, sample_rate) rather than a list of recordings).
Refusals are `FieldError`s of `reference_audio`, their messages naming the label given (with an index when
a request holds several). Reading and decoding a file is the audio reader's, at submit; whether a family
takes one recording or several is its request schema's.
Must not know: any family, the model, the runtime.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

import numpy as np

from v2.errors import FieldError
from v2.fields import check_reference_size, check_sample_rate, is_tensor

FIELD = "reference_audio"


def is_samples(value: tuple[Any, ...]) -> bool:
    """(samples, sample_rate): a pair whose second item is a number."""
    return len(value) == 2 and isinstance(value[1], numbers.Real) and not isinstance(value[1], bool)


def recording(x: Any, label: str) -> Any:
    """A path (as str), a private copy of file bytes, or (a private copy of the samples, rate). Refusals are
    of `reference_audio`, their messages naming `label` (with the recording's index when there are several)."""
    if isinstance(x, (str, os.PathLike)):
        return os.fspath(x)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, tuple) and is_samples(x):
        _check_samples_cost(x[0], x[1], label)
        samples = x[0].detach().cpu().numpy() if is_tensor(x[0]) else x[0]
        if isinstance(samples, np.ndarray) and samples.dtype.kind not in "fi":
            raise FieldError(f"{label}: samples must be float, int16 or int32 PCM, got {samples.dtype}", field=FIELD)
        try:
            return (np.array(samples, copy=True), x[1])
        except (TypeError, ValueError) as e:
            raise FieldError(f"{label}: samples are not an array of numbers ({e})", field=FIELD) from None
    raise FieldError(f"{label}: expected a path, the bytes of an audio file, or (samples, sample_rate); "
                     f"got {type(x).__name__}", field=FIELD)


def _check_samples_cost(samples: Any, rate: Any, label: str) -> None:
    """The rate and frames x channels of raw samples, from the shape alone: refused before the copy (the
    duration against the card is checked at prepare, still before any conversion)."""
    try:
        check_sample_rate(rate)
        shape = tuple(samples.shape) if isinstance(samples, np.ndarray) or is_tensor(samples) else (len(samples),) \
            if isinstance(samples, (list, tuple)) else None
        if shape and max(shape) > 0:
            check_reference_size(max(shape), math.prod(shape) // max(shape))  # the longer axis is time
    except ValueError as e:
        raise FieldError(f"{label}: {e}", field=FIELD) from None
