"""Model cards: the data files in `cards/` validated into frozen models, and building what they name.

Owns: the common part of the card schema (name, `family`, seeded weight sources, sampling defaults'
schema, a loop's declaration `LoopDecl` with the loops it feeds, a family's loop section `LoopTable` and
the checks of the graph it declares (two paged loops naming one `expert`, whose KV specs would be one,
refused), the loops a card adds to its family's graph (`added_loops`, checked by v2/card_added.py), the
settings every paged AR loop and every codec chunk loop declares (`PagedLoopDecl`, `ChunkLoopDecl`: a family subclasses them), that a seeded expert names a seeded table,
runtime settings such as the engine's CPU threads), finding a card by
name (the shipped cards are package data, `v2/cards/` in an installed package, the top-level `cards/` in a
checkout) or path, validating it with its family's card class
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
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from v2.card_added import AddedLoopDecl, resolve_added
from v2.fields import TOP_K_MAX, check_penalty, check_temperature
from v2.registry import UnknownFamily, family_package
from v2.sampling_settings import HeadSampling, SamplingSettings


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


class StageSampling(HeadDefaults):
    """One stage's sampling defaults (a family whose card names its stages): temperature (0 = greedy), top_k,
    top_p."""


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
    edges of the card's loop graph: data, which the engine drives as written). A family's section subclasses
    this per loop class with its settings, and says what a loop of that class takes and gives (`takes`,
    `gives`: a kind of item, e.g. "frames"; an edge a -> b is one the family can drive when a gives what b
    takes) or that it runs before admission, outside the graph (`front`)."""

    class_: str = Field(alias="class")
    feeds: tuple[str, ...] = ()
    takes: ClassVar[str | None] = None  # what it works on, fed by another loop (None: it plans on its own)
    gives: ClassVar[str | None] = None  # what it makes for the loops it feeds (None: it feeds none)
    front: ClassVar[bool] = False       # run before admission (e.g. encoding references): no edges


class LoopTable(_Frozen):
    """A family's `loops` section: one field per loop the family can drive, each a `LoopDecl` subclass. A loop
    the family can do without is an optional field (None or absent: not declared, e.g. no vocoder for
    rollouts that need no audio); one it cannot is required (missing: refused, naming it). The loops a card
    declares and their `feeds` are the graph the engine drives (`driven`); `check` refuses, naming the
    field, a graph the family's loops cannot make: an edge to a loop not declared, a cycle, an edge whose
    target does not take what its source gives (or from or to a front loop), a loop that takes input and
    that no loop (or more than one) feeds."""

    def declared(self) -> dict[str, LoopDecl]:
        """The loops the card declares, by name, in the section's order."""
        out: dict[str, LoopDecl] = {}
        for name in type(self).model_fields:
            decl = getattr(self, name)
            if isinstance(decl, LoopDecl):
                out[name] = decl
        return out

    def driven(self) -> list[tuple[str, LoopDecl]]:
        """The declared loops the engine drives (not `front`), in feeding order: a loop comes before the loops
        it feeds, otherwise in the section's order (the graph is checked: no cycle)."""
        loops = {n: d for n, d in self.declared().items() if not d.front}
        fed = {t for d in loops.values() for t in d.feeds}
        order, ready = [], [n for n in loops if n not in fed]
        feeders = {n: sum(n in d.feeds for d in loops.values()) for n in loops}
        while ready:
            name = ready.pop(0)
            order.append((name, loops[name]))
            for t in loops[name].feeds:
                feeders[t] -= 1
                if not feeders[t]:
                    ready.append(t)
        return order

    def check(self) -> None:
        """Refuse (ValueError, the field named) a declared graph the family's loops cannot make."""
        loops = self.declared()
        for name, d in loops.items():
            for t in d.feeds:
                if t not in loops:
                    raise ValueError(f"loops.{name}.feeds: no loop {t!r} is declared (declared: {', '.join(loops)})")
            if len(set(d.feeds)) != len(d.feeds):
                raise ValueError(f"loops.{name}.feeds: a loop is named twice")
        for name in loops:
            cycle = _cycle(loops, name, [name])
            if cycle:
                raise ValueError(f"loops.{name}.feeds: a cycle ({' -> '.join(cycle)}); a loop feeds only loops after it")
        for name, d in loops.items():
            for t in d.feeds:
                target = loops[t]
                if d.front or target.front:
                    front = name if d.front else t
                    raise ValueError(f"loops.{name}.feeds: {front!r} ({loops[front].class_}) runs before admission; "
                                     "it feeds no loop and no loop feeds it")
                if d.gives is None or d.gives != target.takes:
                    gives = f"gives {d.gives}" if d.gives else "gives nothing another loop takes"
                    takes = f"takes {target.takes}" if target.takes else "takes no input"
                    raise ValueError(f"loops.{name}.feeds: {t!r} ({target.class_}) {takes}; {name!r} ({d.class_}) {gives}")
        for t, target in loops.items():
            feeders = [n for n, d in loops.items() if t in d.feeds]
            if target.takes is not None and not feeders:
                raise ValueError(f"loops.{t}: no loop feeds it (a {target.class_} takes {target.takes}): name it in "
                                 f"a loop's feeds, or leave [loops.{t}] out")
            if len(feeders) > 1:
                raise ValueError(f"loops.{t}: fed by {' and '.join(feeders)}; a {target.class_} takes one stream")
        experts: dict[str, str] = {}
        for name, d in loops.items():
            expert = getattr(d, "expert", None)
            if isinstance(d, PagedLoopDecl) and expert is not None:
                if expert in experts:
                    raise ValueError(f"loops.{name}.expert: {expert!r} is the expert of loops.{experts[expert]} too; "
                                     "two paged loops would share one KV spec by accident (each paged loop holds its "
                                     "own pool over its own expert's layers)")
                experts[expert] = name


