"""`v2 chat` reads the formats an `input_audio` part may name through the typed route the server's schema uses
(v2/card.py `TakesRecordings` / `input_audio_formats`: the family's class, before any model loads), not by
looking an attribute up by name: the chat card gives its family's list, a speech card none, and a family class
is read by the protocol alone."""

from __future__ import annotations

from types import SimpleNamespace

from v2 import card as cards
from v2.card import TakesRecordings, input_audio_formats, load_card
from v2.cli import chat
from v2.families.qwen3_omni.chat_audio import FORMATS
from v2.server.openapi_chat import ChatFamily


def test_the_cli_and_the_server_read_one_typed_route():
    assert chat.input_audio_formats is input_audio_formats
    assert TakesRecordings in ChatFamily.__mro__  # the schema's protocol of the bound family extends it
    assert input_audio_formats(load_card("qwen3_omni_tiny")) == FORMATS
    assert input_audio_formats(load_card("moss_tts_local_tiny")) == ()


def test_a_family_class_is_read_through_the_protocol(monkeypatch):
    class Takes:
        input_audio_formats = ("wav", "flac")

    class TakesNone:
        pass

    speech = load_card("moss_tts_local_tiny")
    for bound, formats in ((Takes, ("wav", "flac")), (TakesNone, ())):
        monkeypatch.setattr(cards, "family_of", lambda _card, b=bound: SimpleNamespace(bound=b))
        assert isinstance(bound, TakesRecordings) == bool(formats)
        assert input_audio_formats(speech) == formats
