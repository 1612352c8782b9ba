"""The runtime's voice store as the server uses it, and which voice a request speaks with.

Owns: detecting the store (`rt.voices` with `add(name, audio, text=..., replace=...)` raising the store's
`VoiceExists` for a taken name, `list()`, `get(name)`, `remove(name)`, and a `voice` request field); the
checkpoint's built-in speakers (`rt.speakers`, empty for a family without them); listing voices for `GET
/v1/audio/voices` (speakers, stored ones, then OpenAI's built-in names, which speak with the card's default
voice unless a stored voice has that name; on a chat card its speakers alone, the voices chat takes); resolving
a request's `voice` (a speaker's name, any case, is the `speaker` field; else a stored voice; else an OpenAI
name; else a 400 whose message lists the stored voices and the speakers apart); a context turn's stored voice
(`turn_voice`: its codes and transcript, the turn's audio and text); adding, from a recording or a precomputed
speaker embedding (a taken name, or a speaker's, is a 409 unless replacing a stored one), and removing. Every
call may touch disk: run them off the event loop.
Must not know: HTTP, FastAPI, audio encoding.
"""

from __future__ import annotations

from typing import Any

from v2.voices.store import VoiceExists
from v2.server.chat_schema import is_chat_card
from v2.server.errors import ApiError
from v2.server.schema import NO_CLONING, OPENAI_VOICES, family_params, runtime_supports


