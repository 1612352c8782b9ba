"""The Qwen3-TTS family's card section: its experts, its loops' settings, and building the experts.

Owns: the experts `talker` (the release checkpoint: talker, code predictor, speaker encoder; the text
tokenizer from its files) and `codec` (the 12 Hz speech tokenizer: decoder, and its encoder for reference
audio; by default the talker checkpoint's `speech_tokenizer/`), the loops `talker` -> `codec` with `encode`
in front and their settings (the graph is the card's: `codec` may be left out, then `talker` feeds nothing
and no audio is made), the card as a whole (`Qwen3Card`), the sampling defaults (the card's, else the
checkpoint's `generation_config.json` over the reference API's hard defaults), reading the checkpoint's
config without its weights (`checkpoint_config`), and instantiating experts.
Everything structural (widths, layers, code groups, speakers, languages, `tts_model_size` rules) comes from
the checkpoint's config, never from the card. No code is ever imported from a card.
Must not know: the runtime, requests, scheduling.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from v2.card import (
    SEED_PREFIX, ChunkLoopDecl, DType, LoopDecl, LoopTable, ModelCard, PagedLoopDecl, StageSampling, _Frozen,
)
from v2.checkpoints import resolve_checkpoint
from v2.kit.checks import check_seeded
from v2.fields import check_penalty

SPEECH_TOKENIZER = "speech_tokenizer"  # the codec's folder inside a release checkpoint


class TalkerExpert(_Frozen):
    """checkpoint: a directory, a hub repo id `org/name` in the Hugging Face cache, or `seed:NAME`.
    tokenizer: "release" (the checkpoint's tokenizer.json, or vocab.json + merges.txt; none: requests give
    `text_ids`) or "bytes" (UTF-8 bytes as ids: only for seeded weights, which have no files)."""

    class_: Literal["Qwen3TTS"] = Field(alias="class")
    checkpoint: str = Field(min_length=1)
    dtype: DType
    tokenizer: Literal["release", "bytes"] = "release"


class CodecExpert(_Frozen):
    """checkpoint: None = the talker checkpoint's `speech_tokenizer/` (the release layout)."""

    class_: Literal["Qwen3CodecDecoder"] = Field(alias="class")
    checkpoint: str | None = Field(default=None, min_length=1)
    dtype: DType
    encoder: bool = True  # also load the encoder (reference audio -> codes) from the same checkpoint


class Experts(_Frozen):
    talker: TalkerExpert
    codec: CodecExpert


class SamplingSection(_Frozen):
    """The card's own defaults (absent: the checkpoint's generation_config.json)."""

    talker: StageSampling
    code_predictor: StageSampling
    repetition_penalty: float = Field(gt=0, allow_inf_nan=False)  # the talker's group 0 only

    _penalty = field_validator("repetition_penalty")(check_penalty)


class TalkerSettings(PagedLoopDecl):
    """The talker loop (v2.card.PagedLoopDecl's settings; `max_text_chars` caps text, instruction and
    reference_text)."""

    class_: Literal["TalkerLoop"] = Field(alias="class")
    max_segment_chars: int = Field(default=300, ge=1)  # longer text is spoken as segments of whole sentences
    sampling: SamplingSection | None = None


class CodecSettings(ChunkLoopDecl):
    class_: Literal["CodecLoop"] = Field(alias="class")


class EncodeSettings(LoopDecl):
    """Reference audio (voice clone): limits at submit; one recording per request."""

    front: ClassVar[bool] = True
    class_: Literal["Qwen3EncodeLoop"] = Field(default="Qwen3EncodeLoop", alias="class")
    max_reference_seconds: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    max_streams: int = Field(default=8, ge=1)  # recordings encoding at once


class Loops(LoopTable):
    talker: TalkerSettings
    codec: CodecSettings | None = None  # None: no audio (codes and trajectories only)
    encode: EncodeSettings = EncodeSettings()


class Qwen3Card(ModelCard):
    """A Qwen3-TTS 12 Hz card: the common part and this family's experts and loops."""

    family: Literal["qwen3_tts"]
    experts: Experts
    loops: Loops

    @model_validator(mode="after")
    def _consistent(self) -> "Qwen3Card":
        talker = self.experts.talker
        check_seeded(talker.tokenizer, talker.checkpoint, self.experts.codec.checkpoint, "talker",
                     "seeded talker weights have no speech_tokenizer/")
        return self


CARD = Qwen3Card


def _seeded(card: Qwen3Card, source: str) -> Any:
    return card.seeded[source[len(SEED_PREFIX):]]


def _dtype(expert: Any, dtype: Any) -> Any:
    import torch

    return dtype or getattr(torch, expert.dtype)


def talker_source(card: Qwen3Card, checkpoint: str | Path | None = None) -> str:
    return str(checkpoint) if checkpoint is not None else card.experts.talker.checkpoint


