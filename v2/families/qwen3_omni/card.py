"""The Qwen3-Omni family's card section: its expert (one release checkpoint holds the thinker, the talker with
its code predictor, and code2wav), its loops' settings, and building the expert's parts.

Owns: the expert `model` (a directory, a hub repo id in the Hugging Face cache, or `seed:NAME`: weights drawn
from a seed over the card's embedded config), the loops `thinker` (paged, gives tokens) -> `talker` (paged,
takes tokens, gives frames) -> `code2wav` (chunks; absent: no audio), `OmniCard`, reading the checkpoint's
config without its weights (`checkpoint_config`) and building the parts (`build_parts`). Everything
structural comes from the checkpoint's config, never from the card.
Must not know: the runtime, requests, scheduling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from v2.card import SEED_PREFIX, ChunkLoopDecl, DType, LoopTable, ModelCard, PagedLoopDecl, _Frozen
from v2.checkpoints import resolve_checkpoint


class ModelExpert(_Frozen):
    """checkpoint: a release directory, a hub repo id `org/name` in the Hugging Face cache, or `seed:NAME`.
    tokenizer: "release" (the checkpoint's tokenizer.json; none: requests give `prompt_ids`) or "bytes"
    (UTF-8 bytes as ids: only for seeded weights, which have no files)."""

    class_: Literal["Qwen3Omni"] = Field(alias="class")
    checkpoint: str = Field(min_length=1)
    dtype: DType
    tokenizer: Literal["release", "bytes"] = "release"


class Experts(_Frozen):
    model: ModelExpert


class ThinkerSettings(PagedLoopDecl):
    """The thinker loop: `max_frames` caps a reply's text tokens (`max_tokens`)."""

    class_: Literal["ThinkerLoop"] = Field(alias="class")
    gives: ClassVar[str | None] = "tokens"
    max_audio_seconds: float = Field(default=300.0, gt=0, allow_inf_nan=False)  # all of a prompt's clips together
    audio_streams: int = Field(default=8, ge=1)  # prompts whose clips encode at once (the front loop's slots)


class TalkerSettings(PagedLoopDecl):
    """The talker loop: `max_frames` caps a reply's frames (12.5 a second)."""

    class_: Literal["TalkerLoop"] = Field(alias="class")
    takes: ClassVar[str | None] = "tokens"
    gives: ClassVar[str | None] = "frames"


class Code2WavSettings(ChunkLoopDecl):
    class_: Literal["Code2WavLoop"] = Field(alias="class")


class Loops(LoopTable):
    thinker: ThinkerSettings
    talker: TalkerSettings
    code2wav: Code2WavSettings | None = None  # None: no audio (text and codes only)


class OmniCard(ModelCard):
    family: Literal["qwen3_omni"]
    experts: Experts
    loops: Loops

    @model_validator(mode="after")
    def _consistent(self) -> "OmniCard":
        m = self.experts.model
        if m.tokenizer == "bytes" and not m.checkpoint.startswith(SEED_PREFIX):
            raise ValueError("experts.model.tokenizer: 'bytes' is for seeded weights; a release uses 'release'")
        return self


CARD = OmniCard


def source_of(card: OmniCard, checkpoint: str | Path | None = None) -> str:
    return str(checkpoint) if checkpoint is not None else card.experts.model.checkpoint


def config_dict(card: OmniCard, checkpoint: str | Path | None = None) -> dict[str, Any]:
    """config.json of the checkpoint (the seeded table's for `seed:NAME`)."""
    source = source_of(card, checkpoint)
    if source.startswith(SEED_PREFIX):
        return dict(card.seeded[source[len(SEED_PREFIX):]].config)
    return dict(json.loads((resolve_checkpoint(source) / "config.json").read_text()))


def checkpoint_config(card: OmniCard, checkpoint: str | Path | None = None) -> Any:
    """The checkpoint's `Qwen3OmniConfig` (with its generation_config.json's talker defaults), no weights."""
    from v2.models.qwen3_omni.config import Qwen3OmniConfig

    source = source_of(card, checkpoint)
    generation = None
    if not source.startswith(SEED_PREFIX):
        path = resolve_checkpoint(source) / "generation_config.json"
        generation = json.loads(path.read_text()) if path.is_file() else None
    return Qwen3OmniConfig.from_dict(config_dict(card, checkpoint), generation)


@dataclass(frozen=True)
class Parts:
    """The built expert: the thinker, the talker (None: a checkpoint without audio output), code2wav."""

    thinker: Any
    talker: Any
    code2wav: Any
    config: Any


def build_parts(card: OmniCard, *, checkpoint: str | Path | None = None, dtype: Any = None,
                device: Any = "cpu") -> Parts:
    """The thinker, talker and code2wav of the card's checkpoint (or the given one), each part read once."""
    import torch

    from v2.families.qwen3_omni.models import RuntimeThinker, FedTalker
    from v2.models.qwen3_omni.code2wav import Code2Wav
    from v2.models.qwen3_omni.loader import build_part, load_part, open_checkpoint
    from v2.models.qwen3_omni.seeded import fill_seeded_part
    from v2.models.weights import empty_model

    dt = dtype or getattr(torch, card.experts.model.dtype)
    source = source_of(card, checkpoint)
    cfg = checkpoint_config(card, checkpoint)
    if source.startswith(SEED_PREFIX):
        seed = card.seeded[source[len(SEED_PREFIX):]].seed
        thinker = empty_model(RuntimeThinker, cfg.thinker)
        fill_seeded_part(thinker, seed, gain=0.5)
        talker = empty_model(FedTalker, cfg) if cfg.talker is not None else None
        if talker is not None:
            fill_seeded_part(talker, seed + 1, gain=0.5)
        c2w = empty_model(Code2Wav, cfg.code2wav) if cfg.code2wav is not None else None
        if c2w is not None:
            fill_seeded_part(c2w, seed + 2, gain=0.5)
        parts = [m.to(device=device, dtype=dt).eval() if m is not None else None for m in (thinker, talker, c2w)]
        return Parts(parts[0], parts[1], parts[2], cfg)
    ckpt = open_checkpoint(resolve_checkpoint(source))
    thinker = build_part(RuntimeThinker, ckpt.config.thinker, ckpt, "thinker.", dtype=dt, device=device)
    talker = None
    if ckpt.config.talker is not None:
        talker = empty_model(FedTalker, ckpt.config)
        load_part(talker.talker, ckpt, "talker.", dtype=dt, device=device)
        talker = talker.eval()
    c2w = (build_part(Code2Wav, ckpt.config.code2wav, ckpt, "code2wav.", dtype=dt, device=device)
           if ckpt.config.code2wav is not None else None)
    return Parts(thinker, talker, c2w, ckpt.config)


def build_tokenizer(card: OmniCard, checkpoint: str | Path | None = None) -> Any:
    """The text tokenizer (chat_tokenizer.py's), or None when the checkpoint ships none (requests then give
    `prompt_ids`)."""
    from v2.families.qwen3_omni.chat_tokenizer import build_chat_tokenizer

    source = source_of(card, checkpoint)
    folder = None if source.startswith(SEED_PREFIX) else resolve_checkpoint(source)
    kind = card.experts.model.tokenizer
    if folder is None and kind == "release":
        return None
    return build_chat_tokenizer(kind, folder, checkpoint_config(card, checkpoint).ids)
