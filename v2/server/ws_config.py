"""A speech-stream session's config: a `session.config` message checked as REST checks a body, and the
`session.ready` event that says what was taken.

Owns: `Config` (the parsed params, what the server resolved of them, the family's mapping, the output spec,
`stream_audio`, the split and whether audio starts before `input.done`: `incremental`, true only where the
client asks for it and the family speaks a sentence before its text has ended; `timestamps`, each sentence's
words sent, and `aligner`: every utterance aligned where the runtime has an aligner), `configure(st, msg)` (REST's
parsing and planning, refusals naming the field; the family's own checks come when the session opens the
utterance's request with it, before `session.ready`) and `ready(config)` (the event).
Must not know: the WebSocket, the session's other state, the engine, any family or its request fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from v2.params import FamilyParams, Resolved, ResolvedTurn, SpeechParams
from v2.server.audio import OutputSpec
from v2.server.conversation import config_turns
from v2.server.errors import ApiError
from v2.server.schema import family_params, param_names, parse_body, plan, resolved
from v2.server.state import ServerState
from v2.server.timestamps import ask, has_aligner, refuse_without

SPLITS = ("none", "sentence", "clause")
OURS = ("stream_audio", "split_granularity", "word_timestamps")  # the stream's own config fields (not REST's)


@dataclass(frozen=True)
class Config:
    params: SpeechParams      # the config, as REST parses it
    given: Resolved           # what the server resolved of it, less the context (the session's, per utterance)
    family: FamilyParams
    spec: OutputSpec
    stream_audio: bool
    split: str                # the runtime's split ("sentence" / "clause")
    granularity: str          # the client's split_granularity ("none": held until input.done)
    incremental: bool         # audio may start before input.done (pieces fed as they come, and the family
                              # speaks sentences while the text is written)
    names: dict[str, str]     # the family's request fields -> the parameters the client sent
    context: tuple[ResolvedTurn, ...] | None = None  # the config's `context`, its audio encoded (None: not given)
    aligner: bool = False     # the runtime has an aligner: every utterance is aligned (a barge-in's words)
    vllm_words: bool = False  # vllm-omni's `word_timestamps`: audio and words as its `audio.chunk` events

    @property
    def timestamps(self) -> bool:
        """The client asked for each sentence's words (`speech.timestamps` events, or vllm-omni's shape)."""
        return self.params.timestamps is not None or self.vllm_words

    @property
    def takes_context(self) -> bool:
        return "context" in self.family.takes

    @property
    def feeds_as_written(self) -> bool:
        """Pieces go to the request as they come (False: held until input.done)."""
        return self.granularity != "none"

    def request(self, context: tuple[ResolvedTurn, ...] | None) -> dict[str, Any]:
        """The family's request fields, less its text, with `context` (None: none); aligned wherever the runtime
        has an aligner, asked or not (what a barge-in's acknowledgement says the listener heard)."""
        return ask(self.family.request(self.params, replace(self.given, context=context)), self.aligner)


def configure(st: ServerState, msg: dict[str, Any]) -> Config:
    """A `session.config` message -> the session's config (REST's parsing and planning; ApiError names the
    field). Its recordings are read and a context's encoded here: call it off the event loop."""
    ours = {k: msg[k] for k in OURS if k in msg}
    fields = {k: v for k, v in msg.items() if k not in ("type", *ours)}
    if "input" in fields:
        raise ApiError(400, "input: the text comes in input.text messages", param="input", code="invalid_value")
    stream_audio, split = ours.get("stream_audio", False), ours.get("split_granularity", "sentence")
    if not isinstance(stream_audio, bool):
        raise ApiError(400, "stream_audio: must be true or false", param="stream_audio", code="invalid_value")
    if not isinstance(split, str) or split not in SPLITS:
        raise ApiError(400, f"split_granularity: one of {', '.join(SPLITS)}", param="split_granularity",
                       code="invalid_value")
    if not hasattr(st.runtime, "open"):
        raise ApiError(400, "type: this server's runtime does not take text as it is written", param="type",
                       code="unsupported")
    family = family_params(st.runtime)
    p = plan(parse_body({**fields, "input": "."}), st.config.limits(), native_rate=st.native_rate,
             native_channels=st.native_channels, takes=family.takes)
    aligner = has_aligner(st.runtime)
    refuse_without(p.params, aligner)  # `timestamps` asked of a server without an aligner
    vllm = ours.get("word_timestamps", False)
    if not isinstance(vllm, bool) or vllm and not (aligner and stream_audio and p.spec.format == "pcm"):
        why = "true or false" if not isinstance(vllm, bool) else "this server has no aligner (v2 serve --aligner " \
            "NAME)" if not aligner else "it needs stream_audio true and response_format pcm (as vllm-omni's)"
        raise ApiError(400, f"word_timestamps: {why}", param="word_timestamps", code="invalid_value")
    if stream_audio and p.spec.format != "pcm":
        raise ApiError(400, "stream_audio: streamed sentences are raw pcm (response_format: pcm)",
                       param="stream_audio", code="invalid_value")
    # a speaker of the checkpoint, a stored voice, or neither; the text comes in input.text messages
    given = resolved(replace(p, context=None), st.voices.voice_fields(p.voice), stream=True, text_later=True)
    return Config(p.params, given, family, p.spec, stream_audio, "sentence" if split == "none" else split, split,
                  split != "none" and family.speaks_while_written,
                  {**param_names(family, p.params), "timestamps": "timestamps"}, config_turns(st, p), aligner, vllm)


def ready(c: Config) -> dict[str, Any]:
    """The `session.ready` event for a config taken."""
    return {"type": "session.ready", "incremental": c.incremental, "stream_audio": c.stream_audio,
            "format": c.spec.format, "sample_rate": c.spec.sample_rate, "channels": c.spec.channels,
            "split_granularity": c.granularity}
