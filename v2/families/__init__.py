"""Model families: one package per family, each holding everything model-specific.

Owns: the fixed table of the families this package ships (a card's `family` names one; no code is ever
imported from a card) and `family(name)`, which loads a family package on first use and returns its
`FAMILY` (a `v2.runtime.family.Family`).
Must not know: any family's contents; the runtime (which never imports this package's families).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

KNOWN = {"moss_tts_local": "v2.families.moss_tts_local.family"}


def family(name: str) -> Any:
    """The family a card names; an unknown name is a `ValueError` naming the known ones."""
    if name not in KNOWN:
        raise ValueError(f"family: unknown family {name!r} (known: {', '.join(sorted(KNOWN))})")
    return import_module(KNOWN[name]).FAMILY