def codec_source(card: Qwen3Card, checkpoint: str | Path | None = None,
                 codec_checkpoint: str | Path | None = None) -> str:
    """The codec's checkpoint: given; else the given talker checkpoint's speech_tokenizer/; else the card's;
    else the card's talker checkpoint's speech_tokenizer/."""
    if codec_checkpoint is not None:
        return str(codec_checkpoint)
    if checkpoint is not None and not str(checkpoint).startswith(SEED_PREFIX):
        return str(resolve_checkpoint(checkpoint) / SPEECH_TOKENIZER)
    if card.experts.codec.checkpoint is not None:
        return card.experts.codec.checkpoint
    return str(resolve_checkpoint(card.experts.talker.checkpoint) / SPEECH_TOKENIZER)


def build_model(card: Qwen3Card, *, checkpoint: str | Path | None = None, dtype: Any = None,
                device: Any = "cpu") -> Any:
    """The talker expert (a `Qwen3TTS`: talker, code predictor, speaker encoder)."""
    from v2.models.qwen3_tts.model import Qwen3TTS

    source, dt = talker_source(card, checkpoint), _dtype(card.experts.talker, dtype)
    if source.startswith(SEED_PREFIX):
        seeded = _seeded(card, source)
        return Qwen3TTS.from_seed(seeded.config, seeded.seed, dtype=dt, device=device)
    return Qwen3TTS.from_pretrained(resolve_checkpoint(source), dtype=dt, device=device)


def build_codec(card: Qwen3Card, *, checkpoint: str | Path | None = None, codec_checkpoint: str | Path | None = None,
                dtype: Any = None, device: Any = "cpu") -> Any:
    """The codec's decoder (a `Qwen3CodecDecoder`)."""
    from v2.models.qwen3_codec.decoder import Qwen3CodecDecoder

    source, dt = codec_source(card, checkpoint, codec_checkpoint), _dtype(card.experts.codec, dtype)
    if source.startswith(SEED_PREFIX):
        seeded = _seeded(card, source)
        return Qwen3CodecDecoder.from_seed(seeded.config, seeded.seed, dtype=dt, device=device)
    return Qwen3CodecDecoder.from_pretrained(resolve_checkpoint(source), dtype=dt, device=device)


def build_encoder(card: Qwen3Card, *, checkpoint: str | Path | None = None, codec_checkpoint: str | Path | None = None,
                  dtype: Any = None, device: Any = "cpu") -> Any:
    """The codec's encoder (a `Qwen3CodecEncoder`), from the codec's checkpoint."""
    from v2.models.qwen3_codec.encoder import Qwen3CodecEncoder

    source, dt = codec_source(card, checkpoint, codec_checkpoint), _dtype(card.experts.codec, dtype)
    if source.startswith(SEED_PREFIX):
        seeded = _seeded(card, source)
        return Qwen3CodecEncoder.from_seed(seeded.config, seeded.seed, dtype=dt, device=device)
    return Qwen3CodecEncoder.from_pretrained(resolve_checkpoint(source), dtype=dt, device=device)


class ByteIds:
    """UTF-8 bytes as text ids (the seeded card's tokenizer: seeded weights have no tokenizer files); the
    template's role words are one id each, as in the release vocab ("assistant" 305, "user" 306)."""

    ROLES = {"assistant\n": [305, 10], "user\n": [306, 10]}

    def encode(self, text: str, add_special_tokens: bool = False) -> Any:
        class _Out:
            ids = self.ROLES.get(text) or list(text.encode("utf-8"))
        return _Out()

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", "replace")


def build_tokenizer(card: Qwen3Card, checkpoint: str | Path | None = None, *, ids: Any = None) -> Any:
    """The text tokenizer (`Qwen3TTSTokenizer`), or None when the checkpoint ships no tokenizer files
    (requests then give `text_ids`). `ids`: the config's template ids (`Qwen3TTSConfig.text`)."""
    from v2.models.qwen3_tts.tokenizer import Qwen3TTSTokenizer

    source = talker_source(card, checkpoint)
    if ids is None:
        ids = checkpoint_config(card, checkpoint).text
    if source.startswith(SEED_PREFIX):
        return Qwen3TTSTokenizer(ByteIds(), ids) if card.experts.talker.tokenizer == "bytes" else None
    try:
        return Qwen3TTSTokenizer.from_dir(resolve_checkpoint(source), ids)
    except FileNotFoundError:
        return None


def checkpoint_config(card: Qwen3Card, checkpoint: str | Path | None = None) -> Any:
    """The talker checkpoint's `Qwen3TTSConfig` (its config.json, or the seeded table's), read without any
    weights: the code groups, the speaker and language tables, whether it has a speaker encoder."""
    from v2.models.qwen3_tts.config import Qwen3TTSConfig

    return Qwen3TTSConfig.from_dict(_config(card, talker_source(card, checkpoint)))


def _config(card: Qwen3Card, source: str) -> dict[str, Any]:
    if source.startswith(SEED_PREFIX):
        return dict(_seeded(card, source).config)
    return json.loads((resolve_checkpoint(source) / "config.json").read_text())


def generation_config(card: Qwen3Card, checkpoint: str | Path | None = None) -> dict[str, Any] | None:
    """The checkpoint's generation_config.json (None: seeded weights, or no file)."""
    source = talker_source(card, checkpoint)
    if source.startswith(SEED_PREFIX):
        return None
    path = resolve_checkpoint(source) / "generation_config.json"
    return json.loads(path.read_text()) if path.is_file() else None
