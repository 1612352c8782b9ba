"""The Qwen3-TTS-Tokenizer-12Hz codec's config, read from the speech tokenizer's `config.json`.

Owns: every structural number of the decoder (`decoder_config`: codebooks, widths, transformer layers and
heads, the sliding window, the up-sampling ratios and rates), the Mimi encoder's (`encoder_config`, read as a
`v2.models.mimi.MimiConfig`), the top-level rates, and the checks that they chain (hop = product of the up-sampling factors = `decode_upsample_rate`, and so on).
Errors name the field. Nothing about the fixture's or the release's sizes is assumed.
Must not know: weights, devices, streaming state, the runtime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import ConfigError
from v2.models.mimi.config import MimiConfig

_FILE = "speech_tokenizer config.json"


def _field(d: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise ConfigError(f"{_FILE}: missing field '{where}{key}'")
    return d[key]


def _int(d: Mapping[str, Any], key: str, where: str, *, minimum: int = 1) -> int:
    v = _field(d, key, where)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{_FILE}: field '{where}{key}' must be an integer >= {minimum}, got {v!r}")
    return v


def _float(d: Mapping[str, Any], key: str, where: str) -> float:
    v = _field(d, key, where)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ConfigError(f"{_FILE}: field '{where}{key}' must be a positive number, got {v!r}")
    return float(v)


def _ints(d: Mapping[str, Any], key: str, where: str) -> tuple[int, ...]:
    v = _field(d, key, where)
    if not isinstance(v, list) or not v or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in v):
        raise ConfigError(f"{_FILE}: field '{where}{key}' must be a non-empty list of positive integers, got {v!r}")
    return tuple(v)


def _flag(d: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise ConfigError(f"{_FILE}: field '{where}{key}' must be true or false, got {v!r}")
    return v


def _expect(d: Mapping[str, Any], key: str, where: str, allowed: tuple[Any, ...], default: Any) -> None:
    v = d.get(key, default)
    if v not in allowed:
        raise ConfigError(f"{_FILE}: field '{where}{key}' must be one of {list(allowed)}, got {v!r}")


def _heads(d: Mapping[str, Any], where: str, hidden: int) -> tuple[int, int, int]:
    heads = _int(d, "num_attention_heads", where)
    kv_heads = _int(d, "num_key_value_heads", where) if "num_key_value_heads" in d else heads
    if heads % kv_heads:
        raise ConfigError(f"{_FILE}: '{where}num_attention_heads' ({heads}) is not a multiple of "
                          f"'{where}num_key_value_heads' ({kv_heads})")
    head_dim = _int(d, "head_dim", where) if d.get("head_dim") is not None else hidden // heads
    if head_dim % 2 or head_dim < 2:
        raise ConfigError(f"{_FILE}: '{where}head_dim' must be even (rotary halves), got {head_dim}")
    if d.get("rope_scaling") not in (None, {}) and d["rope_scaling"].get("rope_type", "default") != "default":
        raise ConfigError(f"{_FILE}: '{where}rope_scaling' is not supported (only the default RoPE)")
    return heads, kv_heads, head_dim


@dataclass(frozen=True)
class DecoderConfig:
    num_quantizers: int        # code groups per frame (1 semantic codebook + the rest)
    codebook_size: int
    codebook_dim: int          # quantizer output width; each codebook holds vectors of codebook_dim // 2
    latent_dim: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    attention_bias: bool
    sliding_window: int        # frame p attends to frames p - sliding_window + 1 .. p
    upsampling_ratios: tuple[int, ...]  # transposed conv + ConvNeXt stages at latent width
    upsample_rates: tuple[int, ...]     # SnakeBeta decoder blocks, halving the channels each
    decoder_dim: int

    @property
    def vq_dim(self) -> int:
        return self.codebook_dim // 2

    @property
    def hop(self) -> int:
        return math.prod(self.upsampling_ratios) * math.prod(self.upsample_rates)

    def block_dims(self, i: int) -> tuple[int, int]:
        """(input, output) channels of decoder block i (0-based over `upsample_rates`)."""
        return self.decoder_dim // 2 ** i, self.decoder_dim // 2 ** (i + 1)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DecoderConfig":
        w = "decoder_config."
        hidden = _int(d, "hidden_size", w)
        heads, kv_heads, head_dim = _heads(d, w, hidden)
        _expect(d, "hidden_act", w, ("silu",), "silu")
        codebook_dim = _int(d, "codebook_dim", w, minimum=2)
        if codebook_dim % 2:
            raise ConfigError(f"{_FILE}: '{w}codebook_dim' must be even (codebooks hold codebook_dim / 2), got {codebook_dim}")
        rates = _ints(d, "upsample_rates", w)
        decoder_dim = _int(d, "decoder_dim", w)
        if decoder_dim % 2 ** len(rates):
            raise ConfigError(f"{_FILE}: '{w}decoder_dim' ({decoder_dim}) must halve {len(rates)} times "
                              f"(one per upsample_rates entry)")
        num_quantizers = _int(d, "num_quantizers", w, minimum=2)
        return cls(num_quantizers=num_quantizers, codebook_size=_int(d, "codebook_size", w),
                   codebook_dim=codebook_dim, latent_dim=_int(d, "latent_dim", w), hidden_size=hidden,
                   num_layers=_int(d, "num_hidden_layers", w), num_heads=heads, num_kv_heads=kv_heads,
                   head_dim=head_dim, intermediate_size=_int(d, "intermediate_size", w),
                   rms_norm_eps=_float(d, "rms_norm_eps", w), rope_theta=_float(d, "rope_theta", w),
                   attention_bias=_flag(d, "attention_bias", w, False), sliding_window=_int(d, "sliding_window", w),
                   upsampling_ratios=_ints(d, "upsampling_ratios", w), upsample_rates=rates, decoder_dim=decoder_dim)


@dataclass(frozen=True)
class Qwen3CodecConfig:
    decoder: DecoderConfig
    encoder: MimiConfig | None      # the Mimi encoder's; None: the config has no `encoder_config` (decode only)
    sample_rate: int                # output (and input) samples per second
    hop: int                        # samples per frame (`decode_upsample_rate`)
    valid_quantizers: int           # code groups per frame the encoder keeps (`encoder_valid_num_quantizers`)

    @property
    def groups(self) -> int:
        return self.decoder.num_quantizers

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.hop

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Qwen3CodecConfig":
        if not isinstance(d, Mapping):
            raise ConfigError(f"{_FILE}: expected a JSON object, got {type(d).__name__}")
        decoder = DecoderConfig.from_dict(_field(d, "decoder_config", ""))
        rate = _int(d, "output_sample_rate", "")
        hop = _int(d, "decode_upsample_rate", "")
        if decoder.hop != hop:
            raise ConfigError(f"{_FILE}: 'decode_upsample_rate' is {hop} but decoder_config's upsampling_ratios x "
                              f"upsample_rates give {decoder.hop} samples per frame")
        valid = _int(d, "encoder_valid_num_quantizers", "") if "encoder_valid_num_quantizers" in d else decoder.num_quantizers
        if valid != decoder.num_quantizers:
            raise ConfigError(f"{_FILE}: 'encoder_valid_num_quantizers' ({valid}) must equal "
                              f"'decoder_config.num_quantizers' ({decoder.num_quantizers})")
        encoder = None
        if d.get("encoder_config") is not None:
            encoder = MimiConfig.from_dict(d["encoder_config"], file=_FILE, where="encoder_config.")
            in_rate = _int(d, "input_sample_rate", "")
            if encoder.hop != _int(d, "encode_downsample_rate", "") or encoder.hop != hop:
                raise ConfigError(f"{_FILE}: 'encode_downsample_rate' ({d['encode_downsample_rate']}) must equal the "
                                  f"encoder's hop (2 x product of encoder_config.upsampling_ratios = {encoder.hop}) "
                                  f"and 'decode_upsample_rate' ({hop})")
            if in_rate != rate or encoder.sample_rate != rate:
                raise ConfigError(f"{_FILE}: 'input_sample_rate' and 'encoder_config.sampling_rate' must equal "
                                  f"'output_sample_rate' ({rate})")
            if encoder.num_quantizers < valid or encoder.codebook_size != decoder.codebook_size:
                raise ConfigError(f"{_FILE}: 'encoder_config' must have >= {valid} quantizers of "
                                  f"{decoder.codebook_size} codes")
        return cls(decoder=decoder, encoder=encoder, sample_rate=rate, hop=hop, valid_quantizers=valid)
