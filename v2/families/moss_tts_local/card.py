"""The MOSS-TTS-Local family's card section: its experts, its loops' settings, and building the experts.

Owns: the experts `backbone`, `local_transformer`, `vocoder` (class, checkpoint, dtype; the tokenizer; the
codec's encoder), the loops `ar_decode` -> `vocoder` with `encode` in front and their settings (the graph is
the card's: `vocoder` may be left out, then `ar_decode` feeds nothing and no audio is made), the card
as a whole (`MossCard`: the common part of `v2.card` plus this section), reading the checkpoint's config
without its weights (`checkpoint_config`), and instantiating experts from a fixed registry (checkpoints
found by `v2.checkpoints`: a directory or a hub repo id). No code is ever imported from a card.
Must not know: the runtime, requests, scheduling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from v2.card import (
    SEED_PREFIX, ChunkLoopDecl, DType, LoopDecl, LoopTable, ModelCard, PagedLoopDecl, SamplingDefaults, _Frozen,
)
from v2.checkpoints import resolve_checkpoint


class Expert(_Frozen):
    """checkpoint: a directory (relative paths from the working directory), a hub repo id `org/name` found in the
    Hugging Face cache, or `seed:NAME` ([seeded.NAME])."""

    checkpoint: str = Field(min_length=1)
    dtype: DType


class BackboneExpert(Expert):
    class_: Literal["Qwen3Backbone"] = Field(alias="class")
    tokenizer: Literal["bytes", "json"]


class LocalTransformerExpert(Expert):
    class_: Literal["MossLocalTransformer"] = Field(alias="class")


class VocoderExpert(Expert):
    class_: Literal["MossAudioDecoder"] = Field(alias="class")
    encoder: bool = False  # also load the codec's encoder (reference audio -> codes) from the same checkpoint


class Experts(_Frozen):
    backbone: BackboneExpert
    local_transformer: LocalTransformerExpert
    vocoder: VocoderExpert


class ARDecodeSettings(PagedLoopDecl):
    """The AR loop (v2.card.PagedLoopDecl's settings; `max_text_chars` caps text, instruction and language,
    each)."""

    class_: Literal["ARDecodeLoop"] = Field(alias="class")
    max_segment_chars: int = Field(default=300, ge=1)  # longer text is spoken as segments of whole sentences
    open_segment_chars: int = Field(default=200, ge=1)  # open text: a longer sentence is cut at a clause or word
    sampling: SamplingDefaults


class VocoderSettings(ChunkLoopDecl):
    class_: Literal["VocoderLoop"] = Field(alias="class")


class EncodeSettings(LoopDecl):
    """Reference audio: limits at submit, and how encoding is spread over engine steps."""

    front: ClassVar[bool] = True
    class_: Literal["EncodeLoop"] = Field(default="EncodeLoop", alias="class")
    max_reference_seconds: float = Field(default=30.0, gt=0, allow_inf_nan=False)  # per recording, as given
    max_references: int = Field(default=4, ge=1)  # recordings per request
    chunk_frames: int = Field(default=25, ge=1)   # frames of each recording encoded per step (25 = 2 s)
    max_streams: int = Field(default=8, ge=1)     # encoder state slots: recordings encoding at once

    @model_validator(mode="after")
    def _fits(self) -> "EncodeSettings":
        if self.max_streams < self.max_references:
            raise ValueError(f"max_streams ({self.max_streams}) must be >= max_references ({self.max_references})")
        return self


class Loops(LoopTable):
    ar_decode: ARDecodeSettings
    vocoder: VocoderSettings | None = None  # None: no audio (codes and trajectories only)
    encode: EncodeSettings = EncodeSettings()


class MossCard(ModelCard):
    """A MOSS-TTS-Local card: the common part and this family's experts and loops."""

    family: Literal["moss_tts_local"]
    experts: Experts
    loops: Loops

    @model_validator(mode="after")
    def _consistent(self) -> "MossCard":
        e = self.experts
        if (e.local_transformer.checkpoint, e.local_transformer.dtype) != (e.backbone.checkpoint, e.backbone.dtype):
            raise ValueError("experts.local_transformer: checkpoint and dtype must equal the backbone's "
                             "(one release checkpoint holds both)")
        return self


