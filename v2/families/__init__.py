"""Model families: one package per family, each holding everything model-specific.

Owns: the fixed table of the families this package ships (a card's `family` names one; no code is ever
imported from a card) and `family(name)`, which loads a family package on first use and returns its
its `FAMILY` (what binds a card and its experts into a `v2.runtime.family.Family`) or its card class.
Must not know: any family's contents; the runtime (which never imports this package's families).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

KNOWN = {"moss_tts_local": "v2.families.moss_tts_local"}  # name -> package (its `family` and `card` modules)


def _package(name: Any) -> str:
    if name not in KNOWN:
        raise ValueError(f"family: unknown family {name!r} (known: {', '.join(sorted(KNOWN))})")
    return KNOWN[name]


def family(name: str) -> Any:
    """The family a card names (its package's `family.FAMILY`); an unknown name is a `ValueError` naming
    the known ones."""
    return import_module(_package(name) + ".family").FAMILY


def family_card(name: Any) -> Any:
    """The card class of the family `name` (its package's `card.CARD`; torch-free)."""
    return import_module(_package(name) + ".card").CARD
