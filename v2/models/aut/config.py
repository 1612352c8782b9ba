"""The AuT audio encoder's config: its widths, depth, windows and log-mel front end, read from a release's
`config.json` (`thinker_config.audio_config`: the same schema in every release that carries it).

Owns: `AudioEncoderConfig` and an error naming the field when one is missing or not supported.
Must not know: weights, tensors, the text decoders that read the encoder's rows, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import ConfigError, _get, _int

AUDIO_CONFIG = "thinker_config.audio_config"  # where the releases keep it


@dataclass(frozen=True)
class AudioEncoderConfig:
    """The audio encoder (AuT, `thinker.audio_tower`) and its log-mel front end (16 kHz, hop 160, n_fft 400)."""

    num_mel_bins: int
    d_model: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    downsample_hidden_size: int
    output_dim: int
    n_window: int
    n_window_infer: int
    max_source_positions: int
    sampling_rate: int = 16000
    hop_length: int = 160
    n_fft: int = 400

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AudioEncoderConfig":
        p = AUDIO_CONFIG
        act = _get(d, f"{p}.activation_function", "gelu")
        if act != "gelu":
            raise ConfigError(f"config.json: '{p}.activation_function' must be 'gelu', got {act!r}")
        cfg = cls(num_mel_bins=_int(d, f"{p}.num_mel_bins"), d_model=_int(d, f"{p}.d_model"),
                  num_layers=_int(d, f"{p}.encoder_layers"), num_heads=_int(d, f"{p}.encoder_attention_heads"),
                  ffn_dim=_int(d, f"{p}.encoder_ffn_dim"),
                  downsample_hidden_size=_int(d, f"{p}.downsample_hidden_size"),
                  output_dim=_int(d, f"{p}.output_dim"), n_window=_int(d, f"{p}.n_window"),
                  n_window_infer=_int(d, f"{p}.n_window_infer"),
                  max_source_positions=_int(d, f"{p}.max_source_positions"))
        if cfg.d_model % cfg.num_heads:
            raise ConfigError(f"config.json: '{p}.d_model' ({cfg.d_model}) is not a multiple of "
                              f"'{p}.encoder_attention_heads' ({cfg.num_heads})")
        if cfg.n_window_infer % (2 * cfg.n_window):
            raise ConfigError(f"config.json: '{p}.n_window_infer' must be a multiple of 2 * n_window")
        return cfg
