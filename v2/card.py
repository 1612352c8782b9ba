"""Model cards: the data files in `cards/` validated into frozen models, and building what they name.

Owns: the card schema (model class from a fixed registry, checkpoint or seeded config, dtype,
tokenizer, sampling defaults, limits), finding a card by name or path, and refusing a card with a
missing, unknown or invalid field (the error names it). No code is ever imported from a card.
Must not know: the runtime, requests, scheduling.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from v2.models.sampling import HeadSampling, SamplingSettings

CARDS_DIR = Path(__file__).resolve().parent.parent / "cards"
DEFAULT_CARD = "moss_tts_local_tiny"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODEL_CLASSES = ("MossTTSLocal",)
CODEC_CLASSES = ("MossAudioDecoder",)


class CardError(ValueError):
    """A card cannot be found or is invalid; the message names the card and the field."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SeededWeights(_Frozen):
    seed: int
    config: dict[str, Any]


class _Weights(_Frozen):
    """Where an expert's weights come from: a checkpoint directory, or a seed and an inline config."""

    checkpoint: str = ""
    dtype: Literal["float32", "bfloat16", "float16"]
    seeded: SeededWeights | None = None

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @model_validator(mode="after")
    def _one_source(self) -> "_Weights":
        if not self.checkpoint and self.seeded is None:
            raise ValueError("needs 'checkpoint' or a 'seeded' table")
        if self.checkpoint and self.seeded is not None:
            raise ValueError("has both 'checkpoint' and a 'seeded' table; keep one")
        return self


class ModelSection(_Weights):
    class_: Literal[MODEL_CLASSES] = Field(alias="class")  # type: ignore[valid-type]
    tokenizer: Literal["bytes", "json"]


class CodecSection(_Weights):
    class_: Literal[CODEC_CLASSES] = Field(alias="class")  # type: ignore[valid-type]


class HeadDefaults(_Frozen):
    temperature: float = Field(ge=0, allow_inf_nan=False)
    top_k: int = Field(ge=0)
    top_p: float = Field(gt=0, le=1)


class SamplingSection(_Frozen):
    stop: HeadDefaults
    audio: HeadDefaults
    repetition_penalty: float = Field(gt=0, allow_inf_nan=False)

    def settings(self) -> SamplingSettings:
        return SamplingSettings(
            stop=HeadSampling(self.stop.temperature, self.stop.top_k, self.stop.top_p),
            audio=HeadSampling(self.audio.temperature, self.audio.top_k, self.audio.top_p),
            repetition_penalty=self.repetition_penalty,
        )


class LimitsSection(_Frozen):
    max_frames: int = Field(ge=1)
    max_prompt_rows: int = Field(ge=1)


class ModelCard(_Frozen):
    name: str
    description: str = ""
    model: ModelSection
    codec: CodecSection
    sampling: SamplingSection
    limits: LimitsSection


def card_path(name_or_path: str | Path) -> Path:
    """A card name in `cards/` (with or without .toml) or a path to a card file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return p
    candidate = CARDS_DIR / f"{p.stem if p.suffix == '.toml' else name_or_path}.toml"
    if candidate.is_file():
        return candidate
    known = sorted(f.stem for f in CARDS_DIR.glob("*.toml"))
    raise CardError(f"card {str(name_or_path)!r} not found (known cards: {', '.join(known)})")


def load_card(name_or_path: str | Path = DEFAULT_CARD) -> ModelCard:
    path = card_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise CardError(f"card {path.name}: not valid TOML ({e})") from e
    try:
        return ModelCard.model_validate(data)
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '(top level)'}: {err['msg']}"
                           for err in e.errors())
        raise CardError(f"card {path.name}: {fields}") from None


def _registry() -> dict[str, Any]:
    """The fixed set of classes a card may name (imported lazily: cards load without torch models)."""
    from v2.models.codec import MossAudioDecoder
    from v2.models.moss_tts_local import MossTTSLocal

    return {"MossTTSLocal": MossTTSLocal, "MossAudioDecoder": MossAudioDecoder}


def _build(section: ModelSection | CodecSection, checkpoint: str | Path | None, dtype: torch.dtype | None,
           device: torch.device | str) -> Any:
    cls = _registry()[section.class_]
    dtype = dtype or section.torch_dtype
    if checkpoint is None and section.seeded is not None:
        return cls.from_seed(section.seeded.config, section.seeded.seed, dtype=dtype, device=device)
    return cls.from_pretrained(Path(checkpoint or section.checkpoint), dtype=dtype, device=device)


def build_model(card: ModelCard, *, checkpoint: str | Path | None = None, dtype: torch.dtype | None = None,
                device: torch.device | str = "cpu") -> Any:
    """The card's TTS model (a `MossTTSLocal`), from its checkpoint (or `checkpoint`) or seeded config."""
    return _build(card.model, checkpoint, dtype, device)


def build_codec(card: ModelCard, *, checkpoint: str | Path | None = None, dtype: torch.dtype | None = None,
                device: torch.device | str = "cpu") -> Any:
    """The card's codec decoder (a `MossAudioDecoder`), from its checkpoint (or `checkpoint`) or seeded config."""
    return _build(card.codec, checkpoint, dtype, device)


def build_tokenizer(card: ModelCard, checkpoint: str | Path | None = None):  # type: ignore[no-untyped-def]
    from v2.models.tokenizer import load_tokenizer

    ckpt = checkpoint or card.model.checkpoint or None
    return load_tokenizer(card.model.tokenizer, Path(ckpt) if ckpt else None)
