"""What a stored voice is: `Voice` (reference codes [N, G], an optional transcript, when it was made, the
named arrays it carries), its name's rule (`NAME`, `check_name`: matched whole, no path separators, no
leading dot, no trailing newline), the store's errors (`VoiceError`, `VoiceExists`), telling codes from
audio (`is_codes`) and `clip` (a transcript on one line). v2/voices/store.py re-exports every name.
Must not know: the store's folder, files and lock, the engine, models, requests, families.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # always used with fullmatch


class VoiceError(ValueError):
    """A voice name, its codes or its entry on disk is unusable; the message names which, and `field` says it:
    "voice" (the name), "text", "replace", "codes", or the entry's file ("meta.json", "codes.npy")."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class VoiceExists(VoiceError):
    """`add` of a name that is taken, without `replace=True`."""

    def __init__(self, name: str) -> None:
        super().__init__(f"voice: a voice named {name!r} is stored already; pass replace=True to replace it",
                         field="voice")
        self.name = name


@dataclass(frozen=True, repr=False)
class Voice:
    name: str
    codes: np.ndarray    # int64 [N, G]
    text: str | None     # the transcript of the recording, when known (then usable for continuation)
    created: float       # seconds since the epoch
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)  # the named arrays the store asks for
                                                                    # (e.g. "x_vector": float32 [H])

    def info(self) -> dict[str, Any]:
        out = {"name": self.name, "frames": int(len(self.codes)), "text": self.text, "created": self.created}
        return out | {"arrays": sorted(self.arrays)} if self.arrays else out

    def __repr__(self) -> str:
        text = None if self.text is None else clip(self.text, 40)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created))
        return f"Voice(name={self.name!r}, frames={len(self.codes)}, text={text!r}, created={when!r})"


def clip(text: str, width: int) -> str:
    """`text` on one line, at most `width` characters (an ellipsis where cut)."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"


def check_name(name: object) -> str:
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        raise VoiceError(f"voice: name must be 1-64 characters of letters, digits, '_', '-', '.', starting with a "
                         f"letter or digit (no path separators); got {name!r}", field="voice")
    return name


def is_codes(value: object, width: int) -> bool:
    """Whether `add` was given codes (an integer [N, width] array, tensor or nested list) rather than audio."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "iu"
    if isinstance(value, torch.Tensor):
        return not value.dtype.is_floating_point
    return isinstance(value, list) and bool(value) and isinstance(value[0], (list, tuple)) \
        and len(value[0]) == width and all(isinstance(x, int) for x in value[0])
