"""The options of `v2 synth` and of the commands that load a runtime, with their value checks.

Owns: option names, defaults and help texts (worded for every family, none named: a family's own options
come from its package, `v2.registry.family_options`, each saying whose it is; the
runtime options read the same on every command, serve's too: `share_wording`); refusing a bad value at parse
time, naming the option, with the same ranges a request or a card accepts (v2/fields.py); mapping the
sampling knobs onto the request's audio head (`sampling.audio.*`) and `sampling.repetition_penalty`. What the
command line says back (a refused request's fields, an unknown argument, an invalid choice, in the options'
names) is v2/cli/option_names.py's (`in_option_names`, `OPTION_FOR_FIELD`: re-exported here).
Must not know: the runtime, models, the server (serve's options are only reworded, as argparse holds them).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from v2.aligner.card import ALIGNER_HELP
from v2.audiofile import FORMATS, SUFFIXES
from v2.card import DEFAULT_CARD, DEFAULT_CHAT_CARD
from v2.cli.option_names import OPTION_FOR_FIELD, in_option_names  # re-exported: option_names.py's
from v2.fields import INT64_MAX, TOP_K_MAX, check_penalty, check_temperature
from v2.registry import FamilyOption, family_options

DEFAULT_TEXT = "Hello from v2, a runtime for dual autoregressive speech models."


def _parsed(convert: Callable[[str], Any], text: str, kind: str) -> Any:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None


def _checked(value: Any, check: Callable[[Any], Any]) -> Any:
    try:
        check(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _in_range(low: float, high: float, *, open_low: bool = False) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if not (low < v <= high if open_low else low <= v <= high):
            raise ValueError(f"must lie in {'(' if open_low else '['}{low}, {high}], got {v!r}")
    return check


def temperature(text: str) -> float:
    return _checked(_parsed(float, text, "a number"), check_temperature)


def top_k(text: str) -> int:
    return _checked(_parsed(int, text, "a whole number"), _in_range(0, TOP_K_MAX))


def top_p(text: str) -> float:
    return _checked(_parsed(float, text, "a number"), _in_range(0, 1, open_low=True))


def penalty(text: str) -> float:
    return _checked(_parsed(float, text, "a number"), check_penalty)


def count(text: str) -> int:
    return _checked(_parsed(int, text, "a whole number"), _in_range(0, INT64_MAX))


def seconds(text: str) -> float:
    value = _parsed(float, text, "a number of seconds")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


# the options of every command that reads a card: option -> (default, help); each help says its default, so
# it reads the same on every parser that has the option (synth, voices and its actions, serve)
RUNTIME_OPTIONS: dict[str, tuple[str | None, str]] = {
    "--card": (DEFAULT_CARD, f"a shipped card's name (v2 cards) or a path to a card file (default: {DEFAULT_CARD})"),
    "--checkpoint": (None, "model checkpoint: a directory or a hub repo id in the Hugging Face cache "
                           "(default: the card's)"),
    "--codec-checkpoint": (None, "codec checkpoint: a directory or a hub repo id (default: the card's, "
                                 "or the one its family finds beside --checkpoint)"),
    "--device": (None, "cpu, cuda or cuda:N (default: cuda when present, else cpu)"),
    "--voices-dir": (None, "the voice store's folder (default: the card's, else ~/.cache/v2/voices/CARD, under "
                           "$XDG_CACHE_HOME instead when set)"),
}
# serve's options that v2/server/options.py leaves without help
SERVE_HELP: dict[str, str] = {
    "--log-level": "how much the HTTP server (uvicorn) logs",
    "--no-access-log": "no log line per HTTP request (default: off: uvicorn's access log is on)",
}


def add_runtime_arguments(p: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """`RUNTIME_OPTIONS` on `p`. `defaults=False`: an option not given sets nothing, for a subcommand's
    parser under one that has them already (`voices list --card X` as well as `voices --card X list`;
    argparse would let the subcommand's default overwrite the value given before it)."""
    for option, (default, text) in RUNTIME_OPTIONS.items():
        p.add_argument(option, default=default if defaults else argparse.SUPPRESS, help=text)


def share_wording(p: argparse.ArgumentParser) -> None:
    """A parser whose options are defined elsewhere (serve's: v2/server/options.py) in this module's words:
    each runtime option with the same default takes `RUNTIME_OPTIONS`' help, an option without help takes
    `SERVE_HELP`'s."""
    for action in p._actions:
        option = max(action.option_strings, key=len, default="")
        if option in RUNTIME_OPTIONS and action.default == RUNTIME_OPTIONS[option][0]:
            action.help = RUNTIME_OPTIONS[option][1]
        elif not action.help and option in SERVE_HELP:
            action.help = SERVE_HELP[option]


DEFAULT_OUT = "out/speech.wav"  # the default output; its folder is created


def add_synth_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", nargs="?", default=None, metavar="TEXT",
                   help=f"what to say; - reads it from stdin (default: {DEFAULT_TEXT!r})")
    p.add_argument("--text-file", default=None, metavar="PATH",
                   help="read what to say from this UTF-8 file, - for stdin (default: none)")
    p.add_argument("-o", "--out", default=DEFAULT_OUT,
                   help="the audio file to write, at the card's sample rate and channels (the final JSON line "
                        "says which); a folder you name must exist unless --mkdir")
    p.add_argument("--mkdir", action="store_true", help="create the missing folders of -o and --codes-out (default: off)")
    p.add_argument("--format", choices=list(FORMATS), default=None,
                   help="wav and flac: 16-bit PCM; ogg: Vorbis; mp3; opus (Ogg) and aac (ADTS), as the server "
                        "streams them, through PyAV (the server extra) (default: from the --out suffix)")
    p.add_argument("--stream", action="store_true",
                   help="write the file chunk by chunk as audio arrives (default: off, written once at the end)")
    p.add_argument("--reference", action="append", default=[], metavar="AUDIO",
                   help="a recording of the voice to clone (wav, flac, ogg, mp3); repeat the option for several "
                        "where the card's family takes them (default: none)")
    p.add_argument("--reference-text", default=None,
                   help="the reference's transcript: the speech continues that recording (default: none)")
    p.add_argument("--voice", default=None, help="a stored voice (v2 voices list; default: none)")
    p.add_argument("--seed", type=count, default=0, help="the sampling seed: the same seed gives the same audio")
    p.add_argument("--temperature", type=temperature, default=None,
                   help="the codes' sampling temperature, 0 = greedy (the card's main head: the one that picks "
                        "each frame's codes) (default: the card's)")
    p.add_argument("--top-k", type=top_k, default=None,
                   help="keep the k likeliest codes (the card's main head) (default: the card's)")
    p.add_argument("--top-p", type=top_p, default=None,
                   help="keep the codes within this probability mass (the card's main head) (default: the card's)")
    p.add_argument("--repetition-penalty", type=penalty, default=None,
                   help="penalty on codes already sampled, 1 = off (default: the card's)")
    p.add_argument("--duration", type=seconds, default=None, metavar="SECONDS",
                   help="the length to aim for, told to the model in frames at the card's frame rate, where its "
                        "family takes a duration target (default: none, the model decides)")
    p.add_argument("--max-frames", type=count, default=0,
                   help="stop after this many frames, 12.5 per second (default: 0 = the card's limit)")
    p.add_argument("--min-frames", type=count, default=0, help="ignore the stop decision before this many frames")
    p.add_argument("--language", default=None,
                   help="the language of the text, as the card's family takes it: one of the checkpoint's "
                        "languages (or its ISO 639-1 code) where it has a list, else any text, into the prompt as "
                        "written; an unknown one is refused listing the accepted values (default: none)")
    p.add_argument("--instruction", default=None, help="a style instruction (default: none)")
    add_family_arguments(p)
    p.add_argument("--codes-out", default=None,
                   help="also write the codes as .npy, [F, G]: G codes per frame, as the card's codec has them "
                        "(default: none)")
    p.add_argument("--timestamps", nargs="?", const="-", default=None, metavar="PATH",
                   help="each word's start and end in seconds, from the aligner: in the summary line's \"words\", and "
                        "with PATH also written there as JSON [{word, start, end}] (default: off)")
    p.add_argument("--aligner", default=None, metavar="ALIGNER", help=ALIGNER_HELP)
    p.add_argument("--batch", default=None, metavar="ITEMS.JSONL",
                   help="speak many texts together: one JSON object a line, each setting these options by name "
                        "(text required; e.g. {\"text\": \"...\", \"seed\": 3, \"voice\": \"v\"}) over the ones "
                        "given here, with an optional id or name for its file and a format; -o is then a folder, "
                        "the files named ID.FORMAT or by the item's line number (001.wav, ...); a bad line is reported "
                        "with its line number while the others are written, and the exit code is 1 (default: none)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line (default: off)")


