"""Loops a card or a deployment adds to a family's graph, the family knowing nothing of them: their declaration
and its checks (torch-free).

Owns: `AddedLoopDecl` (a card's `[added_loops.<name>]`: `loop`, the registered added loop it runs; `after`,
the loop whose output it takes; `settings`, handed to the added loop's factory), `added_decls` (what
`Runtime.from_card(add_loops=...)` and `v2 serve --add-loop` give: `NAME`, `NAME=TARGET`, or declarations by
name) and `resolve_added`, which refuses, naming the field, what no engine could drive: an unknown added loop,
a name a loop of the card has, an `after` that names no driven loop (or a front loop), an edge the loop cannot
take (its `after` gives something other than what it `takes`; by default its `after` is the one loop of the
card that gives what it takes), a cycle among added loops, and a card naming code (`module:attr`) instead of
a registered name. The factories are found through `v2.registry.added_loop` (their module is imported to read
`takes` and `gives`; it builds nothing).
Must not know: the runtime, any family, what an added loop does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from v2.registry import UnknownAddedLoop, added_loop


class AddedLoopDecl(BaseModel):
    """`[added_loops.<name>]`: `loop` names a registered added loop (default: `<name>`); `after` the loop whose
    output it takes (a loop of the card's section or another added loop; default: the one loop that gives
    what it takes, e.g. the codec loop for "audio"); `settings` are its own, checked by its factory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loop: str | None = None
    after: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


CARD_FIELD = "added_loops"   # how refusals name a card's declarations
OPTION_FIELD = "add_loops"   # and a deployment's


@dataclass(frozen=True)
class ResolvedAdded:
    """An added loop checked against a card: its name, declaration, factory, and the loop it takes from (a
    loop name of the card's section, or an added loop's name: `after_added`)."""

    name: str
    decl: AddedLoopDecl
    factory: object
    after: str
    after_added: bool
    takes: str
    gives: str | None
    field: str = CARD_FIELD  # how refusals name its declaration


def added_decls(specs: Iterable[str] | Mapping[str, AddedLoopDecl | str]) -> dict[str, AddedLoopDecl]:
    """Declarations by name from what a deployment gives: `NAME` (a registered added loop of that name),
    `NAME=TARGET` (TARGET: a registered name or "module:attr"), or name -> declaration (or TARGET)."""
    out: dict[str, AddedLoopDecl] = {}
    specs = [specs] if isinstance(specs, str) else specs  # one name, not its letters
    items = specs.items() if isinstance(specs, Mapping) else ((s.partition("=")[0], s) for s in specs)
    for name, spec in items:
        name = name.strip()
        if isinstance(spec, str):
            target = spec.partition("=")[2].strip() if "=" in spec else spec.strip()
            spec = AddedLoopDecl(loop=target)
        if name in out:
            raise ValueError(f"{OPTION_FIELD}.{name}: added twice")
        out[name] = spec
    return out


def resolve_added(loops: Mapping[str, Any], decls: Mapping[str, AddedLoopDecl],
                  fields: Mapping[str, str] | None = None) -> list[ResolvedAdded]:
    """Check added loops against a card's declared loops (`loops`: name -> `LoopDecl`, front ones included) and
    return them in feeding order (an added loop after the added loop it takes from). `fields`: how refusals
    name each declaration, by name (`CARD_FIELD`, the default: a card's, whose `loop` must be a registered
    name, never code; `OPTION_FIELD`: a deployment's)."""
    fields = fields or {}
    field = lambda name: fields.get(name, CARD_FIELD)  # noqa: E731
    resolved: dict[str, ResolvedAdded] = {}
    driven = {n: d for n, d in loops.items() if not getattr(d, "front", False)}
    for name, decl in decls.items():
        where = f"{field(name)}.{name}"
        if not name.isidentifier():
            raise ValueError(f"{where}: {name!r} is not an identifier")
        if name in loops:
            raise ValueError(f"{where}: the card's section declares a loop of that name")
        target = decl.loop or name
        if field(name) == CARD_FIELD and ":" in target:
            raise ValueError(f"{where}.loop: a card names a registered added loop, never code ({target!r})")
        try:
            factory = added_loop(target)
        except UnknownAddedLoop as e:
            raise ValueError(f"{where}.loop: {e}") from None
        takes, gives = getattr(factory, "takes", None), getattr(factory, "gives", None)
        if not isinstance(takes, str) or not (gives is None or isinstance(gives, str)):
            raise ValueError(f"{where}.loop: {target!r} is no added loop (its factory says no `takes` it feeds on)")
        resolved[name] = ResolvedAdded(name, decl, factory, "", False, takes, gives)
    for name, r in list(resolved.items()):
        where = f"{field(name)}.{name}.after"
        after = r.decl.after
        if after is None:
            givers = [n for n, d in driven.items() if getattr(d, "gives", None) == r.takes]
            givers += [n for n, o in resolved.items() if o.gives == r.takes and n != name]
            if len(givers) != 1:
                found = f"several do ({', '.join(givers)}): name one" if givers else "none does"
                raise ValueError(f"{where}: it takes {r.takes} and no `after` is given, so one loop of the card must "
                                 f"give {r.takes}; {found}")
            after = givers[0]
        if after in driven:
            gives, what = getattr(driven[after], "gives", None), f"{after!r} ({driven[after].class_})"
        elif after in resolved:
            gives, what = resolved[after].gives, f"{after!r} (added loop {resolved[after].decl.loop or after!r})"
        else:
            known = ", ".join([*driven, *resolved])
            front = " runs before admission, outside the graph;" if after in loops else ""
            raise ValueError(f"{where}: {after!r}{front} no driven loop of that name (loops: {known})")
        if gives != r.takes:
            says = f"gives {gives}" if gives else "gives nothing another loop takes"
            raise ValueError(f"{where}: {what} {says}; {name!r} takes {r.takes}")
        resolved[name] = ResolvedAdded(name, r.decl, r.factory, after, after in resolved, r.takes, r.gives,
                                       field(name))
    order: list[ResolvedAdded] = []
    for name in resolved:
        path = [name]
        while resolved[path[-1]].after_added:
            up = resolved[path[-1]].after
            if up in path:
                cycle = [*path[path.index(up):], up]
                raise ValueError(f"{field(up)}.{up}.after: a cycle ({' -> '.join(reversed(cycle))}); a loop takes only "
                                 "from loops before it")
            path.append(up)
        for n in reversed(path):
            if all(o.name != n for o in order):
                order.append(resolved[n])
    return order
