"""Model cards: the data files in `cards/` validated into frozen models, and building what they name.

Owns: the common part of the card schema (`ModelCard`: name, `family`, seeded weight sources, runtime
settings, the loops a card adds to its family's graph, `added_loops`, checked by v2/card_added.py; its checks
of the whole card: the graph its family's `loops` section declares, a paged loop's `expert`, that a seeded
expert names a seeded table), finding a card by
name (the shipped cards are package data, `v2/cards/` in an installed package, the top-level `cards/` in a
checkout) or path, validating it with its family's card class
(its family found by name in the registry, v2/registry.py; each family's section: its experts and loops),
finding a card's family
(`family_of`) and what its class says before a model loads (`input_audio_formats`, typed by `TakesRecordings`:
the server's schema reads the same protocol of the bound family), refusing a bad card with the field named,
and building the experts a card names through its family's section. No code is ever imported from a card.
The schema's parts are re-exported here: a loop's declaration `LoopDecl`, a family's loop section
`LoopTable` and the checks of the graph it declares, `PagedLoopDecl`, `ChunkLoopDecl` (v2/card_loops.py);
the frozen base, seeded weights, sampling defaults' schema, `RuntimeSettings` (v2/card_sections.py).
Must not know: the runtime, requests, scheduling, any family's section.
"""

from __future__ import annotations

import re
import tomllib
from importlib import import_module
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from v2.card_added import AddedLoopDecl, resolve_added
from v2.card_loops import ChunkLoopDecl, LoopDecl, LoopTable, PagedLoopDecl  # re-exported: card_loops.py's
from v2.card_sections import (  # re-exported: card_sections.py's
    DType, HeadDefaults, RuntimeSettings, SamplingDefaults, SeededWeights, StageSampling, _Frozen, check_buckets,
)
from v2.registry import UnknownFamily, family_package


def _cards_dir() -> Traversable:
    """The shipped cards: `v2/cards/` inside an installed wheel, else the checkout's top-level `cards/` (a plain
    checkout or an editable install)."""
    packaged = resources.files("v2").joinpath("cards")
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "cards"


CARDS_DIR = _cards_dir()


_KIND = re.compile(r'(?m)^kind\s*=\s*"(\w+)"')


def card_kind(text: str) -> str | None:
    """A card file's `kind` before its first table (None: a speech card; "aligner": an aligner's card, read by
    v2/aligner/card.py, never by `load_card`)."""
    found = _KIND.search(re.split(r"(?m)^\s*\[", text, maxsplit=1)[0])
    return found.group(1) if found else None


def known_cards() -> list[str]:
    """The names of the shipped speech cards, sorted (an aligner's card, `kind = "aligner"`, is none)."""
    return sorted(f.name[: -len(".toml")] for f in CARDS_DIR.iterdir()
                  if f.name.endswith(".toml") and card_kind(f.read_text()) is None)


def _default_card(key: str = "default") -> str:
    """The shipped card that says `<key> = true` among its top-level keys (data, not code: the first such card
    by name; for `default`, else the first card by name). Read without parsing the cards (a seeded card's TOML
    takes milliseconds to parse); `ModelCard.default` / `default_chat` validate the key when a card is loaded."""
    names = known_cards()
    for name in names:
        top = re.split(r"(?m)^\s*\[", CARDS_DIR.joinpath(f"{name}.toml").read_text(), maxsplit=1)[0]
        if re.search(rf"(?m)^{key}\s*=\s*true\s*(#.*)?$", top):
            return name
    return names[0] if names and key == "default" else ""


DEFAULT_CARD = _default_card()  # the card a command or a runtime uses when none is named
DEFAULT_CHAT_CARD = _default_card("default_chat")  # `v2 chat`'s card when none is named ("" when none ships)
SEED_PREFIX = "seed:"


class CardError(ValueError):
    """A card cannot be found or is invalid; the message names the card and the field."""


