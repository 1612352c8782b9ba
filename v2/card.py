"""Model cards: the data files in `cards/` validated into frozen models, and building what they name.

Owns: the common part of the card schema (name, `family`, seeded weight sources, sampling defaults'
schema, a loop's declaration `LoopDecl` with the loops it feeds, runtime settings such as the engine's
CPU threads), finding a card by name (the shipped cards are package data, `v2/cards/` in an installed
package, the top-level `cards/` in a checkout) or path, validating it with its family's card class
(its family found by name in the registry, v2/registry.py; each family's section: its experts and loops),
finding a card's family
(`family_of`), refusing a bad card with the field named,
and building the experts a card names through its family's section. No code is ever imported from a card.
Must not know: the runtime, requests, scheduling, any family's section.
"""

from __future__ import annotations

import re
import tomllib
from importlib import import_module
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from v2.fields import TOP_K_MAX, check_penalty, check_temperature
from v2.registry import UnknownFamily, family_package
from v2.sampling_settings import HeadSampling, SamplingSettings


def _cards_dir() -> Traversable:
    """The shipped cards: `v2/cards/` inside an installed wheel, else the checkout's top-level `cards/` (a plain
    checkout or an editable install)."""
    packaged = resources.files("v2").joinpath("cards")
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "cards"


CARDS_DIR = _cards_dir()


def _default_card() -> str:
    """The shipped card that says `default = true` among its top-level keys (data, not code: the first such
    card by name, else the first card by name). Read without parsing the cards (a seeded card's TOML takes
    milliseconds to parse); `ModelCard.default` validates the key when a card is loaded."""
    names = sorted(f.name[: -len(".toml")] for f in CARDS_DIR.iterdir() if f.name.endswith(".toml"))
    for name in names:
        top = re.split(r"(?m)^\s*\[", CARDS_DIR.joinpath(f"{name}.toml").read_text(), maxsplit=1)[0]
        if re.search(r"(?m)^default\s*=\s*true\s*(#.*)?$", top):
            return name
    return names[0] if names else ""


DEFAULT_CARD = _default_card()  # the card a command or a runtime uses when none is named
SEED_PREFIX = "seed:"
DType = Literal["float32", "bfloat16", "float16"]


class CardError(ValueError):
    """A card cannot be found or is invalid; the message names the card and the field."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class SeededWeights(_Frozen):
    """Weights drawn from `seed` for a model built from `config` (a config.json in the release schema)."""

    seed: int
    config: dict[str, Any]


class HeadDefaults(_Frozen):
    temperature: float = Field(ge=0, allow_inf_nan=False)  # 0 (greedy) or in the range requests may set
    top_k: int = Field(ge=0, le=TOP_K_MAX)
    top_p: float = Field(gt=0, le=1)

    _temperature = field_validator("temperature")(check_temperature)


class SamplingDefaults(_Frozen):
    stop: HeadDefaults
    audio: HeadDefaults
    repetition_penalty: float = Field(gt=0, allow_inf_nan=False)

    _penalty = field_validator("repetition_penalty")(check_penalty)

    def settings(self) -> SamplingSettings:
        """The defaults as `SamplingSettings`."""
        return SamplingSettings(
            stop=HeadSampling(self.stop.temperature, self.stop.top_k, self.stop.top_p),
            audio=HeadSampling(self.audio.temperature, self.audio.top_k, self.audio.top_p),
            repetition_penalty=self.repetition_penalty,
        )


def check_buckets(buckets: list[int]) -> list[int]:
    if not buckets or any(b < 1 for b in buckets) or buckets != sorted(set(buckets)):
        raise ValueError("must be a non-empty, strictly increasing list of positive integers")
    return buckets


class LoopDecl(_Frozen):
    """A loop a card declares: its class (one of its family's loops) and the loops it feeds, by name (the
    edges of the card's loop graph). A family's section subclasses this per loop with its settings."""

    class_: str = Field(alias="class")
    feeds: tuple[str, ...] = ()


class RuntimeSettings(_Frozen):
    # intra-op threads of the engine thread when the experts run on a CPU (None: torch's default)
    cpu_threads: int | None = Field(default=None, ge=1)
    # where stored voices live (None: $XDG_CACHE_HOME/v2/voices/<card name>)
    voices_dir: str | None = None
    # an open request (Runtime.open) that gets no text for this long ends (abort, the reason in its error)
    input_idle_timeout_s: float = Field(default=30.0, gt=0, le=86400, allow_inf_nan=False)


class ModelCard(_Frozen):
    """The common part of every card; `family` names the family whose section (experts, loops) the rest is
    (a family's card class subclasses this one). Loaded cards are always a family's class."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    name: str
    family: str
    description: str = ""
    default: bool = False  # the shipped card used when none is named (DEFAULT_CARD): exactly one says so
    runtime: RuntimeSettings = RuntimeSettings()
    seeded: dict[str, SeededWeights] = Field(default_factory=dict)


def known_cards() -> list[str]:
    """The names of the shipped cards, sorted."""
    return sorted(f.name[: -len(".toml")] for f in CARDS_DIR.iterdir() if f.name.endswith(".toml"))


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
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise CardError(f"card {path.name}: not valid TOML ({e})") from e
    try:
        return card_class(data.get("family")).model_validate(data)
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '(top level)'}: {err['msg']}"
                           for err in e.errors())
        raise CardError(f"card {path.name}: {fields}") from None


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
