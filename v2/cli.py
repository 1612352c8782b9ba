"""Command line: `v2 synth "text" -o out.wav` speaks a text through the runtime (a cloned voice with
`--reference speaker.wav` or `--voice NAME`; many texts together with `--batch items.jsonl -o DIR`: v2/cli_batch.py); `v2 voices add|list|remove` manages stored voices (v2/cli_voices.py; the card,
checkpoint and store options before or after the action); `v2 cards` lists the cards; `v2 serve` serves the runtime over HTTP (v2/server). `python -m v2` is the same command.

Owns: the options (every default shown by --help), the text (the argument, a file or stdin), checking
options, the device and the output path (the caller's directory for a relative one) before any model
loads, and what the card and the checkpoint's config refuse (the family's `precheck`: e.g. an unknown
speaker or language of the checkpoint; a taken voice name); a model only for a job that needs one (one runtime
per job: synth, voices add; voices list and remove read the store alone, its checks from the family's
`voice_spec`), the progress line on stderr, writing the audio file (on Ctrl-C the audio made so far, said in one
line, exit 130), and turning each expected
failure into one line `error: ...` on stderr, in the options' names, and a non-zero exit (`--debug` adds
the traceback).
Must not know: model internals, scheduling, the server's internals.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import traceback
from typing import Any, Callable, NoReturn

from v2.audiofile import FORMATS, INSTALL_RAY, INSTALL_SERVER, OutputError, check_writable, format_for
from v2.card import DEFAULT_CARD, CardError, ModelCard, family_of, known_cards, load_card
from v2.checkpoints import CheckpointNotFound
from v2.cli_options import (
    DEFAULT_OUT, DEFAULT_TEXT, add_runtime_arguments, add_synth_arguments, choice_hint, chosen_parser,
    in_option_names, sampling_fields, share_wording, unrecognized,
)
from v2.progress import Progress
from v2.registry import family_options
from v2.server.options import add_arguments as add_serve_arguments


class CliError(Exception):
    """An expected failure of a command; its message is the one line the user sees."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one `error: ...` line (exit 2) instead of the usage text."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {choice_hint(message)} (see: {self.prog} --help)\n")
        raise SystemExit(2)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """An unknown argument is refused by the command it was given to, with the closest of its options."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = chosen_parser(self, parsed)
            parser.error(unrecognized(extras, parser))
        return parsed


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Appends `(default: X)` to every option whose help does not already say what its default is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        return text if "default" in text else super()._get_help_string(action)


def _check_device(device: str | None) -> str:
    """The device to run on: `device`, else cuda when present, else cpu; refused before anything loads."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise CliError(f"--device {device!r}: not a device (use cpu, cuda or cuda:N)") from None
    if parsed.type not in ("cpu", "cuda"):
        raise CliError(f"--device {device!r}: the runtime runs on cpu or cuda")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise CliError(f"--device {device}: CUDA is not available ({why}, torch {torch.__version__})")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise CliError(f"--device {device}: there are {torch.cuda.device_count()} CUDA devices")
    return device


def _runtime(args: argparse.Namespace, card: ModelCard, device: str, progress: Progress | None = None) -> Any:
    """The card's runtime on `device`: the only place a model loads."""
    if progress is not None:
        progress.loading(card.name, device)
    from v2.runtime import Runtime

    return Runtime.from_card(card, checkpoint=args.checkpoint, codec_checkpoint=args.codec_checkpoint,
                             device=device, voices_dir=args.voices_dir)


def _precheck(card: ModelCard, request: dict[str, Any], checkpoint: str | None, text_option: str) -> None:
    """What the card and the checkpoint's config refuse of the request (e.g. a speaker or language the
    checkpoint does not have), named as the options; before any model loads."""
    try:
        family_of(card).precheck(card, request, checkpoint=checkpoint)
    except ValueError as e:
        if not _expected(e):
            raise
        raise CliError(in_option_names(str(e), text_option)) from None


