"""What one server instance holds: its settings (`ServerConfig`) and its live parts (`ServerState`).

Owns: the served model names (the card's name, `--served-model-name`, OpenAI's model names as aliases), the
API key, the origins allowed besides the server's own, body, input and batch limits, the reference-audio folder
allow-list, Retry-After, a WebSocket conversation's caps (turns, seconds of audio), whether the weights are
seeded noise (`seeded_noise`: from the card's `seeded` weight sources unless told), the settings read from
`v2 serve`'s options (`from_options`: one mapping for one runtime and for `--replicas`), and the state object
routes reach through `request.app.state.server`: the runtime, metrics, voice book, draining flag.
Must not know: routes, encoders, the engine's internals.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request

from v2.server.metrics import ServerMetrics
from v2.server.schema import OPENAI_MODELS, Limits
from v2.server.voices import VoiceBook


@dataclass(frozen=True)
class ServerConfig:
    model_names: tuple[str, ...]                 # accepted `model` values; the first is listed as the served model
    api_key: str | None = None                   # required as `Authorization: Bearer KEY` on /v1/* when set
    max_body_bytes: int = 16 * 2**20             # larger bodies: 413; also the cap on a `file://` reference
    max_input_chars: int = 4096                  # OpenAI's cap on `input`
    allowed_media_path: Path | None = None       # `file://` reference audio only under this folder
    retry_after_s: int = 1                       # Retry-After on a 429
    ws_config_timeout_s: float = 30.0            # a speech stream that sends no session.config within it is closed
    allowed_origins: tuple[str, ...] = ()        # origins besides the server's own that may POST/DELETE ("*": any)
    seeded_noise: bool | None = None             # the weights are seeded (noise); None: as the card says
    conversation_turns: int = 16                 # a WebSocket conversation's context: at most this many turns
    conversation_seconds: float = 120.0          # and this much of their audio (the oldest turns are dropped)
    max_batch_items: int = 32                    # items in one POST /v1/audio/speech/batch (more: 400 naming items)
    max_part_bytes: int = 2**20                  # a text field of the voice form (more: 400 naming the field)

    @classmethod
    def for_card(cls, card_name: str, *, served_names: list[str] | None = None, openai_aliases: bool = True,
                 **options: Any) -> "ServerConfig":
        names = list(served_names or [card_name])
        if card_name not in names:
            names.append(card_name)
        if openai_aliases:
            names += [n for n in OPENAI_MODELS if n not in names]
        if "allowed_origins" in options:  # as typed: "https://app.example/" is the origin https://app.example
            options["allowed_origins"] = tuple(o.strip().lower().rstrip("/") for o in options["allowed_origins"] or ())
        return cls(model_names=tuple(names), **options)

    @classmethod
    def from_options(cls, card_name: str, args: argparse.Namespace) -> "ServerConfig":
        """The settings `v2 serve`'s options (v2/server/options.py) give, the same with and without
        `--replicas`; the other options (host, port, drain, logging, device, checkpoints) are the launcher's."""
        return cls.for_card(card_name, served_names=args.served_model_name, openai_aliases=not args.no_openai_aliases,
                            api_key=args.api_key or None, max_body_bytes=int(args.max_body_mb * 2**20),
                            max_input_chars=args.max_input_chars, ws_config_timeout_s=args.ws_config_timeout,
                            conversation_turns=args.conversation_turns,
                            conversation_seconds=args.conversation_seconds,
                            max_batch_items=args.max_batch_items, allowed_media_path=args.allowed_local_media_path,
                            max_part_bytes=int(args.max_part_mb * 2**20),
                            allowed_origins=tuple(getattr(args, "allow_origin", None) or ()),
                            seeded_noise=False if args.checkpoint else None)  # given weights speak

    def seeded_for(self, runtime: Any) -> bool:
        """Whether `runtime` speaks with seeded (random) weights: as set here, else as its card says (a card
        with `seeded` weight sources draws its weights from them: noise, not speech)."""
        if self.seeded_noise is not None:
            return self.seeded_noise
        return bool(getattr(getattr(runtime, "card", None), "seeded", None))

    def limits(self) -> Limits:
        return Limits(self.model_names, self.max_input_chars, self.allowed_media_path,
                      max_reference_bytes=self.max_body_bytes)


@dataclass
class ServerState:
    runtime: Any
    config: ServerConfig
    metrics: ServerMetrics
    voices: VoiceBook
    native_rate: int                             # the runtime's audio: rate and channels (its codec's)
    native_channels: int
    seeded_noise: bool = False                   # the audio is seeded weights' noise (the playground plays it quieter)
    draining: bool = False                       # set on SIGTERM: new requests get 503
    extra: dict[str, Any] = field(default_factory=dict)


def server_state(request: Request) -> ServerState:
    return request.app.state.server  # type: ignore[no-any-return]
