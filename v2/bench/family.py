"""Which family a bench measures, and that family's bench package: found through the registry, never by name.

Owns: `family_bench(card)` / `bench_of(family)`: the family's bench module (`<its package>.bench`, a module or
a package), and `choose(card, family)`: the family a command measures (`--family NAME`, else the family of
`--card NAME|PATH`, else the default card's) with the card it was found from, `part(family, name)`: one
optional part (an attribute of the bench module, or its submodule `name`; None where it has none), and
`card_runtime`, the `runtime` part of a family whose card's own weights are what it benches. What a
family's bench package provides (each part optional except the first three):
- `runtime(card, *, device, random_weights) -> Runtime` (`card_runtime`: the card's own weights, for a family
  with no release-dimension random build), `request(family, text, *, seed, max_frames) -> dict`,
  `sequential(runtime, request) -> (codes [F, G], audio seconds, {part: wall seconds})` (`python -m v2.bench`);
- `overhead`: None, or what `v2.bench.overhead` needs to stand in for its experts (`instant_experts(runtime)`,
  a context manager; `one_row_requests(runtime, rows, *, frames)`);
- `fixed_batch(runtime, texts, *, frames) -> (requests, reference)`: requests that decode exactly `frames`
  frames each, and `reference(audio) -> [codes]`, its plain batched reference loop over the same prompts
  (`python -m v2.bench.engine`);
- `launches`: a module with `options(parser)` and `run(args) -> (fields, bucket rows)` (`python -m
  v2.bench.launches`);
- `reference`: a module with `ENV`, `PYTHON_ENV`, `check(path) -> why or ""` and `compare(path,
  python, *, frames, batch, repeat, log) -> report` (`python -m v2.bench.reference`).
Must not know: any family's name or its benches' contents.
"""

from __future__ import annotations

import argparse
from importlib import import_module
from types import ModuleType
from typing import Any

from v2.card import DEFAULT_CARD, CardError, ModelCard, load_card
from v2.registry import UnknownFamily, family_package


def bench_of(family: str) -> ModuleType:
    """Family `family`'s bench module (UnknownFamily naming the known ones for an unknown name)."""
    return import_module(family_package(family) + ".bench")


def family_bench(card: ModelCard) -> Any:
    """The card's family's bench module."""
    return bench_of(card.family)


def choose(card: str | None, family: str | None,
           parser: argparse.ArgumentParser | None = None) -> tuple[str, ModelCard | None]:
    """(the family a command measures, the card it came from or None): `family` if given, else `card`'s family
    (the default card's when neither is given). An unknown family or a bad card: `parser.error` naming the
    option, or the error itself without a parser."""
    try:
        if family is not None:
            family_package(family)  # refuse an unknown name, listing the known ones
            return family, None
        loaded = load_card(card or DEFAULT_CARD)
    except (UnknownFamily, CardError) as e:
        if parser is None:
            raise
        parser.error(f"--family {family}: {e}" if family is not None else f"--card: {e}")
    return loaded.family, loaded


def card_runtime(card: Any, *, device: str, random_weights: bool = False) -> Any:
    """A family bench's `runtime` where the family has no release-dimension random build: the card's own
    weights (`Runtime.from_card`; a tiny card's are seeded already); `random_weights` is refused."""
    from v2.runtime import Runtime

    if random_weights:
        raise ValueError("--random-weights: this card's family has no release-dimension random build here; "
                         "its tiny card is seeded already")
    return Runtime.from_card(card, device=device)


def part(family: str, name: str) -> Any:
    """The family's bench part `name` (`launches`, `reference`, ...), or None where it has none."""
    bench = bench_of(family)
    found = getattr(bench, name, None)
    if found is not None:
        return found
    try:
        return import_module(f"{bench.__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{bench.__name__}.{name}":
            raise
        return None
