"""The plugin family's card section: MOSS-TTS-Local's, under this family's name."""

from __future__ import annotations

from typing import Literal

from v2.families.moss_tts_local.card import MossCard, build_codec, build_encoder, build_model, build_tokenizer


class PluginCard(MossCard):
    family: Literal["plugin_tts"]  # type: ignore[assignment]


CARD = PluginCard
__all__ = ["CARD", "build_codec", "build_encoder", "build_model", "build_tokenizer"]
