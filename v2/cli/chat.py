"""`v2 chat --message "Hi" [--audio question.wav] -o reply.wav`: one user turn to a speaking chat model.

Owns: the request the options make (OpenAI's chat shape: a `--system` turn, then one user turn whose parts are
the `--message` texts and `--audio` files in the order given, each file as an `input_audio` part: its bytes in
base64 and its format from the suffix, by the one suffix table (v2/audiofile.py `SUFFIXES`), taken when it is one
of the formats the card's family reads (v2/card.py `input_audio_formats`: the family's class as the typed
`TakesRecordings` says it, the list the server takes and publishes) and
the file's header says that container; `--voice` the speaker, `--text-only` the text modality alone), the
checks before any model loads (the files, the output path, the device, what the card's config refuses), the
reply's text on stdout and its audio into `--out`, a summary line on stderr (the progress line), and every
refusal in the options' names (`messages[0].content[1].input_audio.data` -> `--audio FILE`).
Must not know: any family, the chat template, model internals, the server.
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
from pathlib import Path
from typing import Any, Collection

from v2.audiofile import SUFFIXES, check_writable, format_for, suffix_format
from v2.card import input_audio_formats, load_card  # the formats: the family's class, typed (TakesRecordings)
from v2.cli.common import check_device, expected, load_runtime, precheck, read_bounded
from v2.cli.options import DEFAULT_REPLY
from v2.errors import CliError, FieldError
from v2.progress import Progress

MAX_AUDIO_BYTES = 64 << 20  # an --audio file is read up to this much
# the request's fields -> the options that set them
OPTIONS = {"speaker": "--voice", "modalities": "--text-only", "max_tokens": "--max-tokens",
           "max_frames": "--max-frames", "seed": "--seed", "temperature": "--temperature", "top_k": "--top-k",
           "top_p": "--top-p"}
_PART = re.compile(r"messages\[(\d+)\]\.content(?:\[(\d+)\])?[\w.\[\]]*")
_FIELD = re.compile(r"(?<![\w.\[-])([a-z_]+)(?=[:\s])")


def audio_format(path: str, formats: Collection[str]) -> str:
    """An `--audio` file's format, from its suffix; refused unless it is one of `formats`."""
    where, suffix = f"--audio {path}", Path(path).suffix
    taken = ", ".join(s for s, f in SUFFIXES.items() if f in formats)
    if not taken:
        raise CliError(f"{where}: the card's model takes no recordings; give a chat card (v2 cards)")
    fmt = suffix_format(path)
    if fmt is None:
        raise CliError(f"{where}: cannot tell the format from the suffix {suffix or '(none)'!r}; give a {taken} file")
    if fmt not in formats:
        raise CliError(f"{where}: the card's model does not read {fmt}; give a {taken} file")
    return fmt


def _audio_part(path: str, formats: Collection[str]) -> dict[str, Any]:
    """An `--audio` file as an input_audio part (refused naming the option and the file): its suffix names a
    format the card takes, and its header says that container."""
    from v2.models.audio_in import AudioError, file_format  # soundfile: only for recordings

    where = f"--audio {path}"
    fmt = audio_format(path, formats)
    raw = read_bounded(path, where, MAX_AUDIO_BYTES)
    try:
        found = file_format(raw)
    except AudioError as e:
        raise CliError(f"{where}: {e}") from None
    if found != fmt:
        raise CliError(f"{where}: holds {found} audio, not {fmt} as its suffix says")
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(raw).decode("ascii"), "format": fmt}}


