"""Qwen3-TTS's own command-line options (found by `v2.registry.family_options`; no torch here)."""

from __future__ import annotations

from v2.registry import FamilyOption

OPTIONS = (
    FamilyOption("--speaker", "speaker", "a speaker of the checkpoint, e.g. vivian (default: none; a CustomVoice "
                                         "checkpoint needs one)"),
    FamilyOption("--text-feed", "text_feed", "feed the text per frame or put it all in the prompt (default: the "
                                             "mode's)", choices=("streaming", "whole")),
)
