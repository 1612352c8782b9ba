"""`v2 synth --batch items.jsonl -o DIR`: many texts through one runtime, run together, one file each.

Owns: reading the items file (UTF-8 JSON Lines, at most `MAX_ITEMS_BYTES` and `MAX_ITEMS` items; blank lines
skipped), each line as one item: a JSON object of synth's options by name (`text` required; `voice`, `seed`,
`max_frames` or `max-frames`, `temperature`, `reference`, a family's own options, ...: `ITEM_OPTIONS`),
each overriding the value the command line gave, checked as the option checks it (a mistyped key refused
with the closest one); an optional `id` or `name` naming its file (else its line number in the file, from 1,
zero-padded: the number its errors carry too) and `format`; the folder `-o`
(made with --mkdir); every good item submitted before any is awaited (the engine batches them); writing each
audio; a bad line (JSON, a field, a refusal, a name taken twice, a failed run) reported as `error:
FILE:LINE: FIELD: why` on stderr while the others are still written; the summary as one JSON line on
stdout; exit 1 if any item failed.
Must not know: model internals, scheduling, the server.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from v2.audiofile import FORMATS, OutputError, write_audio
from v2.card import load_card
from v2.cli.common import check_device, expected, load_runtime, precheck, read_utf8, request
from v2.cli.options import DEFAULT_OUT, add_synth_arguments
from v2.cli.voices import unknown_voice
from v2.errors import CliError, did_you_mean
from v2.progress import Progress

MAX_ITEMS_BYTES = 16 << 20
MAX_ITEMS = 10_000
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # always used with fullmatch
NOT_PER_ITEM = {"text_file", "out", "mkdir", "stream", "codes_out", "quiet", "batch", "format", "help"}


@dataclass
class Item:
    index: int                          # among the items, from 0
    line: int                           # in the file, from 1
    name: str = ""                      # its file's stem
    named_by: str = "line"              # the key that named it (`id` or `name`), for a clash
    fmt: str = "wav"
    request: dict[str, Any] | None = None
    handle: Any = None
    error: str | None = None            # "FIELD: why"
    out: Path | None = None
    frames: int = 0


def _options() -> dict[str, argparse.Action]:
    """synth's options an item may set, by destination (a family's own: by its flag's name as well)."""
    p = argparse.ArgumentParser(add_help=False)
    add_synth_arguments(p)
    out = {}
    for action in p._actions:
        if action.dest in NOT_PER_ITEM:
            continue
        out[action.dest] = action
        if action.dest.startswith("family_"):
            out[action.dest.removeprefix("family_")] = action
    return out


ITEM_OPTIONS = _options()


def _value(key: str, action: argparse.Action, value: Any) -> Any:
    """An item's value for an option, checked as the command line checks it."""
    if action.dest == "reference":
        refs = [value] if isinstance(value, str) else value
        if not isinstance(refs, list) or not refs or not all(isinstance(r, str) and r for r in refs):
            raise ValueError("a recording's path, or a list of them")
        return refs
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise ValueError(f"expected {'a number' if action.type is not None else 'a string'}, got {json.dumps(value)}")
    if action.type is None:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {json.dumps(value)}")
        converted: Any = value
    else:
        try:
            converted = action.type(str(value))  # type: ignore[operator]
        except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
            raise ValueError(str(e) or f"not a valid value: {value!r}") from None
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"{converted!r} is not one of {', '.join(map(str, action.choices))}")
    return converted


def _item(args: argparse.Namespace, index: int, line_no: int, raw: str) -> tuple[Item, argparse.Namespace]:
    item = Item(index, line_no, fmt=args.format or "wav")
    try:
        given = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"line: not JSON ({e})") from None
    if not isinstance(given, dict):
        raise ValueError("line: must be a JSON object of synth's options (e.g. {\"text\": \"...\", \"seed\": 3})")
    ns = copy.copy(args)
    ns.text = None
    for key, value in given.items():
        field = str(key).replace("-", "_")
        if field in ("id", "name"):
            if not isinstance(value, str) or FILE_NAME.fullmatch(value) is None:
                raise ValueError(f"{key}: a file name of letters, digits, '_', '.', '-' (starting with a letter or "
                                 f"digit, at most 128), got {json.dumps(value)}")
            item.name, item.named_by = value, str(key)
        elif field == "format":
            if value not in FORMATS:
                raise ValueError(f"format: one of {', '.join(FORMATS)}, got {json.dumps(value)}")
            item.fmt = value
        elif field in ITEM_OPTIONS:
            try:
                setattr(ns, ITEM_OPTIONS[field].dest, _value(key, ITEM_OPTIONS[field], value))
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from None
        else:
            keys = [k for k in (*ITEM_OPTIONS, "id", "name", "format") if not k.startswith("family_")]
            hint = did_you_mean(field, keys)
            raise ValueError(f"{key}: not an option an item sets (text, voice, seed, max_frames, temperature, ...; "
                             f"{hint + ' ' if hint else ''}see: v2 synth --help)")
    if not isinstance(ns.text, str) or not ns.text.strip():
        raise ValueError("text: every item needs its text")
    return item, ns


