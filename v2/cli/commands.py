"""Command line: `v2 synth "text" -o out.wav` speaks a text through the runtime (a cloned voice with
`--reference speaker.wav` or `--voice NAME`: v2/cli/synth.py; many texts together with `--batch items.jsonl -o DIR`:
v2/cli/batch.py); `v2 voices add|list|remove` manages stored voices (v2/cli/voices.py; the card, checkpoint and
store options before or after the action); `v2 chat --message "Hi" -o reply.wav` sends one user turn (text and
`--audio` recordings) to a speaking chat card and prints its reply (v2/cli/chat.py); `v2 cards` lists the cards;
`v2 serve` serves the runtime over HTTP (v2/server). `python -m v2` is the same command.

Owns: the parser (every default shown by --help; the options and their checks: v2/cli/options.py), which
command runs, `serve`'s checks before the server extra is imported, and turning each expected failure
(v2/cli/common.py `expected`) into one line `error: ...` on stderr, in the options' names, and a non-zero exit
(`--debug` adds the traceback). What the commands that load a model share: v2/cli/common.py.
Must not know: model internals, scheduling, the server's internals.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any, Callable, NoReturn

from v2.audiofile import FORMATS, INSTALL_RAY, INSTALL_SERVER
from v2.card import DEFAULT_CARD, CardError, known_cards, load_card
from v2.cli.common import check_aligner, check_device, expected
from v2.cli.option_names import choice_hint, chosen_parser, unrecognized
from v2.cli.options import add_chat_arguments, add_runtime_arguments, add_synth_arguments, share_wording
from v2.cli.synth import run_synth
from v2.errors import CliError
from v2.server.options import add_arguments as add_serve_arguments


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


def _voices(args: argparse.Namespace) -> int:
    from v2.cli.voices import run_voices

    return run_voices(args)


def _chat(args: argparse.Namespace) -> int:
    from v2.cli.chat import run_chat

    return run_chat(args)


def _cards(args: argparse.Namespace) -> int:
    from v2.aligner.card import aligner_cards, resolve_aligner

    names, aligners = known_cards(), aligner_cards()
    width = max(len(n) for n in [*names, *aligners])
    for name in names:
        card = load_card(name)
        mark = " (default)" if name == DEFAULT_CARD else ""
        print(f"{name:<{width}}  {card.description}{mark}")
    for name in aligners:  # added to a speech card: --aligner NAME
        print(f"{name:<{width}}  {resolve_aligner(name).description} (aligner: --aligner {name})")
    return 0


def _serve(args: argparse.Namespace) -> int:
    card = load_card(args.card)
    if args.add_loop:  # refused before any model loads or any replica starts
        from v2.runtime.added_graph import added_loops

        try:
            added_loops(card, args.add_loop)
        except CardError as e:
            raise CliError(f"--add-loop: {e}") from None
    if getattr(args, "aligner", None) is not None:  # an unknown aligner is refused before any model loads
        check_aligner(args.aligner)
    args.device = check_device(args.device)
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
    "synth": run_synth, "voices": _voices, "chat": _chat, "cards": _cards, "serve": _serve}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="v2", formatter_class=_Help,
                     description="Speech from text through the v2 runtime: synth, voices, chat, cards, serve.")
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
    chat = sub.add_parser("chat", parents=[common], formatter_class=_Help,
                          help="one user turn (text and recordings) to a speaking chat card: its reply's text and audio",
                          description="Send one user turn to a speaking chat card (text with --message, recordings "
                                      "with --audio); print the reply's text and write its audio.")
    add_runtime_arguments(chat)
    add_chat_arguments(chat)
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


def main(argv: list[str] | None = None) -> int:
    """`v2 ...` (the console script) and `python -m v2 ...`: the command's exit status."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - sorted into expected failures and bugs right here
        if not expected(e):
            raise
        if args.debug:
            traceback.print_exc()
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1

