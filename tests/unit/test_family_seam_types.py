"""A family's side of the seam is typed with the seam's own types (v2/runtime/family.py: `Request`, `Prepared`,
`RequestRecord`, `FrontState`, `FinishReason`, `SpeechResult`, `Voice`) and its experts' classes, not `Any`:
what is left is what is free-form by nature (a generation_config.json's values, loop outputs by loop name)."""

from __future__ import annotations

import ast
from pathlib import Path

import v2

FAMILIES = Path(v2.__file__).parent / "families"
PER_FAMILY, ALL = 6, 20  # the bound per family.py, and over the shipped families together


def _any_uses(path: Path) -> int:
    """`Any` as used in annotations and expressions (its import not counted)."""
    return sum(1 for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Name) and node.id == "Any")


def test_the_families_type_their_side_of_the_seam():
    counts = {p.parent.name: _any_uses(p) for p in sorted(FAMILIES.glob("*/family.py"))}
    assert len(counts) >= 3, counts
    assert all(n <= PER_FAMILY for n in counts.values()) and sum(counts.values()) <= ALL, counts
