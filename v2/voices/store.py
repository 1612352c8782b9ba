"""The voice store: named voices (reference codes [N, G], an optional transcript, and the named arrays the
runtime's family asks every voice to carry, e.g. a speaker embedding) kept on disk.

Owns: the store's folder (`store_directory`: the one given, else the per-card default), checking the named
arrays (the names and shapes the store is given; float32, finite), the cross-process lock that orders writers
and readers (`flock` on `<dir>/.lock`: exclusive for add and remove, shared for reads), withdrawing entries
so that a reader in any thread or process sees a whole voice or none (an entry renamed out of sight before it
is deleted), refusing a taken name unless asked to replace (`taken` answers it without a lock, before any
encoding), sweeping what a crashed writer left, reading the directory as the truth (a cache keyed by each
entry's write id, so several stores on one directory agree), reporting corrupt entries in `errors` (skipped,
never fatal), and telling audio from codes in `add` (audio is encoded through the `encode` function it is
given, once, ever: it returns the codes, or the codes and the named arrays), and a voice from a precomputed
speaker embedding (`add(name, speaker_embedding=...)`: the `embed` function it is given makes the named
arrays, checked; the voice has no recording, so no codes ([0, G]) and no transcript; a store given no `embed`
refuses it naming `speaker_embedding`, with the reason). What a voice is, its name's rule and the errors are
voice.py's (re-exported here); an entry's layout on disk, publishing one and reading one back are
entries.py's (`Entries`, which `VoiceStore` is).
Must not know: the engine, models, requests, which family asks for which array.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from v2.fields import FieldError, int_tensor
from v2.voices.arrays import check_arrays, check_names
from v2.voices.entries import STAGING, WITHDRAWN, Entries, _Unusable
from v2.voices.files import delete, locked, sync_directory
from v2.voices.voice import (  # re-exported: voice.py's
    NAME, Voice, VoiceError, VoiceExists, check_name, clip, is_codes,
)

log = logging.getLogger(__name__)


def default_directory(card_name: str) -> Path:
    """`$XDG_CACHE_HOME/v2/voices/<card>` (else `~/.cache/...`): codes belong to one codec."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "v2" / "voices" / card_name


def store_directory(card_name: str, *choices: str | Path | None) -> Path:
    """The first of `choices` given (e.g. the caller's folder, then the card's setting), else
    `default_directory(card_name)`."""
    return Path(next((c for c in choices if c), None) or default_directory(card_name))


