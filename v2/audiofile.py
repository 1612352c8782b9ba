"""Audio files the command line writes: wav, flac, ogg (Vorbis) and mp3, through soundfile.

Owns: telling the format from an explicit choice or the file's suffix, checking that a path can be written
before any work is done (so a long synthesis never ends in "permission denied"), and a writer that takes
the audio chunk by chunk or whole, clipped to [-1, 1].
Must not know: the runtime, requests, models.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

# format name -> (soundfile container, subtype)
FORMATS: dict[str, tuple[str, str]] = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"),
                                       "ogg": ("OGG", "VORBIS"), "mp3": ("MP3", "MPEG_LAYER_III")}
_SUFFIXES = {".wav": "wav", ".flac": "flac", ".ogg": "ogg", ".oga": "ogg", ".mp3": "mp3"}
_BLOCK = 1 << 15  # frames per soundfile write: libsndfile's Vorbis and MP3 encoders take bounded blocks best


class OutputError(ValueError):
    """The output cannot be written as asked; the message names the path or the option."""


def format_for(path: str | Path, explicit: str | None = None) -> str:
    """`explicit` when given, else the format the suffix names; refused when neither says, or when this
    machine's libsndfile cannot write it."""
    fmt = explicit or _SUFFIXES.get(Path(path).suffix.lower())
    if fmt is None:
        raise OutputError(f"--out {path}: cannot tell the format from the suffix {Path(path).suffix or '(none)'!r}; "
                          f"name the file .wav, .flac, .ogg or .mp3, or give --format")
    if fmt not in FORMATS:
        raise OutputError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    import soundfile as sf

    container, subtype = FORMATS[fmt]
    if container not in sf.available_formats() or subtype not in sf.available_subtypes(container):
        raise OutputError(f"--format {fmt}: the libsndfile here ({sf.__libsndfile_version__}) cannot write it")
    return fmt


def check_writable(path: str | Path, option: str = "--out", *, make_parents: bool = True) -> Path:
    """Prove `path` can be opened for writing (an existing file is left as it is; a file created for the check
    is removed again). Missing parent folders are created with `make_parents`, else refused naming `option`."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory")
    blocking = next((p for p in path.parents if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise OutputError(f"{option} {path}: {blocking} is a file, not a folder")
    if not make_parents and not path.parent.exists():
        raise OutputError(f"{option} {path}: its folder {path.parent} does not exist (create it, or pass --mkdir)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot create its folder ({e.strerror or e})") from None
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot be written ({e.strerror or e})") from None
    if not existed:
        os.unlink(path)
    return path


class AudioWriter:
    """A file being written: `write(audio)` appends float [channels, n] samples; a `with` block closes it."""

    def __init__(self, path: str | Path, fmt: str, sample_rate: int, channels: int) -> None:
        import soundfile as sf

        container, subtype = FORMATS[fmt]
        self.path = Path(path)
        self._file = sf.SoundFile(self.path, "w", samplerate=sample_rate, channels=channels, format=container,
                                  subtype=subtype)

    def write(self, audio: Any) -> None:
        import numpy as np

        frames = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0).T  # [n, channels]
        for start in range(0, len(frames), _BLOCK):
            self._file.write(frames[start:start + _BLOCK])

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "AudioWriter":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def write_audio(path: str | Path, fmt: str, audio: Any, sample_rate: int) -> None:
    """Write a whole signal, float [channels, n], in one file."""
    with AudioWriter(path, fmt, sample_rate, int(audio.shape[0])) as out:
        out.write(audio)
