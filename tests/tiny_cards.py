"""Every known family with its tiny card (seeded weights: no files, fast on a CPU), found through the registry
and the shipped cards, never by name: what the tests every family shares run over, so a family that ships a
tiny card is covered by them without an edit."""

from __future__ import annotations

from importlib import import_module

from v2.card import known_cards, load_card
from v2.registry import families


def tiny_cards() -> dict[str, str]:
    """family -> its shipped card with seeded weights (the first by name where it has several), for each
    family of the registry, in the families' order by name. A family without one is left out
    (`without_tiny_card` names them)."""
    known, out = families(), {}
    for name in known_cards():
        card = load_card(name)
        if card.seeded and card.family in known:
            out.setdefault(card.family, name)
    return dict(sorted(out.items()))


def without_tiny_card() -> list[str]:
    """The families of the registry that ship no card with seeded weights (the shared tests cannot run them)."""
    return sorted(set(families()) - set(tiny_cards()))


def speaks_given_text(family: str) -> bool:
    """Whether the family's requests speak a given text (`text`), as the speech routes, the WebSocket stream and
    open text need; a speaking chat model takes a conversation instead and speaks its own reply."""
    bound = import_module(f"{families()[family]}.family").FAMILY.bound
    return "text" in bound.request_fields


def speech_cards() -> dict[str, str]:
    """`tiny_cards()` of the families that speak a given text (the shared speech-surface tests run over them)."""
    return {f: card for f, card in tiny_cards().items() if speaks_given_text(f)}
