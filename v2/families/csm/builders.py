"""Building the experts a CSM card names: the model, Mimi, the text tokenizer.

Owns: `build_model` (a release checkpoint directory or hub id through `Csm.from_pretrained`, or seeded
weights from the card's table), `build_codec` (Mimi: the model checkpoint's `codec_model.*` with its
`codec_config`, a Mimi checkpoint of its own, or a seeded table), `build_tokenizer` (the checkpoint's
tokenizer.json, None without one; UTF-8 bytes for a seeded card that asks for them: `ByteTokenizer`).
Must not know: the runtime, requests, scheduling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from v2.checkpoints import resolve_checkpoint
from v2.families.csm.card import CsmCard, codec_source, is_seeded, model_source, seeded


def _dtype(expert: Any, dtype: Any) -> Any:
    import torch

    return dtype or getattr(torch, expert.dtype)


def build_model(card: CsmCard, *, checkpoint: str | Path | None = None, dtype: Any = None, device: Any = "cpu") -> Any:
    """The model expert (a `Csm`: backbone, depth decoder, their tables and heads)."""
    from v2.models.csm.model import Csm

    source, dt = model_source(card, checkpoint), _dtype(card.experts.model, dtype)
    if is_seeded(source):
        table = seeded(card, source)
        return Csm.from_seed(dict(table.config), table.seed, dtype=dt, device=device)
    return Csm.from_pretrained(resolve_checkpoint(source), dtype=dt, device=device)


def build_codec(card: CsmCard, *, checkpoint: str | Path | None = None, codec_checkpoint: str | Path | None = None,
                dtype: Any = None, device: Any = "cpu") -> Any:
    """Mimi (a `MimiModel`: decoder and encoder)."""
    import json

    from v2.models.mimi.model import MimiModel

    source, dt = codec_source(card, checkpoint, codec_checkpoint), _dtype(card.experts.codec, dtype)
    if is_seeded(source):
        table = seeded(card, source)
        config = dict(table.config)
        return MimiModel.from_seed(config.get("codec_config", config), table.seed, dtype=dt, device=device)
    path = resolve_checkpoint(source)
    nested = "codec_config" in json.loads((path / "config.json").read_text())
    return MimiModel.from_pretrained(path, prefix="codec_model." if nested else "",
                                     config_key="codec_config" if nested else None, dtype=dt, device=device)


class ByteTokenizer:
    """UTF-8 bytes as text ids (the seeded card's tokenizer: seeded weights ship no tokenizer files)."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", "replace")

    def turn_ids(self, speaker: str | int, text: str) -> tuple[int, ...]:
        return tuple(self.encode(f"[{speaker}]{text}"))


def build_tokenizer(card: CsmCard, checkpoint: str | Path | None = None) -> Any:
    """The text tokenizer (`CsmTokenizer` from tokenizer.json, or `ByteTokenizer`), or None when the checkpoint
    ships no tokenizer.json (requests then give `text_ids`)."""
    from v2.models.csm.tokenizer import CsmTokenizer

    source = model_source(card, checkpoint)
    if is_seeded(source):
        return ByteTokenizer() if card.experts.model.tokenizer == "bytes" else None
    return CsmTokenizer.from_dir(resolve_checkpoint(source))
