"""A WebSocket session's conversation (a family that takes `context`): the turns it holds, made ready once.

Owns: `config_turns` (a `session.config`'s `context`: its stored voices looked up, its recordings encoded),
`appended_turn` (a `context.append` message -> its turn, refusals naming the message's field: `audio`,
`voice`, `text`, ...), `encoded` (a turn's recording as codes through `rt.encode_audio`, the family's own
front path, once: the conversation holds codes, so no utterance encodes a recording again), and `bounded`
(the server's caps on what a session holds: turns, seconds of their audio; the oldest dropped).
Must not know: the engine, the WebSocket's messages beyond a turn's, any family or its request fields.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from v2.errors import RequestError
from v2.params import ContextTurn, ResolvedTurn
from v2.server.errors import ApiError
from v2.server.schema import SpeechPlan, context_turns, read_turn
from v2.server.state import ServerState


def config_turns(st: ServerState, p: SpeechPlan) -> tuple[ResolvedTurn, ...] | None:
    """A config's `context` (None: not given), its recordings as codes; refusals name `context`."""
    turns = context_turns(p.context, st.voices.turn_voice)
    if turns is None:
        return None
    return tuple(encoded(st, t, f"context[{i}].audio", "context") for i, t in enumerate(turns))


def appended_turn(st: ServerState, msg: dict[str, Any]) -> ResolvedTurn:
    """A `context.append` message -> the turn (its audio encoded, its stored voice looked up); refusals name
    the message's field."""
    try:
        turn = ContextTurn.model_validate({k: v for k, v in msg.items() if k != "type"})
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "message"
        raise ApiError(400, f"{name}: {err['msg']}", param=name, code="invalid_value") from None
    data = read_turn(turn, st.config.limits())
    try:  # a stored voice: named as the message's `voice`
        turns = context_turns(((turn, data),), lambda name, _: st.voices.turn_voice(name, "voice"))
    except ApiError as e:
        e.param = "voice"
        raise
    assert turns is not None
    return encoded(st, turns[0], "audio", "audio")


def encoded(st: ServerState, turn: ResolvedTurn, name: str, param: str) -> ResolvedTurn:
    """`turn` with its recording as codes (`rt.encode_audio`, as a request's front work encodes it)."""
    if turn.audio is None:
        return turn
    try:
        codes = st.runtime.encode_audio(turn.audio, timeout=120)
    except RequestError as e:
        why = str(e)[len(e.field) + 2:] if e.field and str(e).startswith(f"{e.field}: ") else str(e)
        raise ApiError(400, f"{name}: {why}", param=param, code="invalid_value") from None
    except (RuntimeError, TimeoutError) as e:
        raise ApiError(503, f"{name}: not encoded ({e})", param=param, code="shutting_down") from None
    return replace(turn, audio=None, codes=codes)


def bounded(turns: list[ResolvedTurn], cap: int, seconds: float, frame_rate: float) -> list[ResolvedTurn]:
    """`turns` less its oldest beyond `cap` turns and `seconds` of their audio (frames / `frame_rate`)."""
    while turns and (len(turns) > cap or sum(len(t.codes) for t in turns if t.codes is not None) / frame_rate > seconds):
        turns = turns[1:]
    return turns
