"""The CSM family's card section: its experts, its loops' settings, and reading what the checkpoint says.

Owns: the experts `model` (the release checkpoint's backbone, depth decoder and their tables; the text
tokenizer from its `tokenizer.json`, or UTF-8 bytes for seeded weights) and `codec` (Mimi: by default the
same checkpoint's `codec_model.*`; its encoder for context audio), the loops `backbone` -> `codec` with
`encode` in front and their settings (frame and prompt caps, the speaker ids offered as voices, the KV
pool, chunking, context limits), the card as a whole (`CsmCard`), the card's own sampling defaults (absent:
the checkpoint's generation_config.json), and reading the checkpoint's config.json and
generation_config.json without any weights (`checkpoint_config`, `generation_config`, `codec_config`).
Everything structural (widths, layers, codebooks, special ids, the codec's frame rate) comes from the
checkpoint's config, never from the card. Building the experts is builders.py's. No code is ever imported
from a card.
Must not know: the runtime, requests, scheduling, tensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from v2.card import (
    SEED_PREFIX, ChunkLoopDecl, DType, LoopDecl, LoopTable, ModelCard, PagedLoopDecl, StageSampling, _Frozen,
)
from v2.checkpoints import resolve_checkpoint
from v2.kit.checks import check_seeded

MAX_SPEAKER = 2**31 - 1  # a speaker id is rendered as decimal text: bounded like any request integer


class ModelExpert(_Frozen):
    """checkpoint: a directory, a hub repo id `org/name` in the Hugging Face cache, or `seed:NAME`.
    tokenizer: "release" (the checkpoint's tokenizer.json; a checkpoint without one takes `text_ids` only)
    or "bytes" (UTF-8 bytes as text ids: only for seeded weights, which ship no files)."""

    class_: Literal["Csm"] = Field(alias="class")
    checkpoint: str = Field(min_length=1)
    dtype: DType
    tokenizer: Literal["release", "bytes"] = "release"


class CodecExpert(_Frozen):
    """checkpoint: None = the model checkpoint's `codec_model.*` (the release layout), else a Mimi
    checkpoint of its own (a directory, a hub repo id, or `seed:NAME` whose config is a Mimi config)."""

    class_: Literal["Mimi"] = Field(alias="class")
    checkpoint: str | None = Field(default=None, min_length=1)
    dtype: DType
    encoder: bool = True  # also load the encoder (context audio -> codes)


class Experts(_Frozen):
    model: ModelExpert
    codec: CodecExpert


class SamplingSection(_Frozen):
    """The card's own sampling defaults (absent: the checkpoint's generation_config.json)."""

    backbone: StageSampling      # codebook 0
    depth_decoder: StageSampling  # codebooks 1..N-1


class BackboneSettings(PagedLoopDecl):
    """The backbone loop (v2.card.PagedLoopDecl's settings; `max_frames`' default per request is
    generation_config's max_new_tokens, `max_prompt_rows` counts every turn, context audio included)."""

    class_: Literal["CsmBackboneLoop"] = Field(alias="class")
    sampling: SamplingSection | None = None
    speakers: list[int] = Field(default=[0, 1])  # speaker ids offered as voices (`voice: "0"` -> speaker 0)
    default_speaker: int = Field(default=0, ge=0, le=MAX_SPEAKER)  # a turn's speaker when none is given

    @model_validator(mode="after")
    def _speakers(self) -> "BackboneSettings":
        if any(not 0 <= s <= MAX_SPEAKER for s in self.speakers) or len(set(self.speakers)) != len(self.speakers):
            raise ValueError(f"speakers: distinct ids in [0, {MAX_SPEAKER}] expected, got {self.speakers}")
        return self


class CodecSettings(ChunkLoopDecl):
    class_: Literal["CsmCodecLoop"] = Field(alias="class")


class EncodeSettings(LoopDecl):
    """Context audio: limits at submit; every recording of a request is encoded before it is admitted."""

    front: ClassVar[bool] = True
    class_: Literal["CsmEncodeLoop"] = Field(default="CsmEncodeLoop", alias="class")
    max_context_seconds: float = Field(default=60.0, gt=0, allow_inf_nan=False)  # one turn's audio
    max_context_turns: int = Field(default=32, ge=0)
    max_streams: int = Field(default=8, ge=1)  # recordings encoding at once


class Loops(LoopTable):
    backbone: BackboneSettings
    codec: CodecSettings | None = None  # None: no audio (codes and trajectories only)
    encode: EncodeSettings = EncodeSettings()


class CsmCard(ModelCard):
    """A CSM card: the common part and this family's experts and loops."""

    family: Literal["csm"]
    experts: Experts
    loops: Loops

    @model_validator(mode="after")
    def _consistent(self) -> "CsmCard":
        model = self.experts.model
        check_seeded(model.tokenizer, model.checkpoint, self.experts.codec.checkpoint, "model",
                     "seeded model weights hold no codec")
        return self


CARD = CsmCard


def is_seeded(source: str) -> bool:
    return source.startswith(SEED_PREFIX)


def seeded(card: CsmCard, source: str) -> Any:
    return card.seeded[source[len(SEED_PREFIX):]]


def model_source(card: CsmCard, checkpoint: str | Path | None = None) -> str:
    return str(checkpoint) if checkpoint is not None else card.experts.model.checkpoint


def codec_source(card: CsmCard, checkpoint: str | Path | None = None,
                 codec_checkpoint: str | Path | None = None) -> str:
    """The codec's checkpoint: given; else a given model checkpoint (its `codec_model.*`); else the card's;
    else the card's model checkpoint."""
    if codec_checkpoint is not None:
        return str(codec_checkpoint)
    if checkpoint is not None and not is_seeded(str(checkpoint)):
        return str(checkpoint)
    return card.experts.codec.checkpoint or card.experts.model.checkpoint


def _read(source: str, name: str) -> dict[str, Any] | None:
    path = resolve_checkpoint(source) / name
    return json.loads(path.read_text()) if path.is_file() else None


def config_dict(card: CsmCard, checkpoint: str | Path | None = None) -> dict[str, Any]:
    """The model checkpoint's config.json (or the seeded table's config), as data."""
    source = model_source(card, checkpoint)
    if is_seeded(source):
        return dict(seeded(card, source).config)
    data = _read(source, "config.json")
    if data is None:
        raise FileNotFoundError(f"{source}: no config.json")
    return data


def checkpoint_config(card: CsmCard, checkpoint: str | Path | None = None) -> Any:
    """The model checkpoint's `CsmConfig`, read without any weights: codebooks, ids, widths."""
    from v2.models.csm.config import CsmConfig

    return CsmConfig.from_dict(config_dict(card, checkpoint))


def codec_config(card: CsmCard, checkpoint: str | Path | None = None,
                 codec_checkpoint: str | Path | None = None) -> dict[str, Any]:
    """The Mimi config as data: a seeded table's config, a CSM checkpoint's `codec_config`, or a Mimi
    checkpoint's config.json."""
    source = codec_source(card, checkpoint, codec_checkpoint)
    data = dict(seeded(card, source).config) if is_seeded(source) else _read(source, "config.json")
    if data is None:
        raise FileNotFoundError(f"{source}: no config.json")
    return dict(data["codec_config"]) if "codec_config" in data else data


def generation_config(card: CsmCard, checkpoint: str | Path | None = None) -> dict[str, Any] | None:
    """The model checkpoint's generation_config.json (None: seeded weights, or no file)."""
    source = model_source(card, checkpoint)
    return None if is_seeded(source) else _read(source, "generation_config.json")
