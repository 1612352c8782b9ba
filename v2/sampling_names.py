"""A request's nested `sampling` (what HTTP, the command line and rollouts send) onto a family's flat names: the
parts every family whose request takes flat sampling names shares.

Owns: `KNOBS` (a head's knobs: temperature, top_k, top_p), `Head` (one head's knobs, each checked as a
request's: `v2.fields`; a knob left out is the card's), and `unfold(fields, given)`: `fields` with
`sampling` moved onto the flat names, where the family's `given(raw)` checks the nested value (refusing
what it does not take, naming the dotted field) and says which flat field each knob it sets fills and
the dotted name it came from; a knob given both nested and flat is refused naming the nested one.
Must not know: any family's names, the engine, cards, checkpoints.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from v2.errors import RequestError
from v2.fields import Temperature, TopK, TopP

KNOBS = ("temperature", "top_k", "top_p")
Given = dict[str, tuple[str, Any]]  # flat field -> (the dotted name it came from, its value)


class Head(BaseModel):
    """One head's knobs; a knob left out is the card's."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None


def unfold(fields: dict[str, Any], given: Callable[[Any], Given]) -> dict[str, Any]:
    """`fields` with `sampling` moved onto the flat names (a copy; the caller's dict is not changed); `given`
    is called with the nested value when there is one (not None)."""
    if "sampling" not in fields:
        return fields
    out = {k: v for k, v in fields.items() if k != "sampling"}
    raw = fields["sampling"]
    if raw is None:
        return out
    for flat, (label, value) in given(raw).items():
        if out.get(flat) is not None:
            raise RequestError(f"{label}: give {label} or {flat}, not both", field=label)
        out[flat] = value
    return out
