"""Which model families this installation has: a family is a plugin, found by name.

Owns: the registry of families, name -> the package that holds it (`families()`, `family_package(name)`),
filled from three places, in this order: the packages under `v2.families` (the shipped ones, found by
walking that folder, never by name), every entry point of the group `v2.families` (an installed
distribution's `[project.entry-points."v2.families"]`: `name = "package"`), and `register(name, package)`
(the same hook, for a family that is importable but not installed, e.g. a test's). A family package holds
`card.py` (`CARD`), `family.py` (`FAMILY`), and optionally `recompute.py` (RL), `bench` (a module or a
package: its benchmarks, what v2/bench/family.py lists) and `options.py` (`OPTIONS`: the command-line
options of its own request fields, `FamilyOption`s; torch-free, read by `family_options`). Nothing else is imported until a card names its family.
Also the registry of added loops (a loop a card or a deployment adds to any family's graph, e.g. an aligner
of the audio): name -> "module:attr" of its factory, from the entry-point group `v2.added_loops` and
`register_added_loop` (`added_loop(name)` imports it).
Must not know: any family's name, cards' contents, the runtime.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import threading
from dataclasses import dataclass

GROUP = "v2.families"  # the entry-point group a family registers under

_lock = threading.Lock()
_registered: dict[str, str] = {}


@dataclass(frozen=True)
class FamilyOption:
    """A command-line option for one of a family's own request fields (`--speaker` -> `speaker`)."""

    flag: str
    field: str
    help: str
    choices: tuple[str, ...] | None = None


class UnknownFamily(LookupError):
    """A card names a family this installation does not have."""


def _shipped() -> dict[str, str]:
    import v2.families

    return {m.name: f"{v2.families.__name__}.{m.name}" for m in pkgutil.iter_modules(v2.families.__path__)
            if m.ispkg}


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=GROUP)}


def register(name: str, package: str) -> None:
    """Make family `name` known as the importable `package` (what an entry point says, without installing)."""
    if not name.isidentifier():
        raise ValueError(f"family name: {name!r} is not an identifier")
    with _lock:
        _registered[name] = package


def unregister(name: str) -> None:
    with _lock:
        _registered.pop(name, None)


def families() -> dict[str, str]:
    """Every known family: name -> package (a registered or installed one overrides a shipped one's name)."""
    with _lock:
        registered = dict(_registered)
    return {**_shipped(), **_entry_points(), **registered}


def family_package(name: object) -> str:
    """The package of family `name`; UnknownFamily naming the known ones otherwise."""
    known = families()
    if not isinstance(name, str) or name not in known:
        raise UnknownFamily(f"unknown family {name!r} (known: {', '.join(sorted(known))}; a family registers "
                            f"under the entry-point group {GROUP!r})")
    return known[name]


def family_options() -> dict[str, tuple[FamilyOption, ...]]:
    """Every known family's own command-line options (`<package>.options.OPTIONS`; none where it has none)."""
    out: dict[str, tuple[FamilyOption, ...]] = {}
    for name, package in sorted(families().items()):
        try:
            module = importlib.import_module(f"{package}.options")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.options":
                raise
            continue
        out[name] = tuple(getattr(module, "OPTIONS", ()))
    return out


# ----- added loops: loops a card or a deployment adds to any family's graph (v2/runtime/added.py) ----------
ADDED_GROUP = "v2.added_loops"  # the entry-point group an added loop registers under: `name = "module:attr"`

_added: dict[str, str] = {}


class UnknownAddedLoop(LookupError):
    """A card or an option names an added loop this installation does not have."""


def register_added_loop(name: str, target: str) -> None:
    """Make added loop `name` known as `target` ("module:attr", the attribute an `AddedLoopFactory`), as an
    entry point of the group `v2.added_loops` does for an installed distribution."""
    if not name.isidentifier():
        raise ValueError(f"added loop name: {name!r} is not an identifier")
    if ":" not in target:
        raise ValueError(f"added loop {name!r}: {target!r} is not 'module:attr'")
    with _lock:
        _added[name] = target


def unregister_added_loop(name: str) -> None:
    with _lock:
        _added.pop(name, None)


def added_loops() -> dict[str, str]:
    """Every known added loop: name -> "module:attr" (a registered one overrides an installed one's name)."""
    with _lock:
        registered = dict(_added)
    return {**{ep.name: ep.value for ep in importlib.metadata.entry_points(group=ADDED_GROUP)}, **registered}


def added_loop(name: str) -> object:
    """The factory of added loop `name`: a registered name, or "module:attr" (an operator's own code, given to
    `Runtime.from_card` or `serve --add-loop`; a card names registered loops only); UnknownAddedLoop naming the
    known ones otherwise. Its module is imported here: it should import no model (its `build` does)."""
    target = added_loops().get(name) or (name if ":" in name else None)
    if target is None:
        known = ", ".join(sorted(added_loops())) or "none"
        raise UnknownAddedLoop(f"unknown added loop {name!r} (known: {known}; an added loop registers under the "
                               f"entry-point group {ADDED_GROUP!r})")
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise UnknownAddedLoop(f"added loop {name!r}: {target!r} cannot be loaded ({type(e).__name__}: {e})") from None