def _cycle(loops: dict[str, LoopDecl], start: str, path: list[str]) -> list[str] | None:
    """A path of edges from `path[-1]` back to `start` (a cycle through it), or None."""
    for t in loops[path[-1]].feeds:
        if t == start:
            return [*path, t]
        if t not in path:
            found = _cycle(loops, start, [*path, t])
            if found:
                return found
    return None


class PagedLoopDecl(LoopDecl):
    """The settings every family's AR loop declares (the loop that holds the paged KV and gives frames to the
    loops it `feeds`): request caps, slots, the queue, prefill chunking, batch buckets and the paged KV pool.
    A family's subclass names its class (`class_: Literal[...]`) and adds its own settings (sampling, text
    segmentation, ...)."""

    gives: ClassVar[str | None] = "frames"  # to the loops it `feeds` (the card's edges: a codec loop, or none)
    max_frames: int = Field(ge=1)          # cap on a request's frames
    max_prompt_rows: int = Field(ge=1)     # cap on a request's prompt rows
    max_text_chars: int = Field(default=20_000, ge=1)  # cap on each text field (checked first)
    max_running: int = Field(ge=1)         # KV slots: requests decoding at once
    max_waiting: int = Field(ge=1)         # requests queued for a slot; past it submit() refuses (overload)
    max_buffered_chunks: int = Field(ge=1)  # chunks a subscriber may fall behind before its request is aborted
    prefill_chunk_rows: int = Field(ge=1)  # prompt rows prefilled per engine step, all requests together
    batch_buckets: list[int]               # AR_FRAME batches are padded up to one of these
    # paged KV: rows per block; the pool as a number of blocks, or as a fraction of the device memory free
    # when the runtime starts (weights loaded; codec streams, graphs and activations live in the rest).
    # Neither: max_running requests at full length (the memory a contiguous cache would take).
    block_size: int = Field(default=16, ge=1)
    kv_blocks: int | None = Field(default=None, ge=1)
    kv_memory_fraction: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    prefix_cache: bool = True              # full prompt blocks stay cached for later requests until evicted
    # the expert whose layers this loop's KV holds (a name of the card's experts; None: the family's one);
    # two paged loops of a card naming one expert would share one KV spec: refused at load
    expert: str | None = None

    _buckets = field_validator("batch_buckets")(check_buckets)

    @property
    def max_blocks(self) -> int:
        """Blocks one request holds at its longest (max_prompt_rows + max_frames rows)."""
        return -(-(self.max_prompt_rows + self.max_frames) // self.block_size)

    @model_validator(mode="after")
    def _fits(self) -> "PagedLoopDecl":
        if self.max_running > self.batch_buckets[-1]:
            raise ValueError(f"max_running ({self.max_running}) exceeds the largest batch bucket")
        if self.kv_blocks is not None and self.kv_memory_fraction is not None:
            raise ValueError("kv_blocks and kv_memory_fraction: give one KV budget, not both")
        if self.kv_blocks is not None and self.kv_blocks < self.max_blocks:
            raise ValueError(f"kv_blocks ({self.kv_blocks}) cannot hold one request at full length "
                             f"({self.max_blocks} blocks of {self.block_size} rows)")
        return self


class ChunkLoopDecl(LoopDecl):
    """The settings of a codec loop that takes frames and streams them as audio chunks (the kit's chunk
    stream, v2/kit/chunks.py). A family's subclass names its class."""

    takes: ClassVar[str | None] = "frames"
    gives: ClassVar[str | None] = "audio"   # its chunks: the audio that streams to the caller (and to an added loop)
    first_chunk_frames: int = Field(ge=1)  # frames in a stream's first audio chunk
    chunk_frames: int = Field(ge=1)        # frames in every later chunk (the last may be shorter)
    max_streams: int = Field(ge=1)         # codec state slots
    batch_buckets: list[int]               # AUDIO_CHUNK batches are padded up to one of these
    frame_buckets: list[int]               # a batch's chunk length is padded up to one of these

    _buckets = field_validator("batch_buckets", "frame_buckets")(check_buckets)

    @model_validator(mode="after")
    def _fits(self) -> "ChunkLoopDecl":
        if max(self.first_chunk_frames, self.chunk_frames) > self.frame_buckets[-1]:
            raise ValueError("chunk frames exceed the largest frame bucket")
        if self.max_streams > self.batch_buckets[-1]:
            raise ValueError(f"max_streams ({self.max_streams}) exceeds the largest batch bucket")
        return self


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