class ModelCard(_Frozen):
    """The common part of every card; `family` names the family whose section (experts, loops) the rest is
    (a family's card class subclasses this one). Loaded cards are always a family's class."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    name: str
    family: str
    description: str = ""
    default: bool = False  # the shipped card used when none is named (DEFAULT_CARD): exactly one says so
    default_chat: bool = False  # the shipped chat card `v2 chat` uses when none is named (DEFAULT_CHAT_CARD)
    runtime: RuntimeSettings = RuntimeSettings()
    seeded: dict[str, SeededWeights] = Field(default_factory=dict)
    # loops added to the family's graph, the family knowing nothing of them (v2/card_added.py), by name
    added_loops: dict[str, AddedLoopDecl] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _graph(self) -> "ModelCard":
        """The loop graph a family's section declares (its `loops`, a `LoopTable`) is one its loops can make,
        and so is each loop it adds (`added_loops`); a paged loop's `expert` names an expert of the card."""
        loops = self.__dict__.get("loops")
        if isinstance(loops, LoopTable):
            loops.check()
            experts = self.__dict__.get("experts")
            names = type(experts).model_fields if isinstance(experts, BaseModel) else None
            for name, d in loops.declared().items():
                expert = getattr(d, "expert", None)
                if names is not None and expert is not None and expert not in names:
                    raise ValueError(f"loops.{name}.expert: no expert {expert!r} (experts: {', '.join(names)})")
        if self.added_loops:
            resolve_added(loops.declared() if isinstance(loops, LoopTable) else {}, self.added_loops)
        return self

    @model_validator(mode="after")
    def _seeded_sources(self) -> "ModelCard":
        """Every expert whose `checkpoint` is `seed:NAME` (a family's `experts` section, in its order) names a
        `[seeded.NAME]` table of this card."""
        experts = self.__dict__.get("experts")
        for name in type(experts).model_fields if isinstance(experts, BaseModel) else ():
            ckpt = getattr(getattr(experts, name), "checkpoint", None)
            table = ckpt[len(SEED_PREFIX):] if isinstance(ckpt, str) and ckpt.startswith(SEED_PREFIX) else None
            if table is not None and table not in self.seeded:
                raise ValueError(f"experts.{name}.checkpoint: {ckpt!r} names no [seeded.{table}] table")
        return self


def card_path(name_or_path: str | Path) -> Path | Traversable:
    """A shipped card's name (with or without .toml) or a path to a card file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return p
    candidate = CARDS_DIR.joinpath(f"{p.stem if p.suffix == '.toml' else name_or_path}.toml")
    if candidate.is_file():
        return candidate
    raise CardError(f"card {str(name_or_path)!r} not found (known cards: {', '.join(known_cards())})")


def load_card(name_or_path: str | Path = DEFAULT_CARD) -> ModelCard:
    path = card_path(name_or_path)
    text = path.read_text()
    if card_kind(text) is not None:
        raise CardError(f"card {path.name}: kind {card_kind(text)!r}, not a speech card (an aligner card is "
                        "added to a speech card: Runtime.from_card(card, aligner=...), v2 serve --aligner)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CardError(f"card {path.name}: not valid TOML ({e})") from e
    try:
        return card_class(data.get("family")).model_validate(data)
    except ValidationError as e:
        fields = "; ".join(_message(err["loc"], err["msg"]) for err in e.errors())
        raise CardError(f"card {path.name}: {fields}") from None


def _message(loc: tuple[int | str, ...], msg: str) -> str:
    """One refusal as `field: reason` (a check of the whole card names its field in the reason)."""
    msg = msg.removeprefix("Value error, ")
    return f"{'.'.join(str(x) for x in loc)}: {msg}" if loc else msg


def _family_package(name: Any) -> str:
    try:
        return family_package(name)
    except UnknownFamily as e:
        raise CardError(f"family: {e}") from None


def card_class(family: Any) -> type[ModelCard]:
    """The card class of the family a card names (its package's `card.CARD`; torch-free)."""
    return import_module(_family_package(family) + ".card").CARD  # type: ignore[no-any-return]


def family_of(card: ModelCard) -> Any:
    """The family a card names: its package's `family.FAMILY`, which binds the card and its experts into a
    `v2.runtime.family.Family` (the registry's package for the name: no code is ever imported from a card)."""
    return import_module(_family_package(card.family) + ".family").FAMILY


@runtime_checkable
class TakesRecordings(Protocol):
    """A family whose chat messages take recordings (`input_audio` parts): the containers such a part may name,
    lower case as OpenAI's enum spells them. A class attribute: read from the family's class (`family_of(card)
    .bound`) before a model loads, and from the bound family (the server's schema)."""

    @property
    def input_audio_formats(self) -> tuple[str, ...]: ...


def input_audio_formats(card: ModelCard) -> tuple[str, ...]:
    """The formats the card's family takes in an `input_audio` part (`TakesRecordings`); none: no recordings."""
    bound = family_of(card).bound
    return tuple(bound.input_audio_formats) if isinstance(bound, TakesRecordings) else ()


def build_model(card: ModelCard, **options: Any) -> Any:
    """The card's model (the network its family's section builds from the card's experts)."""
    return _section(card).build_model(card, **options)


def build_codec(card: ModelCard, **options: Any) -> Any:
    """The card's codec decoder."""
    return _section(card).build_codec(card, **options)


def build_encoder(card: ModelCard, **options: Any) -> Any:
    """The card's codec encoder."""
    return _section(card).build_encoder(card, **options)


def build_tokenizer(card: ModelCard, checkpoint: str | Path | None = None) -> Any:
    """The card's text tokenizer."""
    return _section(card).build_tokenizer(card, checkpoint)


def _section(card: ModelCard) -> Any:
    """The module of the card's family section (its builders)."""
    import sys

    return sys.modules[type(card).__module__]
