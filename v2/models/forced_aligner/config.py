"""The Qwen3-ForcedAligner config: the release `config.json` (Qwen3-ASR layout, `thinker_config`), parsed once.

Owns: the audio encoder's sizes (the shared AuT `AudioEncoderConfig`: the same schema under
`thinker_config.audio_config`), the text decoder's sizes (a Qwen3 `BackboneConfig` read as a
thinker's is, in the release's 4.x schema and transformers' 5.x `rope_parameters`), the head's class count and milliseconds per class, the special ids the prompt is made of;
an error naming the field when one is missing or invalid. The declared
interleaved M-RoPE (`mrope_section`) is not kept: the aligner's three position rows are always equal, so it
is the plain 1-D RoPE (designs/model.md, "Forced aligner").
Must not know: weights, tensors, devices, words, the runtime, cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import BackboneConfig, ConfigError, _float, _get, _int
from v2.models.aut.config import AudioEncoderConfig

THINKER = "thinker_config"


def _text(d: Mapping[str, Any]) -> BackboneConfig:
    """The Qwen3 decoder's sizes from `thinker_config.text_config` (no biases, SiLU, default RoPE)."""
    p = f"{THINKER}.text_config"
    if _get(d, f"{p}.attention_bias", False):
        raise ConfigError(f"config.json: '{p}.attention_bias' true is not supported (the release has none)")
    if _get(d, f"{p}.hidden_act", "silu") != "silu":
        raise ConfigError(f"config.json: '{p}.hidden_act' must be 'silu', got {_get(d, f'{p}.hidden_act')!r}")
    rope = _get(d, f"{p}.rope_parameters", None)
    where = f"{p}.rope_parameters" if rope is not None else f"{p}.rope_scaling"
    rope = rope if rope is not None else (_get(d, f"{p}.rope_scaling", None) or {})
    if not isinstance(rope, Mapping):
        raise ConfigError(f"config.json: field '{where}' must be an object, got {rope!r}")
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ConfigError(f"config.json: '{where}.rope_type' must be 'default', got {rope.get('rope_type')!r}")
    theta = _float(rope, "rope_theta") if "rope_theta" in rope else _float(d, f"{p}.rope_theta", 10000.0)
    hidden, heads = _int(d, f"{p}.hidden_size"), _int(d, f"{p}.num_attention_heads")
    kv_heads = _int(d, f"{p}.num_key_value_heads", heads)
    if heads % kv_heads:
        raise ConfigError(f"config.json: '{p}.num_attention_heads' ({heads}) is not a multiple of "
                          f"'{p}.num_key_value_heads' ({kv_heads})")
    head_dim = _int(d, f"{p}.head_dim", hidden // heads)
    if head_dim % 2:
        raise ConfigError(f"config.json: '{p}.head_dim' must be even for RoPE, got {head_dim}")
    return BackboneConfig(hidden_size=hidden, num_layers=_int(d, f"{p}.num_hidden_layers"), num_heads=heads,
                          num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=_int(d, f"{p}.intermediate_size"),
                          vocab_size=_int(d, f"{p}.vocab_size"), rms_norm_eps=_float(d, f"{p}.rms_norm_eps", 1e-6),
                          rope_theta=theta)


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
        text = _text(d)
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
