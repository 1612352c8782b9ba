"""Audio files the command line writes: wav, flac, ogg (Vorbis) and mp3 through soundfile; opus (Ogg) and aac
(ADTS), the other formats the server streams, through the server's own encoder (v2/server/audio.py: PyAV, in
the server extra; that module imports none of the server's web parts).

Owns: telling the format from an explicit choice or the file's suffix (SUFFIXES, the one suffix table: the
recordings `v2 chat` sends are named by it too; and that this machine can write it),
checking that a path can be written before any work is done (so a long synthesis never ends in "permission
denied"), and a writer that takes the audio chunk by chunk or whole, clipped to [-1, 1].
Must not know: the runtime, requests, models, HTTP.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

# format name -> (soundfile container, subtype); ENCODED: those the server's encoder writes (PyAV), none here
FORMATS: dict[str, tuple[str, str]] = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"),
                                       "ogg": ("OGG", "VORBIS"), "mp3": ("MP3", "MPEG_LAYER_III"),
                                       "opus": ("", ""), "aac": ("", "")}
ENCODED = frozenset({"opus", "aac"})
INSTALL_SERVER = 'pip install -e ".[server]"'  # the README's commands for the server extra (PyAV with it)
INSTALL_RAY = 'pip install -e ".[ray,server]"'  # and for serving replicas on Ray
# a file's suffix -> its format: the one table, for the files the command line writes and the recordings it sends
SUFFIXES = {".wav": "wav", ".flac": "flac", ".ogg": "ogg", ".oga": "ogg", ".mp3": "mp3", ".opus": "opus",
            ".aac": "aac"}
_BLOCK = 1 << 15  # frames per soundfile write: libsndfile's Vorbis and MP3 encoders take bounded blocks best


class OutputError(ValueError):
    """The output cannot be written as asked; the message names the path or the option."""


def suffix_format(path: str | Path) -> str | None:
    """The format a file's suffix names (SUFFIXES, any case), or None."""
    return SUFFIXES.get(Path(path).suffix.lower())


def format_for(path: str | Path, explicit: str | None = None) -> str:
    """`explicit` when given, else the format the suffix names; refused when neither says, or when this
    machine's libsndfile cannot write it."""
    fmt = explicit or suffix_format(path)
    if fmt is None:
        raise OutputError(f"--out {path}: cannot tell the format from the suffix {Path(path).suffix or '(none)'!r}; "
                          f"name the file {', '.join(SUFFIXES)}, or give --format")
    if fmt not in FORMATS:
        raise OutputError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt in ENCODED:
        try:
            import av  # noqa: F401 - only whether it is there
        except ImportError:
            raise OutputError(f"--format {fmt}: needs PyAV, which the server extra installs: "
                              f"{INSTALL_SERVER}") from None
        return fmt
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
        self.path = Path(path)
        self._encoder: Any = None
        if fmt in ENCODED:
            self._encoder = _encoder(fmt, sample_rate, channels)
            self._file: Any = open(self.path, "wb")
            return
        import soundfile as sf

        container, subtype = FORMATS[fmt]
        self._file = sf.SoundFile(self.path, "w", samplerate=sample_rate, channels=channels, format=container,
                                  subtype=subtype)

    def write(self, audio: Any) -> None:
        import numpy as np

        frames = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)  # [channels, n]
        for start in range(0, frames.shape[1], _BLOCK):
            block = frames[:, start:start + _BLOCK]
            if self._encoder is not None:
                self._file.write(self._encoder.feed(block))
            else:
                self._file.write(block.T)  # [n, channels]

    def close(self) -> None:
        if self._encoder is not None and not self._file.closed:
            self._file.write(self._encoder.finish())
        self._file.close()

    def __enter__(self) -> "AudioWriter":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _encoder(fmt: str, sample_rate: int, channels: int) -> Any:
    """The server's streaming encoder of `fmt` (v2/server/audio.py): at the audio's rate where the format holds
    it, else at 48 kHz (which opus and aac both hold)."""
    from v2.server.audio import RATES, make_encoder, output_spec

    rate = sample_rate if sample_rate in RATES.get(fmt, (sample_rate,)) else 48000
    return make_encoder(output_spec(fmt, rate, sample_rate, channels), sample_rate, channels, streaming=True)


def write_audio(path: str | Path, fmt: str, audio: Any, sample_rate: int) -> None:
    """Write a whole signal, float [channels, n], in one file."""
    with AudioWriter(path, fmt, sample_rate, int(audio.shape[0])) as out:
        out.write(audio)