def _request(args: argparse.Namespace, family: str, text: str) -> dict[str, Any]:
    """The request's fields as the options set them (the duration, which needs the runtime's frame rate,
    aside)."""
    request: dict[str, Any] = {
        "text": text, "seed": args.seed, "min_frames": args.min_frames, "stream": True,
        "language": args.language, "instruction": args.instruction, **_voice_fields(args),
        **_family_fields(family, args)}
    if args.max_frames:
        request["max_frames"] = args.max_frames
    return request


def _voice_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if args.reference:
        fields["reference_audio"] = args.reference if len(args.reference) > 1 else args.reference[0]
    if args.reference_text is not None:
        fields["reference_text"] = args.reference_text
    if args.voice is not None:
        fields["voice"] = args.voice
    return fields


def _family_fields(family: str, args: argparse.Namespace) -> dict[str, Any]:
    """The sampling knobs (the runtime's nested `sampling`, which every family's request takes) and the
    fields the family's own options set; an option that only other families take is refused."""
    own = {o.flag: o for o in family_options().get(family, ())}
    fields = sampling_fields(args)
    for name, value in vars(args).items():
        if not name.startswith("family_") or value is None:
            continue
        flag = "--" + name.removeprefix("family_").replace("_", "-")
        if flag not in own:
            raise CliError(f"{flag}: the {family} family takes no {flag[2:].replace('-', ' ')}")
        fields[own[flag].field] = value
    return fields


MAX_TEXT_FILE_BYTES = 1 << 20  # a text file or stdin is read up to this much (a card takes 20 000 characters)


def read_utf8(source: str, where: str, limit: int) -> str:
    """A file's text (`-`: stdin's), refused naming `where` when it cannot be read, is over `limit` bytes (no
    more is read) or is not UTF-8; a byte-order mark is dropped."""
    try:
        if source == "-":
            raw = sys.stdin.buffer.read(limit + 1)
        else:
            with open(source, "rb") as f:
                raw = f.read(limit + 1)
    except OSError as e:
        raise CliError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(raw) > limit:
        raise CliError(f"{where}: over {limit} bytes")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise CliError(f"{where}: not UTF-8 text (byte {e.start})") from None


def _text(args: argparse.Namespace) -> tuple[str, str]:
    """What to say, and the option that gave it (for errors): the argument (`TEXT`, as --help names it), stdin
    (`-`) or `--text-file`."""
    if args.text_file is not None and args.text is not None:
        raise CliError("--text-file: give the text or --text-file, not both")
    source = args.text_file if args.text_file is not None else args.text
    if source is None:
        return DEFAULT_TEXT, "TEXT"
    option = "--text-file" if args.text_file is not None else "TEXT"
    if source != "-" and option == "TEXT":
        return source, option
    where = "stdin (-)" if source == "-" else f"{option} {source}"
    text = read_utf8(source, where, MAX_TEXT_FILE_BYTES)
    if not text.strip():
        raise CliError(f"{where}: no text in it")
    return text.strip(), option