DEFAULT_REPLY = "out/reply.wav"  # `v2 chat`'s default output; its folder is created


class _Part(argparse.Action):
    """`--message` / `--audio`: appended to one list in the order given, as (kind, value)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parts = list(getattr(namespace, "parts", None) or [])
        parts.append(("audio" if option_string == "--audio" else "text", values))
        namespace.parts = parts


def add_chat_arguments(p: argparse.ArgumentParser) -> None:
    """`v2 chat`'s options (the runtime options are added before: `--card` defaults to DEFAULT_CHAT_CARD here)."""
    for action in p._actions:
        if "--card" in action.option_strings:
            action.default = DEFAULT_CHAT_CARD
            action.help = f"a shipped chat card's name (v2 cards) or a path to a card file (default: {DEFAULT_CHAT_CARD})"
    p.set_defaults(parts=None)
    p.add_argument("-m", "--message", action=_Part, metavar="TEXT",
                   help="text of the user's turn; repeat for several parts, kept in order with --audio (default: none)")
    p.add_argument("--audio", action=_Part, metavar="FILE",
                   help="a recording in the user's turn, in a format the card's family takes, named by its suffix "
                        f"({' '.join(SUFFIXES)}); sent as an input_audio part; repeatable (default: none)")
    p.add_argument("--system", default=None, help="a system turn before the user's (default: none)")
    p.add_argument("--voice", default=None,
                   help="the speaker of the reply, one of the checkpoint's (default: the card's first)")
    p.add_argument("--text-only", action="store_true", help="reply in text alone, no audio (default: off)")
    p.add_argument("-o", "--out", default=None,
                   help=f"the audio file of the reply (wav, flac, ogg, mp3) (default: {DEFAULT_REPLY})")
    p.add_argument("--mkdir", action="store_true", help="create the missing folders of -o (default: off)")
    p.add_argument("--seed", type=count, default=0, help="the sampling seed: the same seed gives the same reply")
    p.add_argument("--max-tokens", type=count, default=None,
                   help="the most text tokens of the reply (default: the card's)")
    p.add_argument("--max-frames", type=count, default=None,
                   help="the most audio frames of the reply, 12.5 per second (default: the card's)")
    p.add_argument("--temperature", type=temperature, default=None,
                   help="the text's sampling temperature, 0 = greedy (default: greedy)")
    p.add_argument("--top-k", type=top_k, default=None, help="keep the k likeliest text tokens (default: all)")
    p.add_argument("--top-p", type=top_p, default=None,
                   help="keep the text tokens within this probability mass (default: 1)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line (default: off)")