def messages(args: argparse.Namespace, formats: Collection[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The conversation the options make, and each message / part path -> the option that gave it; `formats`:
    those the card takes in an input_audio part."""
    turns: list[dict[str, Any]] = []
    labels: dict[str, str] = {}
    if args.system is not None:
        labels[f"messages[{len(turns)}]"] = "--system"
        turns.append({"role": "system", "content": args.system})
    user = len(turns)
    given: list[tuple[str, str]] = args.parts or []
    several = sum(kind == "text" for kind, _ in given) > 1
    parts: list[dict[str, Any]] = []
    texts = 0
    for kind, value in given:
        if kind == "audio":
            labels[f"messages[{user}].content[{len(parts)}]"] = f"--audio {value}"
            parts.append(_audio_part(value, formats))
        else:
            texts += 1
            labels[f"messages[{user}].content[{len(parts)}]"] = f"--message #{texts}" if several else "--message"
            parts.append({"type": "text", "text": value})
    if not parts:
        raise CliError("--message: give the user's turn: --message TEXT and/or --audio FILE")
    labels[f"messages[{user}]"] = "--message"
    turns.append({"role": "user", "content": parts})
    return turns, labels


def request(args: argparse.Namespace, turns: list[dict[str, Any]]) -> dict[str, Any]:
    fields: dict[str, Any] = {"messages": turns, "seed": args.seed,
                              "modalities": ["text"] if args.text_only else ["text", "audio"]}
    for name in ("max_tokens", "max_frames", "temperature", "top_k", "top_p"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.voice is not None:
        fields["speaker"] = args.voice
    return fields


def in_options(message: str, labels: dict[str, str]) -> str:
    """A refusal with the message paths and fields it names said as the options that set them."""
    def part(m: re.Match[str]) -> str:
        whole = f"messages[{m.group(1)}].content[{m.group(2)}]" if m.group(2) is not None else None
        return labels.get(whole or "", labels.get(f"messages[{m.group(1)}]", m.group(0)))

    out = _PART.sub(part, message)
    return _FIELD.sub(lambda m: OPTIONS.get(m.group(1), m.group(0)) if m.start() == 0 or "_" in m.group(1)
                      else m.group(0), out)


def _refusal(error: BaseException) -> bool:
    """A request's refusal: an expected failure, or a FieldError naming its field."""
    return expected(error) or isinstance(error, FieldError)


def run_chat(args: argparse.Namespace) -> int:
    """`v2 chat`: one turn, the reply's text on stdout and its audio in `--out`."""
    if args.text_only and args.out is not None:
        raise CliError("--out: --text-only makes no audio to write")
    out, fmt = None, "wav"
    if not args.text_only:
        out = check_writable(args.out or DEFAULT_REPLY, "--out", make_parents=args.mkdir or args.out is None)
        fmt = format_for(out, None)
    card = load_card(args.card)
    turns, labels = messages(args, input_audio_formats(card))
    fields = request(args, turns)
    device = check_device(args.device)
    # what the card and the checkpoint's config refuse (a speaker it has not), before any model loads
    precheck(card, fields, args.checkpoint, rename=lambda message: in_options(message, labels))
    with Progress(enabled=not args.quiet) as progress:
        runtime = load_runtime(args, card, device, progress)
        try:
            if "messages" not in runtime.request_fields:
                raise CliError(f"--card {args.card}: its family ({runtime.card.family}) takes no chat messages; "
                               "give a chat card (v2 cards)")
            try:
                handle = runtime.submit(fields)
            except ValueError as e:  # a refused field: named as the options that set it
                if not _refusal(e):
                    raise
                raise CliError(in_options(str(e), labels)) from None
            progress.started()
            result = handle.result()
            m = result.metrics
            if out is not None:
                progress.done(m.frames, m.audio_seconds, result.finish_reason)
            if result.finish_reason not in ("stop", "length"):
                raise CliError(f"the reply ended with {result.finish_reason}: {result.error or 'no reply'}")
            if out is not None:
                from v2.audiofile import write_audio

                write_audio(out, fmt, result.audio, result.sample_rate)
        finally:
            runtime.close()
    print(result.text or "")
    if not args.quiet:
        tokens = len(result.text_ids or ())
        said = f"; wrote {result.audio.shape[1] / result.sample_rate:.2f} s of audio to {out.absolute()}" \
            if out is not None else ""
        print(f"reply: {tokens} text tokens ({result.text_finish_reason or result.finish_reason}){said}",
              file=sys.stderr)
    return 0
