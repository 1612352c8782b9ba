"""`v2 voices add|list|remove`: stored voices from the command line (v2/cli/commands.py parses; this runs it).

Owns: the card's voice store without a model (list and remove load none; a taken name for add is refused before
the model loads), adding a recording or a speaker embedding read from a file (a JSON list or a 1-D .npy) through
a runtime's store, the table `voices list` prints, what `voices remove` removed, and synth's `--voice` looked up
before a model loads (an unknown name refused listing the stored voices and the store's folder).
Must not know: a family (the store's checks come from the family's `voice_spec`), how a voice is encoded.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from v2.card import ModelCard, family_of, load_card
from v2.cli.common import check_device, load_runtime
from v2.errors import CliError


def run_voices(args: argparse.Namespace) -> int:
    """`v2 voices add|list|remove`."""
    card = load_card(args.card)
    store = _store(args, card)
    if args.action == "add":
        print(json.dumps(_add_voice(args, card, store).info()))
    elif args.action == "remove":
        print(_remove(args.name, store))
    elif args.json:
        for voice in store.list():
            print(json.dumps(voice.info()))
    else:
        print(_voice_table(store.list(), store.directory))
    for problem in store.errors:
        print(f"skipped a corrupt voice entry: {problem}", file=sys.stderr)
    return 0


def _remove(name: str, store: Any) -> str:
    """Remove a stored voice: what was removed, or refused naming the action (listing the stored voices)."""
    from v2.voices.store import VoiceError, clip

    _checked_name(name, "voices remove")
    if not store.taken(name):
        raise CliError(f"voices remove: {unknown_voice(name, store)}")
    try:
        voice = store.get(name)
        what = f"{len(voice.codes)} frames" + ("" if voice.text is None else f", text {clip(voice.text, 48)!r}")
    except VoiceError:  # an unusable entry is removed all the same
        what = "an unusable entry"
    try:
        store.remove(name)
    except VoiceError:  # removed by another process meanwhile
        raise CliError(f"voices remove: {unknown_voice(name, store)}") from None
    return f"removed the voice {name!r} ({what}) from {store.directory}"


def _checked_name(name: str, where: str) -> None:
    from v2.voices.store import VoiceError, check_name

    try:
        check_name(name)
    except VoiceError as e:
        raise CliError(f"{where}: {str(e).removeprefix('voice: ')}") from None


def unknown_voice(name: str, store: Any) -> str:
    """No stored voice `name`: which are stored, and where (as the server's unknown `voice` says)."""
    names = [v.name for v in store.list()] if store.directory.is_dir() else []
    stored = f"stored: {', '.join(names)}" if names else "none stored"
    return f"no stored voice named {name!r} in {store.directory} ({stored}; see v2 voices list)"


def check_voice(args: argparse.Namespace, card: ModelCard) -> None:
    """synth's `--voice`: a stored voice of the card's store, refused before a model loads where it is not."""
    _checked_name(args.voice, "--voice")
    store = _store(args, card)
    if not store.taken(args.voice):
        raise CliError(f"--voice: {unknown_voice(args.voice, store)}")


def _store(args: argparse.Namespace, card: ModelCard) -> Any:
    """The card's voice store without a model: its checks from the checkpoint's config (the family's
    `voice_spec`), the folder a runtime's store would have; it encodes nothing (`_add_voice` does, through
    a runtime)."""
    from v2.voices.store import VoiceStore, store_directory

    spec = family_of(card).voice_spec(card, args.checkpoint)
    return VoiceStore(store_directory(card.name, args.voices_dir, card.runtime.voices_dir), encode=_no_encoder,
                      width=spec.width, codebook_size=spec.codebook_size, arrays=spec.arrays)


def _no_encoder(audio: Any) -> NoReturn:
    raise RuntimeError("this voice store loads no model; a recording is encoded through a runtime's store")


def _add_voice(args: argparse.Namespace, card: ModelCard, store: Any) -> Any:
    """A taken name (without --replace) refused before the model loads; then the recording encoded and
    stored through a runtime's store (on the same folder)."""
    from v2.voices.store import VoiceExists

    if not args.replace and store.taken(args.name):
        raise _taken(args.name, store.directory)
    if (args.audio is None) == (args.speaker_embedding is None):
        raise CliError("voices add: give a recording (AUDIO) or --speaker-embedding FILE, one of the two")
    embedding = None if args.speaker_embedding is None else _read_embedding(args.speaker_embedding)
    runtime = load_runtime(args, card, check_device(args.device))
    try:
        if embedding is not None:
            return runtime.voices.add(args.name, speaker_embedding=embedding, text=args.text, replace=args.replace)
        return runtime.voices.add(args.name, args.audio, text=args.text, replace=args.replace)
    except VoiceExists:  # stored by another process meanwhile
        raise _taken(args.name, store.directory) from None
    finally:
        runtime.close()


def _read_embedding(path: str) -> list[float]:
    """A speaker embedding from a file: a JSON list of numbers, or a 1-D `.npy` array (the store checks its
    width and values, naming `speaker_embedding`)."""
    import numpy as np

    where = f"--speaker-embedding {path!r}"
    try:
        if path.endswith(".npy"):
            array = np.load(path, allow_pickle=False)
            if array.ndim != 1 or not np.issubdtype(array.dtype, np.number):
                raise CliError(f"{where}: expected a 1-D array of numbers, got shape {array.shape} {array.dtype}")
            return [float(v) for v in array]
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except OSError as e:
        raise CliError(f"{where}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise CliError(f"{where}: not a JSON list of numbers or a .npy array ({e})") from None
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise CliError(f"{where}: expected a JSON list of numbers")
    return [float(v) for v in value]


def _taken(name: str, directory: Any) -> CliError:
    return CliError(f"voices add: a voice named {name!r} is stored already in {directory}; "
                    "pass --replace to replace it")


def _voice_table(voices: list[Any], directory: Any) -> str:
    """Stored voices as a table for people: name, frames, when added, the transcript (clipped)."""
    import time

    from v2.voices.store import clip

    if not voices:
        return f"no stored voices in {directory}"
    rows = [("NAME", "FRAMES", "ADDED", "TEXT")]
    rows += [(v.name, str(len(v.codes)), time.strftime("%Y-%m-%d %H:%M", time.localtime(v.created)),
              "-" if v.text is None else clip(v.text, 48)) for v in voices]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows)