def _synth(args: argparse.Namespace) -> int:
    if args.batch is not None:
        from v2.cli_batch import run_batch

        return run_batch(args)
    from v2.audiofile import AudioWriter, write_audio

    # relative to the caller's directory (as typed in errors; reported absolute); a folder the user named is
    # created only with --mkdir, the default's own folder always
    out = check_writable(args.out, "--out", make_parents=args.mkdir or args.out == DEFAULT_OUT)
    fmt = format_for(out, args.format)
    if args.codes_out:
        check_writable(args.codes_out, "--codes-out", make_parents=args.mkdir)
    text, text_option = _text(args)
    card = load_card(args.card)  # a bad card is refused before the device is looked at
    device = _check_device(args.device)
    request = _request(args, card.family, text)
    _precheck(card, request, args.checkpoint, text_option)
    if args.voice is not None:  # an unknown stored voice is refused before the model loads
        from v2.cli_voices import check_voice

        check_voice(args, card)
    with Progress(enabled=not args.quiet) as progress:
        runtime = _runtime(args, card, device, progress)
        try:
            if args.duration is not None:  # the family refuses a target over its cap, named as --duration
                if "duration_frames" not in runtime.request_fields:
                    raise CliError(f"--duration: the {runtime.card.family} family takes no duration target")
                request["duration_frames"] = max(1, round(args.duration * runtime.frame_rate))
            try:
                handle = runtime.submit(request)
            except ValueError as e:  # a RequestError or a VoiceError: named as the options that set the fields
                if not _expected(e):
                    raise
                raise CliError(in_option_names(str(e), text_option)) from None
            progress.started()
            channels, rate = runtime.channels, runtime.sample_rate
            writer = AudioWriter(out, fmt, rate, channels) if args.stream else None
            made: list[Any] = []  # the chunks' audio so far (the handle holds them too): kept on Ctrl-C
            ctrl_c = _CtrlC(handle)
            try:
                for chunk in handle:
                    progress.update(chunk.frames, chunk.audio.shape[1] / chunk.sample_rate, handle.segments)
                    if writer is not None:
                        writer.write(chunk.audio)
                    made.append(chunk.audio)
                result = handle.result()
            finally:
                ctrl_c.restore()
                if writer is not None:
                    writer.close()
            if ctrl_c.hit:
                progress.clear()
                return _interrupted(out, fmt, rate, made, writer is not None)
            m = result.metrics
            noise = ("the card's weights are seeded: this is noise, not speech, at up to full scale (turn the volume "
                     "down)") if card.seeded and args.checkpoint is None else None
            progress.done(m.frames, m.audio_seconds, result.finish_reason, note=noise)
            if result.finish_reason not in ("stop", "length"):
                raise CliError(f"synthesis ended with {result.finish_reason}: {result.error or 'no audio'}")
            if not args.stream:
                write_audio(out, fmt, result.audio, rate)
            if args.codes_out:
                import numpy as np

                np.save(args.codes_out, result.codes)
        finally:
            runtime.close()
    print(json.dumps({"card": runtime.card.name, "out": str(out.absolute()), "format": fmt,
                      "finish_reason": result.finish_reason, "frames": m.frames, "audio_seconds": round(m.audio_seconds, 3), "channels": channels,
                      "sample_rate": rate, "prompt_rows": m.prompt_rows,
                      "ttfa_s": None if m.ttfa_s is None else round(m.ttfa_s, 4), "total_s": round(m.total_s, 3),
                      "rtf": None if m.rtf is None else round(m.rtf, 4)}))
    return 0