def add_family_arguments(p: argparse.ArgumentParser) -> None:
    """Every installed family's own options (`v2.registry.family_options`), each saying whose it is; an option
    two families take says what it means for each (`family: help; other: help`)."""
    takers: dict[str, list[tuple[str, FamilyOption]]] = {}
    for family, options in family_options().items():
        for o in options:
            takers.setdefault(o.flag, []).append((family, o))
    for flag, owners in takers.items():
        lists = [o.choices for _, o in owners if o.choices is not None]
        choices = sorted({c for cs in lists for c in cs}) if len(lists) == len(owners) else None
        if len(owners) == 1:
            family, o = owners[0]
            text = f"{o.help} (the {family} family's)"
        else:
            text = "; ".join(f"{family}: {o.help}" for family, o in owners)
        p.add_argument(flag, dest=family_dest(flag), default=None, choices=choices, help=text)


def family_dest(flag: str) -> str:
    return "family_" + flag.lstrip("-").replace("-", "_")


def sampling_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The request's `sampling`: the knobs given, on the audio head (the stop head keeps the card's)."""
    audio = {k: v for k, v in (("temperature", args.temperature), ("top_k", args.top_k), ("top_p", args.top_p))
             if v is not None}
    sampling: dict[str, Any] = {"audio": audio} if audio else {}
    if args.repetition_penalty is not None:
        sampling["repetition_penalty"] = args.repetition_penalty
    return {"sampling": sampling} if sampling else {}
