"""CSM's own command-line options (found by `v2.registry.family_options`; no torch here)."""

from __future__ import annotations

from v2.registry import FamilyOption

OPTIONS = (
    FamilyOption("--speaker", "speaker", "the speaker id the turn is spoken as, e.g. 0 (default: the card's)"),
)