def _read(path: str, args: argparse.Namespace) -> tuple[list[Item], list[argparse.Namespace | None]]:
    text = read_utf8(path, f"--batch {path}", MAX_ITEMS_BYTES)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise CliError(f"--batch {path}: no items in it (one JSON object a line)")
    if len(lines) > MAX_ITEMS:
        raise CliError(f"--batch {path}: {len(lines)} items, over {MAX_ITEMS}; split the file")
    items, spaces = [], []
    for index, (n, raw) in enumerate(lines):
        try:
            item, ns = _item(args, index, n, raw)
        except ValueError as e:
            item, ns = Item(index, n, error=str(e)), None
        items.append(item)
        spaces.append(ns)
    width = max(3, len(str(items[-1].line)))
    taken: set[str] = set()
    for item in items:  # unnamed: by its line number, as its errors are
        item.name = item.name or f"{item.line:0{width}d}"
        if item.error is None and f"{item.name}.{item.fmt}" in taken:
            item.error = f"{item.named_by}: the file {item.name}.{item.fmt} is another item's"
        taken.add(f"{item.name}.{item.fmt}")
    return items, spaces


def _check_args(args: argparse.Namespace) -> Path:
    for given, option in ((args.text, "TEXT"), (args.text_file, "--text-file"), (args.codes_out, "--codes-out")):
        if given is not None:
            raise CliError(f"{option}: not with --batch (each line gives its text; the files go into -o)")
    if args.stream:
        raise CliError("--stream: not with --batch (each file is written once its audio has ended)")
    if args.out == DEFAULT_OUT:
        raise CliError("-o: give the folder the batch's files go into (--batch)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"-o {args.out}: not a folder (--batch writes one file per item into it)")
    if not out.exists():
        if not args.mkdir:
            raise CliError(f"-o {args.out}: no such folder (create it, or pass --mkdir)")
        out.mkdir(parents=True)
    return out


def run_batch(args: argparse.Namespace) -> int:
    out = _check_args(args)
    card = load_card(args.card)
    device = check_device(args.device)
    items, spaces = _read(args.batch, args)
    for item, ns in zip(items, spaces):
        if item.error is None and ns is not None:
            try:
                item.request = {**request(ns, card.family, ns.text), "stream": False}
                precheck(card, item.request, args.checkpoint, "text")
            except CliError as e:
                item.error = str(e)
    started = time.perf_counter()
    with Progress(enabled=not args.quiet) as progress:
        runtime = load_runtime(args, card, device, progress)
        try:
            started = time.perf_counter()
            for item, ns in zip(items, spaces):  # every item submitted before any is awaited
                if item.error is None and item.request is not None:
                    _submit(runtime, item, ns)
            for item in items:
                if item.handle is not None:
                    _finish(runtime, item, out)
        finally:
            runtime.close()
    wall = time.perf_counter() - started
    failed = [item for item in items if item.error is not None]
    for item in failed:
        print(f"error: {args.batch}:{item.line}: {' '.join(item.error.split())}", file=sys.stderr)  # type: ignore[union-attr]
    print(json.dumps({"card": card.name, "out": str(out.absolute()), "items": len(items),
                      "succeeded": len(items) - len(failed), "failed": len(failed), "wall_s": round(wall, 3),
                      "files": [None if i.out is None else i.out.name for i in items],
                      "errors": {str(i.line): i.error for i in failed}}))
    return 1 if failed else 0


def _submit(runtime: Any, item: Item, ns: Any) -> None:
    assert item.request is not None
    try:
        if ns.duration is not None:
            if "duration_frames" not in runtime.request_fields:
                raise CliError(f"duration: the {runtime.card.family} family takes no duration target")
            item.request["duration_frames"] = max(1, round(ns.duration * runtime.frame_rate))
        item.handle = runtime.submit(item.request)
    except Exception as e:  # noqa: BLE001 - a refused item is reported with its line; a bug is raised
        if not expected(e):
            raise
        item.error = str(e)
        if str(e).startswith("voice: no stored voice named") and ns.voice is not None and runtime.voices is not None:
            item.error = f"voice: {unknown_voice(ns.voice, runtime.voices)}"  # the stored ones, and where


def _finish(runtime: Any, item: Item, out: Path) -> None:
    result = item.handle.result()
    if result.finish_reason not in ("stop", "length"):
        item.error = f"synthesis: ended with {result.finish_reason}: {result.error or 'no audio'}"
        return
    path = out / f"{item.name}.{item.fmt}"
    try:
        write_audio(path, item.fmt, result.audio, runtime.sample_rate)
    except OutputError as e:
        item.error = f"format: {e}"
        return
    item.out, item.frames = path, result.metrics.frames
