"""The MOSS-TTS-Local model config: parsed once from a release `config.json` dict.

Owns: reading every size, id and constant the model needs out of the release schema (nested
`qwen3_config` and `gpt2_config`), with an error naming the field when one is missing or wrong. The error,
the field readers and the decoder's sizes are the shared ones (`v2.models.config`).
Must not know: weights, devices, the runtime, cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import BackboneConfig, ConfigError, _float, _get, _int


def backbone_config(d: Mapping[str, Any]) -> BackboneConfig:
    """The backbone's sizes from the release's nested `qwen3_config` section."""
    p = "qwen3_config"
    theta = _get(d, f"{p}.rope_theta", None)
    if theta is None:
        theta = _get(d, f"{p}.rope_parameters.rope_theta", None)
    if theta is None:
        raise ConfigError(f"config.json: missing field '{p}.rope_theta' (or '{p}.rope_parameters.rope_theta')")
    hidden = _int(d, f"{p}.hidden_size")
    heads = _int(d, f"{p}.num_attention_heads")
    kv_heads = _int(d, f"{p}.num_key_value_heads", heads)
    if heads % kv_heads:
        raise ConfigError(f"config.json: '{p}.num_attention_heads' ({heads}) is not a multiple of "
                          f"'{p}.num_key_value_heads' ({kv_heads})")
    cfg = BackboneConfig(
        hidden_size=hidden,
        num_layers=_int(d, f"{p}.num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=_int(d, f"{p}.head_dim", hidden // heads),
        intermediate_size=_int(d, f"{p}.intermediate_size"),
        vocab_size=_int(d, f"{p}.vocab_size"),
        rms_norm_eps=_float(d, f"{p}.rms_norm_eps", 1e-6),
        rope_theta=float(theta),
    )
    if cfg.head_dim % 2:
        raise ConfigError(f"config.json: '{p}.head_dim' must be even for RoPE, got {cfg.head_dim}")
    return cfg


@dataclass(frozen=True)
class LocalConfig:
    """GPT-J-style local transformer sizes (release section `gpt2_config`)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    layer_norm_eps: float
    activation: str
    rope_base: float

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LocalConfig":
        p = "gpt2_config"
        hidden = _int(d, f"{p}.n_embd")
        heads = _int(d, f"{p}.n_head")
        if hidden % heads or (hidden // heads) % 2:
            raise ConfigError(f"config.json: '{p}.n_embd' ({hidden}) must split into '{p}.n_head' ({heads}) "
                              "heads of even size")
        layers = _get(d, "local_transformer_layers", None)
        activation = _get(d, f"{p}.activation_function", "gelu_new")
        if activation not in _ACTIVATIONS:
            raise ConfigError(f"config.json: '{p}.activation_function' {activation!r} is not one of "
                              f"{sorted(_ACTIVATIONS)}")
        return cls(
            hidden_size=hidden,
            num_layers=_int(d, "local_transformer_layers") if layers is not None else _int(d, f"{p}.n_layer"),
            num_heads=heads,
            intermediate_size=_int(d, f"{p}.n_inner", 4 * hidden),
            layer_norm_eps=_float(d, f"{p}.layer_norm_epsilon", 1e-5),
            activation=activation,
            rope_base=_float(d, f"{p}.rope_base", 1e6),
        )


_ACTIVATIONS = {"silu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu"}


@dataclass(frozen=True)
class SpecialIds:
    """Channel-0 token ids the prompt layout and the frame loop use."""

    pad: int
    im_start: int
    im_end: int
    audio_start: int
    audio_end: int
    audio_user_slot: int
    audio_assistant_slot: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SpecialIds":
        return cls(
            pad=_int(d, "pad_token_id", minimum=0),
            im_start=_int(d, "im_start_token_id", minimum=0),
            im_end=_int(d, "im_end_token_id", minimum=0),
            audio_start=_int(d, "audio_start_token_id", minimum=0),
            audio_end=_int(d, "audio_end_token_id", minimum=0),
            audio_user_slot=_int(d, "audio_user_slot_token_id", minimum=0),
            audio_assistant_slot=_int(d, "audio_assistant_slot_token_id", minimum=0),
        )


@dataclass(frozen=True)
class MossTTSLocalConfig:
    """Everything the model reads from config.json."""

    backbone: BackboneConfig
    local: LocalConfig
    ids: SpecialIds
    n_vq: int
    codebook_size: int
    audio_pad_code: int
    sampling_rate: int

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    @property
    def row_width(self) -> int:
        """Ints per sequence row: channel 0 plus one per codebook."""
        return 1 + self.n_vq

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MossTTSLocalConfig":
        if not isinstance(d, Mapping):
            raise ConfigError("config.json: top level must be an object")
        model_type = _get(d, "model_type", "moss_tts_local")
        if model_type != "moss_tts_local":
            raise ConfigError(f"config.json: field 'model_type' must be 'moss_tts_local', got {model_type!r}")
        backbone = backbone_config(d)
        local = LocalConfig.from_dict(d)
        if local.hidden_size != backbone.hidden_size:
            raise ConfigError(f"config.json: 'gpt2_config.n_embd' ({local.hidden_size}) must equal "
                              f"'qwen3_config.hidden_size' ({backbone.hidden_size})")
        n_vq = _int(d, "n_vq")
        size = _int(d, "audio_vocab_size")
        sizes = _get(d, "audio_codebook_sizes", [size] * n_vq)
        if list(sizes) != [size] * n_vq:
            raise ConfigError(f"config.json: 'audio_codebook_sizes' must be {n_vq} x {size}, got {sizes!r}")
        pad = _int(d, "audio_pad_code", _get(d, "audio_pad_token_id", size), minimum=0)
        if pad < size:
            raise ConfigError(f"config.json: 'audio_pad_code' ({pad}) must lie outside the codebook (>= {size})")
        head_mode = _get(d, "local_text_head_mode", "binary")
        if head_mode != "binary":
            raise ConfigError(f"config.json: 'local_text_head_mode' must be 'binary', got {head_mode!r}")
        ids = SpecialIds.from_dict(d)
        for name, value in vars(ids).items():
            if value >= backbone.vocab_size:
                raise ConfigError(f"config.json: special id '{name}' ({value}) is outside the vocab "
                                  f"({backbone.vocab_size})")
        return cls(backbone=backbone, local=local, ids=ids, n_vq=n_vq, codebook_size=size,
                   audio_pad_code=pad, sampling_rate=_int(d, "sampling_rate", 48000))