CARD = MossCard


def _registry() -> dict[str, Any]:
    """The fixed set of weight classes a card's experts resolve to (imported lazily)."""
    from v2.models.moss_codec import MossAudioDecoder
    from v2.models.moss_tts_local.model import MossTTSLocal

    # the backbone and the local transformer are two experts of one release checkpoint
    return {"Qwen3Backbone": MossTTSLocal, "MossLocalTransformer": MossTTSLocal, "MossAudioDecoder": MossAudioDecoder}


def _build(card: MossCard, expert: Expert, class_: str, checkpoint: str | Path | None, dtype: Any,
           device: Any) -> Any:
    import torch

    cls = _registry()[class_]
    dtype = dtype or getattr(torch, expert.dtype)
    source = str(checkpoint) if checkpoint is not None else expert.checkpoint
    if source.startswith(SEED_PREFIX):
        seeded = card.seeded[source[len(SEED_PREFIX):]]
        return cls.from_seed(seeded.config, seeded.seed, dtype=dtype, device=device)
    return cls.from_pretrained(resolve_checkpoint(source), dtype=dtype, device=device)


def build_model(card: MossCard, *, checkpoint: str | Path | None = None, dtype: Any = None,
                device: Any = "cpu") -> Any:
    """The backbone + local-transformer experts (one `MossTTSLocal`), from the card or `checkpoint`."""
    return _build(card, card.experts.backbone, card.experts.backbone.class_, checkpoint, dtype, device)


def build_codec(card: MossCard, *, checkpoint: str | Path | None = None, dtype: Any = None,
                device: Any = "cpu") -> Any:
    """The vocoder expert (a `MossAudioDecoder`), from the card or `checkpoint`."""
    return _build(card, card.experts.vocoder, card.experts.vocoder.class_, checkpoint, dtype, device)


def build_encoder(card: MossCard, *, checkpoint: str | Path | None = None, dtype: Any = None, device: Any = "cpu",
                  decoder: Any = None) -> Any:
    """The codec's encoder (a `MossAudioEncoder`) from the vocoder's checkpoint; a seeded codec's encoder
    shares `decoder`'s codebooks, as one checkpoint's two sides do."""
    import torch

    from v2.models.moss_codec.encoder import MossAudioEncoder

    expert = card.experts.vocoder
    dtype = dtype or getattr(torch, expert.dtype)
    source = str(checkpoint) if checkpoint is not None else expert.checkpoint
    if source.startswith(SEED_PREFIX):
        seeded = card.seeded[source[len(SEED_PREFIX):]]
        return MossAudioEncoder.from_seed(seeded.config, seeded.seed, decoder=decoder, dtype=dtype, device=device)
    return MossAudioEncoder.from_pretrained(resolve_checkpoint(source), dtype=dtype, device=device)


def checkpoint_config(card: MossCard, checkpoint: str | Path | None = None) -> Any:
    """The backbone checkpoint's `MossTTSLocalConfig` (its config.json, or the seeded table's), read without
    any weights: the codebooks (`n_vq`) and their size."""
    from v2.models.moss_tts_local.config import MossTTSLocalConfig

    source = str(checkpoint) if checkpoint is not None else card.experts.backbone.checkpoint
    if source.startswith(SEED_PREFIX):
        return MossTTSLocalConfig.from_dict(card.seeded[source[len(SEED_PREFIX):]].config)
    from v2.models.weights import read_config

    return MossTTSLocalConfig.from_dict(read_config(resolve_checkpoint(source)))


def build_tokenizer(card: MossCard, checkpoint: str | Path | None = None) -> Any:
    from v2.models.moss_tts_local.tokenizer import load_tokenizer

    source = str(checkpoint) if checkpoint is not None else card.experts.backbone.checkpoint
    return load_tokenizer(card.experts.backbone.tokenizer,
                          None if source.startswith(SEED_PREFIX) else resolve_checkpoint(source))
