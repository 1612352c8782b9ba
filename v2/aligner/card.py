"""The aligner's cards: which forced aligner to load, from where, and how its words become ids (torch-free).

Owns: `AlignerCard` (`cards/forced_aligner_*.toml`, marked `kind = "aligner"`: `checkpoint`, a directory, a hub
repo id or `seed:NAME`; `tokenizer`, "checkpoint" (the release's BPE files next to the weights) or "bytes"
(UTF-8 bytes as ids, for the seeded card, no download); `dtype`; `max_streams`, the loop's slot pool;
`[seeded.NAME]`: the seed, the gain and the release `config.json` as a table), and `resolve_aligner`: what
`Runtime.from_card(aligner=...)` and `v2 serve --aligner` name (an aligner card's name or path, else a
checkpoint directory or hub id, read with the release's defaults) -> a card. Refusals name the field.
Must not know: tensors, the model, the runtime.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from v2.card import CARDS_DIR, SEED_PREFIX, CardError, card_kind

# `--aligner` of serve and synth (one text: a shared option reads the same on every command)
ALIGNER_HELP = ("the word aligner: an aligner card (forced_aligner_0_6b, the release from the Hugging Face cache; "
                "forced_aligner_tiny, seeded), a card file, a checkpoint directory or a hub id; serve: requests may "
                "then ask for timestamps \"word\" (default: none); synth: the one --timestamps uses (default: "
                "forced_aligner_tiny for a seeded card, else forced_aligner_0_6b)")


KIND = "aligner"  # the top-level key that marks an aligner card among the cards
RELEASE = "Qwen/Qwen3-ForcedAligner-0.6B"


class SeededAligner(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = Field(ge=0)
    gain: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    config: dict[str, Any]  # the release's config.json, as a table


class AlignerCard(BaseModel):
    """One forced aligner (see the module's docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: Literal["aligner"] = "aligner"
    description: str = ""
    checkpoint: str
    tokenizer: Literal["checkpoint", "bytes"] = "checkpoint"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    max_streams: int = Field(default=256, ge=1, le=65536)  # requests holding one of its slots at once
    seeded: dict[str, SeededAligner] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _seeded(self) -> "AlignerCard":
        if self.checkpoint.startswith(SEED_PREFIX) and self.checkpoint[len(SEED_PREFIX):] not in self.seeded:
            raise ValueError(f"checkpoint: {self.checkpoint!r} names no [seeded.{self.checkpoint[len(SEED_PREFIX):]}] "
                             "table")
        return self

    @property
    def seed_table(self) -> SeededAligner | None:
        """The seeded weights' table, where `checkpoint` is `seed:NAME`."""
        if not self.checkpoint.startswith(SEED_PREFIX):
            return None
        return self.seeded[self.checkpoint[len(SEED_PREFIX):]]


def is_aligner_card(text: str) -> bool:
    """Whether a card file's text marks it an aligner card (`kind = "aligner"` before its first table)."""
    return card_kind(text) == KIND


def aligner_cards() -> list[str]:
    """The shipped aligner cards' names, sorted."""
    return sorted(f.name[: -len(".toml")] for f in CARDS_DIR.iterdir()
                  if f.name.endswith(".toml") and is_aligner_card(f.read_text()))


def load_aligner_card(text: str, where: str) -> AlignerCard:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CardError(f"aligner card {where}: not valid TOML ({e})") from e
    try:
        return AlignerCard.model_validate(data)
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
                           for err in e.errors())
        raise CardError(f"aligner card {where}: {fields}") from None


def resolve_aligner(source: str | Path | AlignerCard) -> AlignerCard:
    """An aligner card from a shipped aligner card's name, a card file's path, or a checkpoint (a directory or
    a hub repo id: the release's tokenizer files beside its weights, float32)."""
    if isinstance(source, AlignerCard):
        return source
    if not isinstance(source, (str, Path)) or not str(source).strip():
        raise CardError(f"aligner: expected an aligner card's name, a directory or a hub id, got {source!r}")
    path = Path(source).expanduser()
    if path.suffix == ".toml" and path.is_file():
        return load_aligner_card(path.read_text(), path.name)
    shipped = CARDS_DIR.joinpath(f"{source}.toml")
    if "/" not in str(source) and shipped.is_file():
        text = shipped.read_text()
        if not is_aligner_card(text):
            raise CardError(f"aligner: the card {str(source)!r} is a speech card, not an aligner card (aligner "
                            f"cards: {', '.join(aligner_cards())})")
        return load_aligner_card(text, f"{source}.toml")
    if path.is_dir() or "/" in str(source):
        return AlignerCard(name=path.name or str(source), checkpoint=str(source))
    raise CardError(f"aligner: {str(source)!r} is no aligner card, directory or hub id (aligner cards: "
                    f"{', '.join(aligner_cards())})")