class VoiceStore(Entries):
    """`add`, `get`, `list`, `remove`; persisted under `directory` (shared safely with other stores on it)."""

    def __init__(self, directory: str | Path, *, encode: Callable[[Any], Any], width: int,
                 codebook_size: int = 1024, arrays: Mapping[str, tuple[int, ...]] | None = None,
                 embed: Callable[[Any], Mapping[str, Any]] | None = None) -> None:
        """`encode(audio)`: the codes [N, width], or (codes, {name: array}) when `arrays` names some.
        `arrays`: the float32 arrays every voice carries besides its codes, name -> shape (the family's).
        `embed(speaker_embedding)`: the arrays of a voice made from an embedding alone (the family's; it
        refuses a `FieldError`); None: voices are made from recordings (or codes) only."""
        self.directory = Path(directory)
        self._encode, self._embed = encode, embed
        self._width, self._codebook = width, codebook_size
        self._arrays = check_names(arrays or {})
        self._cache_lock = threading.Lock()
        self._cache: dict[str, tuple[str, Voice]] = {}  # name -> (write id, voice)
        self._reported: set[str] = set()
        self.errors: list[str] = []  # entries skipped by the latest scan (made at start and by list()), "name: why"
        self._sweep()
        self.list()

    def __repr__(self) -> str:
        return f"VoiceStore(directory={str(self.directory)!r})"

    def add(self, name: str, source: Any = None, *, text: str | None = None, replace: bool = False,
            arrays: Mapping[str, Any] | None = None, speaker_embedding: Any = None) -> Voice:
        """Store a voice from audio (a path, file bytes or (samples, rate): encoded now, the named arrays with
        it), codes [N, G] (with `arrays`: every array the store asks for), or a precomputed
        `speaker_embedding` alone (a list of the speaker encoder's width: no codes, no transcript). A taken
        name raises `VoiceExists` (before any encoding) unless `replace=True`."""
        check_name(name)
        if speaker_embedding is not None:
            return self._add_embedding(name, speaker_embedding, source, text, replace, arrays)
        if source is None:
            raise VoiceError("source: give a recording (or codes), or speaker_embedding", field="source")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise VoiceError("text: must be a non-empty string (the recording's transcript) or None", field="text")
        if not isinstance(replace, bool):
            raise VoiceError(f"replace: must be True or False, got {replace!r}", field="replace")
        if not replace and self.taken(name):
            raise VoiceExists(name)  # checked again under the lock; this spares the encoding
        if is_codes(source, self._width):
            codes, named = self._check_codes(source, "codes"), self._named(arrays or {})
        elif arrays is not None:
            raise VoiceError("arrays: given with audio, which is encoded for them; give codes with arrays",
                             field="arrays")
        else:
            encoded = self._encode(source)
            codes, named = encoded if isinstance(encoded, tuple) else (encoded, {})
            named = self._named(named)
        return self._store(Voice(name, self._check_codes(codes, "codes"), text, time.time(), named), replace)

    def _store(self, voice: Voice, replace: bool) -> Voice:
        """Publish a checked voice under the exclusive lock (a taken name refused unless `replace`)."""
        name = voice.name
        write_id = uuid.uuid4().hex
        self.directory.mkdir(parents=True, exist_ok=True)
        with locked(self.directory, exclusive=True):
            taken = os.path.lexists(self.directory / name)
            if taken and not replace:
                raise VoiceExists(name)
            self._publish(voice, write_id, taken)
        with self._cache_lock:
            self._cache[name] = (write_id, voice)
        return voice

    def _add_embedding(self, name: str, embedding: Any, source: Any, text: str | None, replace: bool,
                       arrays: Mapping[str, Any] | None) -> Voice:
        """A voice from an embedding alone: its arrays through `embed`, no codes, no transcript."""
        if source is not None or arrays is not None:
            raise VoiceError("speaker_embedding: give a recording or a speaker embedding, not both",
                             field="speaker_embedding")
        if text is not None:
            raise VoiceError("text: a voice made from a speaker embedding has no recording, so no transcript to "
                             "speak in context (omit it)", field="text")
        if not isinstance(replace, bool):
            raise VoiceError(f"replace: must be True or False, got {replace!r}", field="replace")
        if self._embed is None:
            raise VoiceError("speaker_embedding: this model's voices are what a recording encodes to (codes), "
                             "which a speaker embedding does not give; add the voice from a recording",
                             field="speaker_embedding")
        if not replace and self.taken(name):
            raise VoiceExists(name)
        try:
            named = self._named(self._embed(embedding))
        except FieldError as e:
            raise VoiceError(str(e), field=e.field) from None
        return self._store(Voice(name, np.zeros((0, self._width), np.int64), None, time.time(), named), replace)

    def taken(self, name: str) -> bool:
        """Whether an entry (usable or not) holds `name`, so that `add` without `replace` refuses it (a
        valid name is checked first)."""
        return os.path.lexists(self.directory / check_name(name))

    def get(self, name: str) -> Voice:
        check_name(name)
        with locked(self.directory, exclusive=False):
            try:
                return self._entry(name)
            except _Unusable as e:
                raise VoiceError(f"voice: the stored entry {name!r} in {self.directory} is unusable: {e}",
                                 field="voice") from None

    def list(self) -> list[Voice]:
        """Every readable voice, by name; the entries skipped are in `errors` afterwards."""
        voices, errors = [], []
        with locked(self.directory, exclusive=False):
            names = self._names()
            for name in names:
                try:
                    voices.append(self._entry(name))
                except (_Unusable, VoiceError) as e:
                    errors.append(f"{name}: {e}")
        with self._cache_lock:
            for gone in set(self._cache) - set(names):
                del self._cache[gone]
        for message in errors:
            if message not in self._reported:
                self._reported.add(message)
                log.warning("voice store %s: skipped %s", self.directory, message)
        self.errors = errors
        return voices

    def remove(self, name: str) -> None:
        """Take the entry out of sight (a rename), then delete it; a symbolic link is removed, never followed."""
        check_name(name)
        if not self.directory.is_dir():
            raise VoiceError(f"voice: no stored voice named {name!r}", field="voice")
        with locked(self.directory, exclusive=True):
            if not os.path.lexists(self.directory / name):
                raise VoiceError(f"voice: no stored voice named {name!r}", field="voice")
            aside = self.directory / f"{WITHDRAWN}{name}-{uuid.uuid4().hex}"
            os.rename(self.directory / name, aside)
            delete(aside)
            sync_directory(self.directory)
        with self._cache_lock:
            self._cache.pop(name, None)

    def __contains__(self, name: object) -> bool:
        try:
            self.get(name)  # type: ignore[arg-type]
        except VoiceError:
            return False
        return True

    def _sweep(self) -> None:
        """Delete staging and withdrawn entries a crashed writer left: under the exclusive lock no write is
        in progress, so every one of them is debris. Skipped where the directory is absent or read-only."""
        if not self.directory.is_dir():
            return
        try:
            with locked(self.directory, exclusive=True):
                for entry in os.scandir(self.directory):
                    if entry.name.startswith((STAGING, WITHDRAWN)):
                        delete(Path(entry.path))
        except OSError as e:
            log.debug("voice store %s: not swept (%s)", self.directory, e)  # e.g. a read-only store

    def _named(self, given: Any) -> dict[str, np.ndarray]:
        try:
            return check_arrays(given, self._arrays)
        except FieldError as e:
            raise VoiceError(str(e), field=e.field) from None

    def _check_codes(self, value: Any, field: str, empty: bool = False) -> np.ndarray:
        """[N, width] codes in range; N >= 1 unless `empty` (a voice from an embedding, read back)."""
        try:
            codes = int_tensor(value, field).numpy()
        except FieldError as e:
            raise VoiceError(str(e), field=field) from None
        if codes.ndim != 2 or codes.shape[1] != self._width or codes.shape[0] < (0 if empty else 1):
            raise VoiceError(f"{field}: expected shape [N >= 1, {self._width}], got {list(codes.shape)}", field=field)
        if codes.size and (codes.min() < 0 or codes.max() >= self._codebook):
            raise VoiceError(f"{field}: codes must lie in [0, {self._codebook})", field=field)
        return codes
