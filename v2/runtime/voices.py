"""The voice store: named voices (reference codes [N, G] and an optional transcript) kept on disk.

Owns: validating voice names (no path separators, no leading dot), the on-disk layout (one directory per
voice: `codes.npy` read with allow_pickle=False, `meta.json`), atomic writes (a temporary directory renamed
into place, so a reader never sees half a voice), a lock for adds and removes from many threads, loading
every voice at start (a corrupt entry is reported in `errors` and skipped, never fatal), and telling
audio from codes in `add` (audio is encoded through the `encode` function it is given, once, ever).
Must not know: the engine, models, requests.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.fields import FieldError, int_tensor

log = logging.getLogger(__name__)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
FORMAT = 1


class VoiceError(ValueError):
    """A voice name, its codes or its entry on disk is unusable; the message names which."""


@dataclass(frozen=True)
class Voice:
    name: str
    codes: np.ndarray    # int64 [N, G]
    text: str | None     # the transcript of the recording, when known (then usable for continuation)
    created: float       # seconds since the epoch

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "frames": int(len(self.codes)), "text": self.text, "created": self.created}


def default_directory(card_name: str) -> Path:
    """`$XDG_CACHE_HOME/v2/voices/<card>` (else `~/.cache/...`): codes belong to one codec."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "v2" / "voices" / card_name


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise VoiceError(f"voice: name must be 1-64 characters of letters, digits, '_', '-', '.', starting with a "
                         f"letter or digit (no path separators); got {name!r}")
    return name


def is_codes(value: object, width: int) -> bool:
    """Whether `add` was given codes (an integer [N, width] array, tensor or nested list) rather than audio."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "iu"
    if isinstance(value, torch.Tensor):
        return not value.dtype.is_floating_point
    return isinstance(value, list) and bool(value) and isinstance(value[0], (list, tuple)) \
        and len(value[0]) == width and all(isinstance(x, int) for x in value[0])


class VoiceStore:
    """`add`, `get`, `list`, `remove`; persisted under `directory`, loaded when made."""

    def __init__(self, directory: str | Path, *, encode: Callable[[Any], np.ndarray], width: int,
                 codebook_size: int = 1024) -> None:
        self.directory = Path(directory)
        self._encode = encode
        self._width, self._codebook = width, codebook_size
        self._lock = threading.Lock()
        self._voices: dict[str, Voice] = {}
        self.errors: list[str] = []  # entries skipped at load, each "name: why"
        self._load()

    def add(self, name: str, source: Any, *, text: str | None = None, replace: bool = True) -> Voice:
        """Store a voice from audio (a path, file bytes or (samples, rate): encoded now) or codes [N, G]."""
        check_name(name)
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise VoiceError("text: must be a non-empty string (the recording's transcript) or None")
        codes = self._check_codes(source, "codes") if is_codes(source, self._width) else self._encode(source)
        voice = Voice(name, self._check_codes(codes, "codes"), text, time.time())
        with self._lock:
            if not replace and name in self._voices:
                raise VoiceError(f"voice: {name!r} already exists")
            self._write(voice)
            self._voices[name] = voice
        return voice

    def get(self, name: str) -> Voice:
        with self._lock:
            voice = self._voices.get(name) if isinstance(name, str) else None
        if voice is None:
            raise VoiceError(f"voice: no stored voice named {name!r}")
        return voice

    def list(self) -> list[Voice]:
        with self._lock:
            return sorted(self._voices.values(), key=lambda v: v.name)

    def remove(self, name: str) -> None:
        check_name(name)
        with self._lock:
            if self._voices.pop(name, None) is None:
                raise VoiceError(f"voice: no stored voice named {name!r}")
            shutil.rmtree(self.directory / name, ignore_errors=True)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._voices

    # ----- disk ------------------------------------------------------------------------------------
    def _check_codes(self, value: Any, field: str) -> np.ndarray:
        try:
            codes = int_tensor(value, field).numpy()
        except FieldError as e:
            raise VoiceError(str(e)) from None
        if codes.ndim != 2 or codes.shape[1] != self._width or codes.shape[0] < 1:
            raise VoiceError(f"{field}: expected shape [N >= 1, {self._width}], got {list(codes.shape)}")
        if codes.min() < 0 or codes.max() >= self._codebook:
            raise VoiceError(f"{field}: codes must lie in [0, {self._codebook})")
        return codes

    def _write(self, voice: Voice) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{voice.name}.", dir=self.directory))
        np.save(staging / "codes.npy", voice.codes, allow_pickle=False)
        meta = {"format": FORMAT, "name": voice.name, "text": voice.text, "created": voice.created}
        (staging / "meta.json").write_text(json.dumps(meta))
        final = self.directory / voice.name
        if final.exists():  # swap: the old entry moves aside, the new one takes its place, the old one goes
            old = Path(tempfile.mkdtemp(prefix=f".{voice.name}.old.", dir=self.directory))
            os.replace(final, old / "entry")
            os.replace(staging, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, final)

    def _load(self) -> None:
        if not self.directory.is_dir():
            return
        for entry in sorted(self.directory.iterdir()):
            if entry.name.startswith("."):
                continue  # a write in progress or an interrupted one
            try:
                self._voices[entry.name] = self._read(entry)
            except Exception as e:  # any corruption: report, skip, go on
                message = f"{entry.name}: {type(e).__name__}: {e}"
                self.errors.append(message)
                log.warning("voice store %s: skipped %s", self.directory, message)

    def _read(self, entry: Path) -> Voice:
        check_name(entry.name)
        meta = json.loads((entry / "meta.json").read_text())
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("name") != entry.name:
            raise VoiceError("meta.json: not a voice entry of this format")
        text = meta.get("text")
        if text is not None and not isinstance(text, str):
            raise VoiceError("meta.json: text must be a string or null")
        codes = self._check_codes(np.load(entry / "codes.npy", allow_pickle=False), "codes.npy")
        return Voice(entry.name, codes, text, float(meta.get("created", 0.0)))
