"""The Qwen3-ForcedAligner config: the release `config.json` (Qwen3-ASR layout, `thinker_config`), parsed once.

Owns: the audio encoder's sizes (Qwen3-Omni's `AudioEncoderConfig`: the same AuT schema under
`thinker_config.audio_config`), the text decoder's sizes (a Qwen3 `BackboneConfig` read as Qwen3-Omni reads
its thinker's), the head's class count and milliseconds per class, the special ids the prompt is made of;
an error naming the field when one is missing or invalid. The declared
interleaved M-RoPE (`mrope_section`) is not kept: the aligner's three position rows are always equal, so it
is the plain 1-D RoPE (designs/model.md, "Forced aligner").
Must not know: weights, tensors, devices, words, the runtime, cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import BackboneConfig, ConfigError, _get, _int
from v2.models.qwen3_omni.config import AudioEncoderConfig, _decoder

THINKER = "thinker_config"


@dataclass(frozen=True)
class AlignerIds:
    """Prompt ids (release values 151669 / 151676 / 151670 / 151705)."""

    audio_start: int
    audio_pad: int
    audio_end: int
    timestamp: int


@dataclass(frozen=True)
class ForcedAlignerConfig:
    audio: AudioEncoderConfig
    text: BackboneConfig
    ids: AlignerIds
    classes: int            # head width (release 5000)
    segment_ms: int         # milliseconds per class (release 80)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ForcedAlignerConfig":
        if not isinstance(d, Mapping):
            raise ConfigError("config.json: the top level must be an object")
        kind = _get(d, f"{THINKER}.model_type", "qwen3_forced_aligner")
        if kind != "qwen3_forced_aligner":
            raise ConfigError(f"config.json: '{THINKER}.model_type' must be 'qwen3_forced_aligner', got {kind!r}")
        audio = AudioEncoderConfig.from_dict(d)
        text = _decoder(d, f"{THINKER}.text_config")
        if audio.output_dim != text.hidden_size:
            raise ConfigError(f"config.json: '{THINKER}.audio_config.output_dim' ({audio.output_dim}) must equal "
                              f"'{THINKER}.text_config.hidden_size' ({text.hidden_size})")
        ids = AlignerIds(audio_start=_int(d, f"{THINKER}.audio_start_token_id", minimum=0),
                         audio_pad=_int(d, f"{THINKER}.audio_token_id", minimum=0),
                         audio_end=_int(d, f"{THINKER}.audio_end_token_id", minimum=0),
                         timestamp=_int(d, "timestamp_token_id", minimum=0))
        for name, value in vars(ids).items():
            if value >= text.vocab_size:
                raise ConfigError(f"config.json: the {name} id {value} is outside the vocabulary "
                                  f"('{THINKER}.text_config.vocab_size' {text.vocab_size})")
        return cls(audio=audio, text=text, ids=ids, classes=_int(d, f"{THINKER}.classify_num"),
                   segment_ms=_int(d, "timestamp_segment_time"))
