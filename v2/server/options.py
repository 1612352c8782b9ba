"""The options of `python -m v2 serve`, with nothing but argparse behind them.

Owns: the option names, defaults and help. The command line builds its parser from here without
importing the server's dependencies (they are an optional extra).
Must not know: the server, the runtime.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable

from v2.aligner.card import ALIGNER_HELP
from v2.card import DEFAULT_CARD


def _whole(least: int) -> Callable[[str], int]:
    """A whole number of at least `least`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse


def _within(unit: str, most: float) -> Callable[[str], float]:
    """A number of `unit` in (0, most]; NaN and inf fail too."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {text!r}") from None
        if not 0 < value <= most:
            raise argparse.ArgumentTypeError(f"must lie in (0, {most:.15g}] {unit}, got {text}")
        return value
    return parse


_positive, _count = _whole(1), _whole(0)
_seconds, _megabytes = _within("seconds", 86400), _within("MiB", 2**20)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--card", default=DEFAULT_CARD, help="card name in cards/ or a path to a card file")
    p.add_argument("--checkpoint", default=None, help="model checkpoint directory (overrides the card's)")
    p.add_argument("--codec-checkpoint", default=None, help="codec checkpoint directory (overrides the card's)")
    p.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (the URL printed says which)")
    p.add_argument("--api-key", default=os.environ.get("V2_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/* (default: $V2_API_KEY, else none)")
    p.add_argument("--allow-origin", nargs="+", default=[], metavar="ORIGIN",
                   help="web origins besides the server's own (e.g. https://app.example) whose pages may POST or "
                        "DELETE through a browser; '*' allows any (default: none, so another site's page cannot "
                        "store voices or use the server through the user's browser)")
    p.add_argument("--served-model-name", nargs="+", default=None,
                   help="names clients may give as `model` (default: the card's name)")
    p.add_argument("--no-openai-aliases", action="store_true",
                   help="refuse OpenAI's model names (tts-1, tts-1-hd, gpt-4o-mini-tts) instead of serving them")
    p.add_argument("--drain-timeout", type=float, default=30.0,
                   help="seconds in-flight requests may run on after SIGTERM before they are aborted")
    p.add_argument("--max-body-mb", type=float, default=16.0, help="larger request bodies get 413")
    p.add_argument("--max-part-mb", type=_megabytes, default=1.0,
                   help="the most a text field of POST /v1/audio/voices (name, ref_text, speaker_embedding) may "
                        "hold; more get 400 naming the field (default: 1, ample for any speaker encoder's width)")
    p.add_argument("--max-input-chars", type=int, default=4096, help="longer `input` gets 400 (OpenAI's cap)")
    p.add_argument("--max-batch-items", type=_positive, default=32,
                   help="the most items one POST /v1/audio/speech/batch may hold; more get 400 naming `items` "
                        "(with --max-input-chars and --max-body-mb: what one batch may cost)")
    p.add_argument("--ws-config-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                   help="a /v1/audio/speech/stream connection that sends no session.config within this is sent an "
                        "error (code config_timeout) and closed (default: 30)")
    p.add_argument("--conversation-turns", type=_count, default=16, metavar="N",
                   help="a /v1/audio/speech/stream conversation (a model that takes context) holds at most N "
                        "earlier turns, the oldest dropped (0: each utterance spoken without the ones before)")
    p.add_argument("--conversation-seconds", type=_seconds, default=120.0, metavar="SECONDS",
                   help="and at most this much of their audio, the oldest turns dropped (default: 120)")
    p.add_argument("--allowed-local-media-path", type=Path, default=None,
                   help="folder that file:// reference audio may be read from (default: none)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--no-access-log", action="store_true")
    p.add_argument("--add-loop", action="append", default=[], metavar="NAME[=TARGET]",
                   help="add a loop to the card's graph that its family knows nothing of (e.g. an aligner of the "
                        "audio): a registered added loop (entry-point group v2.added_loops) by NAME, or NAME=TARGET "
                        "(a registered name or module:attr); repeatable; each replica adds it too")
    p.add_argument("--aligner", default=None, metavar="ALIGNER", help=ALIGNER_HELP)
    p.add_argument("--replicas", type=int, default=None,
                   help="serve N runtime replicas behind one endpoint on Ray Serve (needs the ray extra; "
                        "default: one runtime in this process)")
    p.add_argument("--ray-logs", action="store_true",
                   help="with --replicas: show Ray's own console output here (its banner, the replicas' and Serve's "
                        "log lines); by default they stay in Ray's session folder")