class _CtrlC:
    """While a request runs, the first Ctrl-C cancels it instead of raising: the chunks made until the engine
    aborts it still arrive, then the handle ends, so every chunk read is whole in the file (a KeyboardInterrupt
    could land inside a write). A second Ctrl-C raises KeyboardInterrupt as usual. Only where Python's own
    handler is installed (the main thread; not where SIGINT is ignored or an embedding program has its own)."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.hit = handle, False
        mine = threading.current_thread() is threading.main_thread()
        self.installed = mine and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        if self.installed:
            signal.signal(signal.SIGINT, self._cancel)

    def _cancel(self, sig: int, frame: Any) -> None:
        self.hit = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.handle.cancel()  # posts to the engine; this thread holds none of the runtime's locks here

    def restore(self) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(out: Any, fmt: str, rate: int, made: list[Any], streamed: bool) -> int:
    """Ctrl-C while the audio is made: the audio so far is kept as a whole file (with --stream it is in the
    file already, closed), said in one line; the exit status is a Ctrl-C'd program's."""
    from v2.audiofile import write_audio

    samples = sum(int(a.shape[1]) for a in made)
    if samples and not streamed:
        import numpy as np

        write_audio(out, fmt, np.concatenate(made, axis=1), rate)
    if not streamed and not samples:
        print("interrupted: no audio was made yet; nothing written", file=sys.stderr)
    else:
        print(f"interrupted: wrote {samples / rate:.2f} s of audio to {out.absolute()}", file=sys.stderr)
    return 130


def _voices(args: argparse.Namespace) -> int:
    from v2.cli_voices import run_voices

    return run_voices(args)


def _cards(args: argparse.Namespace) -> int:
    names = known_cards()
    width = max(len(n) for n in names)
    for name in names:
        card = load_card(name)
        mark = " (default)" if name == DEFAULT_CARD else ""
        print(f"{name:<{width}}  {card.description}{mark}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    load_card(args.card)
    args.device = _check_device(args.device)
    if args.replicas is not None:
        if args.replicas < 1:
            raise CliError(f"--replicas: must be at least 1, got {args.replicas}")
        if args.port == 0:
            raise CliError("--port: with --replicas, Ray Serve's proxy needs a fixed port (0 is not supported)")
        try:
            from v2.cluster.serve import run as run_replicas  # the ray extra, imported only for replicas
        except ImportError as e:
            raise CliError(f"serve --replicas needs the ray extra ({e.name or e} is missing): "
                           f"{INSTALL_RAY}") from None
        return run_replicas(args)
    try:
        from v2.server.serve import run  # the server extra, imported only when serving
    except ImportError as e:
        raise CliError(f"serve needs the server extra ({e.name or e} is missing): {INSTALL_SERVER}") from None
    return run(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "synth": _synth, "voices": _voices, "cards": _cards, "serve": _serve}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="v2", formatter_class=_Help,
                     description="Speech from text through the v2 runtime: synth, voices, cards, serve.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure (default: off)")
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of a failure (default: off)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    synth = sub.add_parser("synth", parents=[common], formatter_class=_Help, help="speak one text into an audio file",
                           description=f"Speak one text into an audio file ({', '.join(FORMATS)}).")
    add_runtime_arguments(synth)
    add_synth_arguments(synth)
    voices = sub.add_parser("voices", parents=[common], formatter_class=_Help,
                            help="store, list and remove voices (encoded once, kept on disk)")
    add_runtime_arguments(voices)
    actions = voices.add_subparsers(dest="action", required=True)
    add = _voices_action(actions, common, "add", help="encode a recording (or take a speaker embedding) and "
                                                      "store it under a name")
    add.add_argument("name", help="the voice's name")
    add.add_argument("audio", nargs="?", default=None, help="a recording of the voice (wav, flac, ogg, mp3)")
    add.add_argument("--speaker-embedding", default=None, metavar="FILE",
                     help="instead of a recording: a precomputed speaker embedding (a JSON list of numbers or a "
                          "1-D .npy array), where the model's voices are speaker-encoder embeddings (default: none)")
    add.add_argument("--text", default=None,
                     help="its transcript (then the voice speaks by continuation; default: none)")
    add.add_argument("--replace", action="store_true",
                     help="replace a stored voice of that name (default: refuse a taken name)")
    listing = _voices_action(actions, common, "list", help="a table of the stored voices")
    listing.add_argument("--json", action="store_true", help="one JSON object per line instead (default: a table)")
    remove = _voices_action(actions, common, "remove", help="delete a stored voice")
    remove.add_argument("name", help="the voice's name")
    sub.add_parser("cards", parents=[common], help="list the shipped cards with their descriptions")
    serve = sub.add_parser("serve", parents=[common], formatter_class=_Help,
                           help="serve the runtime over HTTP (OpenAI-compatible; needs the server extra)")
    add_serve_arguments(serve)
    share_wording(serve)  # the runtime options in synth's words; help where v2/server/options.py has none
    return parser


def _voices_action(actions: Any, common: argparse.ArgumentParser, name: str,
                   **kwargs: Any) -> argparse.ArgumentParser:
    """A `voices` action, taking the runtime options after its name too (`voices list --card X`): given there,
    they set the value; left out, the one given before the action (or the default) stays."""
    action = actions.add_parser(name, parents=[common], formatter_class=_Help, **kwargs)
    add_runtime_arguments(action, defaults=False)
    return action


def _expected(error: BaseException) -> bool:
    """A failure the user can act on (shown as one line) rather than a bug (shown with its traceback)."""
    if isinstance(error, (CliError, OutputError, CardError, CheckpointNotFound)):
        return True
    # these modules load torch; an error of theirs means they are loaded already
    request, voices = sys.modules.get("v2.errors"), sys.modules.get("v2.runtime.voices")
    return (request is not None and isinstance(error, (request.RequestError, request.OverloadedError))
            or voices is not None and isinstance(error, voices.VoiceError))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - sorted into expected failures and bugs right here
        if not _expected(e):
            raise
        if args.debug:
            traceback.print_exc()
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
