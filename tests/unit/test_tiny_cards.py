"""The tests every family shares run over the registry's families by their tiny cards (tests/tiny_cards.py):
each family ships one, so none is left out of them."""

from __future__ import annotations

from tiny_cards import tiny_cards, without_tiny_card
from v2.card import load_card
from v2.registry import families


def test_every_family_of_the_registry_has_a_tiny_card():
    found = tiny_cards()
    assert without_tiny_card() == [] and set(found) == set(families())
    for family, name in found.items():
        card = load_card(name)
        assert card.family == family and card.seeded  # seeded weights: no files to fetch


def test_only_a_speaking_chat_family_is_left_out_of_the_speech_surface_tests():
    """A family whose requests take no `text` speaks its own reply to a conversation (`messages`): the speech
    routes refuse it (tests/server/test_chat_completions.py); no other family may drop out of those tests."""
    from importlib import import_module

    from tiny_cards import speech_cards

    for family in set(tiny_cards()) - set(speech_cards()):
        fields = import_module(f"{families()[family]}.family").FAMILY.bound.request_fields
        assert "messages" in fields and "text" not in fields, family
