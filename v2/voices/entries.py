"""One voice entry on disk: its layout (a directory per voice: `codes.npy`, one `<array>.npy` per named
array, `meta.json` with the format, name, transcript, time, write id and array names), publishing one (a
staging directory renamed into place, the old entry renamed aside first and deleted after), listing the
entries, and reading one back (nothing followed through a symbolic link; `.npy` files read with
allow_pickle=False, under size limits; checked; cached by write id). `Entries` is the part of `VoiceStore`
(store.py) that does this, under the lock the store holds; `_Unusable`: an entry that is not a readable voice.
Must not know: the lock's workings, adding or removing a voice, the engine, models, families.
"""

from __future__ import annotations

import builtins
import json
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from v2.voices.arrays import check_arrays
from v2.voices.files import create, delete, read_bytes, read_npy, sync_directory
from v2.voices.voice import Voice, VoiceError, check_name

FORMAT = 1
STAGING, WITHDRAWN = ".staging-", ".withdrawn-"  # hidden: never listed; swept at start
MAX_CODES_BYTES, MAX_META_BYTES = 16 * 2**20, 2**20  # [N, G] int64 at 16 MiB: 2M codes, hours of audio
MAX_ARRAY_BYTES = 2**20  # one named array (a speaker embedding is a few KiB)


class _Unusable(Exception):
    """An entry on disk that is not a readable voice (why: the message)."""


class Entries:
    """`VoiceStore`'s entries on disk: what it holds that they use is set when it is built (store.py)."""

    directory: Path
    _arrays: Mapping[str, tuple[int, ...]]
    _cache_lock: threading.Lock
    _cache: dict[str, tuple[str, Voice]]  # name -> (write id, voice)
    _check_codes: Callable[..., np.ndarray]  # (value, field, empty=False): [N, width] codes in range

    def _publish(self, voice: Voice, write_id: str, taken: bool) -> None:
        """Under the exclusive lock: write a staging directory, then rename it into place (the old entry,
        if any, renamed aside first and deleted after). A failure removes what it wrote and keeps the old."""
        final = self.directory / voice.name
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING}{voice.name}-", dir=self.directory))
        try:
            with create(staging / "codes.npy") as f:
                np.save(f, voice.codes, allow_pickle=False)
            for key, value in voice.arrays.items():
                with create(staging / f"{key}.npy") as f:
                    np.save(f, value, allow_pickle=False)
            meta = {"format": FORMAT, "name": voice.name, "text": voice.text, "created": voice.created,
                    "id": write_id, "arrays": sorted(voice.arrays)}
            with create(staging / "meta.json") as f:
                f.write(json.dumps(meta).encode())
            if taken:
                aside = self.directory / f"{WITHDRAWN}{voice.name}-{write_id}"
                os.rename(final, aside)
                try:
                    os.rename(staging, final)
                except BaseException:
                    os.rename(aside, final)
                    raise
                delete(aside)
            else:
                os.rename(staging, final)
        finally:
            delete(staging)  # gone already once published
        sync_directory(self.directory)

    def _names(self) -> builtins.list[str]:  # (`list` here is the method)
        try:
            return sorted(e.name for e in os.scandir(self.directory) if not e.name.startswith("."))
        except FileNotFoundError:
            return []

    def _entry(self, name: str) -> Voice:
        """Under a lock: the voice stored as `name` (the cached one while its write id is unchanged)."""
        path = self.directory / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            raise VoiceError(f"voice: no stored voice named {name!r}", field="voice") from None
        if stat.S_ISLNK(mode):
            raise _Unusable("a symbolic link (the store does not follow links; remove it and add the voice)")
        if not stat.S_ISDIR(mode):
            raise _Unusable("not a directory")
        try:
            check_name(name)
            meta = json.loads(read_bytes(path / "meta.json", MAX_META_BYTES))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("name") != name:
                raise VoiceError("meta.json: not a voice entry of this format", field="meta.json")
            text, created = meta.get("text"), meta.get("created", 0.0)
            if text is not None and not isinstance(text, str):
                raise VoiceError("meta.json: text must be a string or null", field="meta.json")
            if not isinstance(created, (int, float)):
                raise VoiceError("meta.json: created must be a number", field="meta.json")
            write_id = str(meta.get("id") or repr(created))  # entries written before ids: their time
            with self._cache_lock:
                cached = self._cache.get(name)
            if cached is not None and cached[0] == write_id:
                return cached[1]
            # no frames: a voice made from an embedding, where voices carry arrays
            codes = self._check_codes(read_npy(path / "codes.npy", MAX_CODES_BYTES, "iu"), "codes.npy",
                                      empty=bool(self._arrays))
            named = {}
            for key in self._arrays:
                if not os.path.lexists(path / f"{key}.npy"):
                    raise VoiceError(f"{key}.npy: missing (this runtime's voices carry {key!r}: add the voice "
                                     "again from its recording)", field=None)
                named[key] = read_npy(path / f"{key}.npy", MAX_ARRAY_BYTES, "f")
            named = check_arrays(named, self._arrays, ".npy")
        except (OSError, ValueError) as e:  # VoiceError included
            raise _Unusable(f"{type(e).__name__}: {e}") from None
        voice = Voice(name, codes, text, float(created), named)
        with self._cache_lock:
            self._cache[name] = (write_id, voice)
        return voice