class VoiceBook:
    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    @property
    def store(self) -> Any | None:
        """The runtime's voice store, or None where the runtime has none (or its family takes no stored voice)."""
        store = getattr(self._runtime, "voices", None)
        takes = runtime_supports("voice") and "voice" in family_params(self._runtime).takes
        return store if store is not None and takes else None

    @property
    def speakers(self) -> tuple[str, ...]:
        """The checkpoint's built-in speakers (`speaker` request values), as the runtime spells them."""
        return tuple(getattr(self._runtime, "speakers", None) or ())

    def speaker(self, name: str) -> str | None:
        """The speaker `name` names, case-insensitively, or None."""
        return next((s for s in self.speakers if s.casefold() == name.casefold()), None)

    def stored_names(self) -> list[str]:
        store = self.store
        if store is None:
            return []
        return sorted(_name_of(v) for v in store.list())

    def has(self, name: str) -> bool:
        store = self.store
        if store is None:
            return False
        try:
            return store.get(name) is not None
        except (KeyError, LookupError, ValueError):
            return False

    def listing(self) -> list[dict[str, Any]]:
        """The voices a request may name: the speakers, the stored voices, OpenAI's names not shadowed; on a chat
        card the speakers alone (the voices its `audio.voice` takes: it stores none, and refuses OpenAI's)."""
        entries = [{"id": n, "name": n, "kind": "speaker"} for n in self.speakers]
        if is_chat_card(getattr(self._runtime, "request_fields", ())):
            return entries
        stored = self.stored_names()
        entries += [{"id": n, "name": n, "kind": "stored"} for n in stored]
        entries += [{"id": n, "name": n, "kind": "builtin"} for n in OPENAI_VOICES
                    if n not in stored and self.speaker(n) is None]
        return entries

    def voice_fields(self, voice: str | None) -> dict[str, str]:
        """What a `voice` names (`v2.params.Resolved`'s fields): {"speaker": its name} for a speaker of the
        checkpoint, {"voice": name} for a stored voice, {} for an OpenAI name or none (the card's default voice)."""
        if voice is not None and (speaker := self.speaker(voice)) is not None:
            return {"speaker": speaker}
        stored = self.resolve(voice)
        return {"voice": stored} if stored is not None else {}

    def resolve(self, voice: str | None) -> str | None:
        """The stored voice to put in the request, or None: a speaker (`voice_fields` maps it), an OpenAI
        name or none (the card's default voice)."""
        if voice is None or self.speaker(voice) is not None:
            return None
        if self.has(voice):
            return voice
        if voice in OPENAI_VOICES:
            return None
        raise ApiError(400, self.unknown_voice_message(voice), param="voice", code="voice_not_found")

    def turn_voice(self, name: str, where: str) -> tuple[Any, str]:
        """A context turn's stored voice (`where`: the turn's place in the request, e.g. `context[1].voice`) ->
        (its codes, its transcript): the turn's audio and text. Refused naming `context`: no store, no such
        voice (the stored names listed), a voice stored without its transcript."""
        store = self.store
        if store is None:
            raise ApiError(400, f"{where}: {name!r} is not a voice here; this runtime has no voice store",
                           param="context", code="voice_not_found")
        try:
            voice = store.get(name)
        except (KeyError, LookupError, ValueError):
            voice = None
        if voice is None:
            stored = self.stored_names()
            raise ApiError(400, f"{where}: no stored voice named {name!r} "
                           f"({'stored: ' + ', '.join(stored) if stored else 'none stored'})", param="context",
                           code="voice_not_found")
        if not voice.text:
            raise ApiError(400, f"{where}: the stored voice {name!r} has no transcript, and a turn is what was said "
                           "as well as how it sounded (store it with its text, or give text with audio)",
                           param="context", code="invalid_value")
        return voice.codes, voice.text

    def unknown_voice_message(self, voice: str) -> str:
        """Why `voice` names nothing, each kind of name apart: the stored voices (or that there is no store),
        the checkpoint's built-in speakers (which `voice` names too, in any case), OpenAI's names."""
        if self.store is None:
            parts = [f"voice: {voice!r} is not a voice here; this runtime has no voice store"]
        else:
            stored = self.stored_names()
            parts = [f"voice: no stored voice named {voice!r} "
                     f"({'stored: ' + ', '.join(stored) if stored else 'none stored'})"]
        if self.speakers:
            parts.append(f"this checkpoint's built-in speakers, which voice takes as well (any case): "
                         f"{', '.join(self.speakers)}")
        parts.append(f"OpenAI's voice names ({', '.join(OPENAI_VOICES)}) speak with the card's default voice")
        return "; ".join(parts)

    def add(self, name: str, audio: bytes | None, text: str | None, replace: bool = False,
            speaker_embedding: list[float] | None = None) -> None:
        """A voice from a recording (`audio`) or a precomputed `speaker_embedding` (the family decides whether
        its voices can be one: refused naming `speaker_embedding` with the reason). A taken name is a 409
        naming `name` unless `replace`; the store refuses it under its own lock, so two servers on one store
        directory cannot both take the name."""
        store = self._require("audio_sample" if speaker_embedding is None else "speaker_embedding")
        if self.speaker(name) is not None:  # `voice` would name the speaker, never this voice
            raise ApiError(409, f"name: {name!r} is a built-in speaker of this checkpoint; choose another name",
                           param="name", code="voice_exists")
        try:
            if speaker_embedding is not None:
                store.add(name, speaker_embedding=speaker_embedding, text=text, replace=replace)
            else:
                store.add(name, audio, text=text, replace=replace)
        except VoiceExists:
            raise ApiError(409, f"name: a voice named {name!r} is stored already; send the form field "
                           "replace=true to replace it", param="name", code="voice_exists") from None
        except (ValueError, TypeError, KeyError) as e:
            message = str(e.args[0]) if e.args else type(e).__name__
            field = getattr(e, "field", None)  # the store's errors say what is wrong; anything else is the audio's
            param = {"name": "name", "voice": "name", "text": "ref_text",
                     "speaker_embedding": "speaker_embedding"}.get(field or "", "audio_sample")
            if field and field != param and message.startswith(f"{field}:"):  # the store's name -> the form's
                message = param + message[len(field):]
            raise ApiError(400, message, param=param, code="invalid_value") from None

    def remove(self, name: str) -> None:
        store = self._require("name")
        try:
            found = store.get(name) is not None
        except (KeyError, LookupError, ValueError):
            found = False
        if not found:
            raise ApiError(404, f"name: no stored voice {name!r}", param="name", code="voice_not_found")
        store.remove(name)

    def _require(self, param: str) -> Any:
        store = self.store
        if store is None:
            raise ApiError(400, f"{param}: {NO_CLONING}", param=param, code="unsupported")
        return store


def _name_of(entry: Any) -> str:
    """A listed voice: a name, a mapping with "name", or an object with `.name`."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        return str(entry["name"])
    return str(entry.name)
