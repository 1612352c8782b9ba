"""The named arrays a stored voice carries besides its codes (e.g. a speaker embedding): names and checks.

Owns: which names an array may have (its file is `<name>.npy` next to `codes.npy`: lower-case letters,
digits, '_'; never "codes" or "meta") and checking a voice's arrays against what the store asks for
(exactly those names; each float32 of its shape, finite; private copies), and checking a precomputed speaker
embedding given for one (`check_embedding`: a flat list or array of numbers of the encoder's width, finite).
Errors name the array, or the field the embedding came in.
Must not know: the engine, models, families, files.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np
import torch

from v2.fields import FieldError

ARRAY_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")  # always used with fullmatch


def check_names(wanted: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The arrays a store asks for (name -> shape), checked once at construction."""
    for key, shape in wanted.items():
        if not isinstance(key, str) or ARRAY_NAME.fullmatch(key) is None or key in ("codes", "meta"):
            raise ValueError(f"arrays: {key!r} is not a usable array name")
        if not all(isinstance(n, int) and n >= 1 for n in shape):
            raise ValueError(f"arrays: {key!r} has shape {shape!r}; expected positive sizes")
    return {k: tuple(v) for k, v in wanted.items()}


def check_arrays(given: Any, wanted: Mapping[str, tuple[int, ...]], suffix: str = "") -> dict[str, np.ndarray]:
    """Exactly the arrays the store asks for, each float32 of its shape and finite (private copies)."""
    if not isinstance(given, Mapping):
        raise FieldError(f"arrays: expected a mapping of name -> array, got {type(given).__name__}", field='arrays')
    unknown = sorted(set(given) - set(wanted))
    if unknown:
        raise FieldError(f"arrays: {unknown} are not arrays this runtime's voices carry "
                         f"({sorted(wanted) or 'none'})", field='arrays')
    out = {}
    for key, shape in wanted.items():
        if key not in given:
            raise FieldError(f"{key}: this runtime's voices carry it (add the voice from audio, or pass "
                             f"arrays={{{key!r}: ...}} with the codes)", field="arrays")
        value = given[key]
        value = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
        try:
            array = np.array(value, dtype=np.float32)  # a private copy
        except (TypeError, ValueError):
            raise FieldError(f"{key}{suffix}: not an array of numbers", field="arrays") from None
        if array.shape != tuple(shape) or not np.isfinite(array).all():
            raise FieldError(f"{key}{suffix}: expected finite float32 of shape {list(shape)}, got shape "
                             f"{list(array.shape)}", field="arrays")
        out[key] = array
    return out



def check_embedding(value: Any, width: int, field: str = "speaker_embedding") -> np.ndarray:
    """A precomputed speaker embedding: a flat list (or 1-D array, tensor) of `width` finite numbers, as a
    private float32 [width]; refused naming `field` (a wrong width says the width wanted)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, (str, bytes, dict)) or isinstance(value, (list, tuple)) and any(
            isinstance(x, (bool, str, bytes)) for x in value):
        raise FieldError(f"{field}: expected a list of {width} numbers", field=field)
    try:
        with np.errstate(over="ignore"):  # a value past float32's range becomes inf: refused below
            array = np.array(value, dtype=np.float32)  # a private copy
    except (TypeError, ValueError, OverflowError):
        raise FieldError(f"{field}: expected a list of {width} numbers", field=field) from None
    if array.ndim != 1 or array.shape[0] != width:
        raise FieldError(f"{field}: expected {width} numbers (the speaker encoder's width), got shape "
                         f"{list(array.shape)}", field=field)
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise FieldError(f"{field}: every value must be finite (index {bad} is {array[bad]}, or too large for "
                         "float32)", field=field)
    return array
