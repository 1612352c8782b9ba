"""The Sesame CSM config: the release `config.json` and `generation_config.json`, parsed once.

Owns: reading every size of the backbone (top level) and the depth decoder (`depth_decoder_config`) into
the shared decoder sizes (`BackboneConfig`) plus each stack's RoPE scaling, the codebook layout (number of
codebooks, ids per codebook), the text vocab and the special ids, with an error naming the field when one
is missing, wrong or not supported; `CsmSampling` (one head for codebook 0, one for the depth decoder's
codebooks) and `GenerationDefaults` (explicit > generation_config.json, top-level and `depth_decoder_*`
keys > transformers' `GenerationConfig` class defaults for a key the file does not have).
Must not know: weights, tensors, devices, the codec, the runtime, cards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from v2.models.config import _MISSING, BackboneConfig, ConfigError, _float, _get, _int
from v2.models.rope import Llama3Scaling
from v2.sampling_settings import HeadSampling

DEPTH = "depth_decoder_config"


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _rope(d: Mapping[str, Any], p: str) -> tuple[float, Llama3Scaling | None]:
    """(theta, scaling) from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (earlier)."""
    params = _get(d, _path(p, "rope_parameters"), None)
    if params is not None:
        if not isinstance(params, Mapping):
            raise ConfigError(f"config.json: field '{_path(p, 'rope_parameters')}' must be an object, got {params!r}")
        where, theta = _path(p, "rope_parameters"), _float(d, _path(p, "rope_parameters.rope_theta"))
        scaling = params
    else:
        theta = _float(d, _path(p, "rope_theta"))
        where = _path(p, "rope_scaling")
        scaling = _get(d, where, None) or {}
        if not isinstance(scaling, Mapping):
            raise ConfigError(f"config.json: field '{where}' must be an object or null, got {scaling!r}")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise ConfigError(f"config.json: field '{where}.rope_type' must be 'llama3' or 'default', got {rope_type!r}")
    low, high = _float(d, f"{where}.low_freq_factor"), _float(d, f"{where}.high_freq_factor")
    if not high > low:
        raise ConfigError(f"config.json: field '{where}.high_freq_factor' ({high}) must exceed "
                          f"'{where}.low_freq_factor' ({low})")
    return theta, Llama3Scaling(factor=_float(d, f"{where}.factor"), low_freq_factor=low, high_freq_factor=high,
                                original_max_position_embeddings=_int(d, f"{where}.original_max_position_embeddings"))


def _llama(d: Mapping[str, Any], p: str, vocab: int) -> tuple[BackboneConfig, Llama3Scaling | None]:
    """A Llama decoder section (the top level for the backbone, `depth_decoder_config` for the depth decoder)."""
    for flag in ("attention_bias", "mlp_bias"):
        if _get(d, _path(p, flag), False) is not False:
            raise ConfigError(f"config.json: field '{_path(p, flag)}' must be false (the release has no biases)")
    act = _get(d, _path(p, "hidden_act"), "silu")
    if act != "silu":
        raise ConfigError(f"config.json: field '{_path(p, 'hidden_act')}' must be 'silu', got {act!r}")
    heads = _int(d, _path(p, "num_attention_heads"))
    kv_heads = _int(d, _path(p, "num_key_value_heads"))
    if heads % kv_heads:
        raise ConfigError(f"config.json: field '{_path(p, 'num_attention_heads')}' ({heads}) is not a multiple of "
                          f"'{_path(p, 'num_key_value_heads')}' ({kv_heads})")
    head_dim = _int(d, _path(p, "head_dim"))
    if head_dim % 2:
        raise ConfigError(f"config.json: field '{_path(p, 'head_dim')}' must be even for RoPE, got {head_dim}")
    theta, scaling = _rope(d, p)
    cfg = BackboneConfig(
        hidden_size=_int(d, _path(p, "hidden_size")), num_layers=_int(d, _path(p, "num_hidden_layers")),
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=_int(d, _path(p, "intermediate_size")), vocab_size=vocab,
        rms_norm_eps=_float(d, _path(p, "rms_norm_eps")), rope_theta=theta)
    return cfg, scaling


@dataclass(frozen=True)
class CsmIds:
    """Text ids of the prompt layout and the codebook ids of the frame loop."""

    bos: int             # <|begin_of_text|>, opens every turn
    eos: int             # <|end_of_text|>, closes every turn's text
    audio: int           # <|AUDIO|>: one per context frame, its row is that frame's audio row
    audio_eos: int       # <|audio_eos|>: after a turn's audio, its row is the all-`codebook_eos` frame's
    codebook_eos: int    # the stop code: a frame whose codebooks 0..N-2 all hold it ends the sequence
    codebook_pad: int    # what the reference feeds a batch row that has stopped

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], text_vocab: int, vocab: int) -> "CsmIds":
        ids = cls(bos=_int(d, "bos_token_id", minimum=0), eos=_int(d, "eos_token_id", minimum=0),
                  audio=_int(d, "audio_token_id", minimum=0), audio_eos=_int(d, "audio_eos_token_id", minimum=0),
                  codebook_eos=_int(d, "codebook_eos_token_id", minimum=0),
                  codebook_pad=_int(d, "codebook_pad_token_id", minimum=0))
        for name in ("bos", "eos", "audio", "audio_eos"):
            if getattr(ids, name) >= text_vocab:
                raise ConfigError(f"config.json: field '{name}_token_id' ({getattr(ids, name)}) is outside the text "
                                  f"vocab ('text_vocab_size' {text_vocab})")
        for name in ("codebook_eos", "codebook_pad"):
            if getattr(ids, name) >= vocab:
                raise ConfigError(f"config.json: field '{name}_token_id' ({getattr(ids, name)}) is outside a "
                                  f"codebook's ids ('vocab_size' {vocab})")
        if len({ids.bos, ids.eos, ids.audio, ids.audio_eos}) < 4:
            raise ConfigError("config.json: fields 'bos_token_id', 'eos_token_id', 'audio_token_id' and "
                              "'audio_eos_token_id' must be four different ids")
        return ids


@dataclass(frozen=True)
class CsmConfig:
    """Everything the model reads from config.json."""

    backbone: BackboneConfig             # vocab_size = ids per codebook (lm_head's rows)
    depth: BackboneConfig                # vocab_size = ids per codebook
    backbone_rope: Llama3Scaling | None
    depth_rope: Llama3Scaling | None
    num_codebooks: int
    vocab_size: int                      # ids per codebook (codec codes + spare ids)
    text_vocab_size: int
    ids: CsmIds
    tie_codebooks_embeddings: bool

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    @property
    def audio_table_rows(self) -> int:
        """Rows of each audio table: codebook k's code c is row k * vocab_size + c."""
        return self.num_codebooks * self.vocab_size

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CsmConfig":
        if not isinstance(d, Mapping):
            raise ConfigError("config.json: top level must be an object")
        model_type = _get(d, "model_type", "csm")
        if model_type != "csm":
            raise ConfigError(f"config.json: field 'model_type' must be 'csm', got {model_type!r}")
        if not isinstance(_get(d, DEPTH), Mapping):
            raise ConfigError(f"config.json: field '{DEPTH}' must be an object")
        n = _int(d, "num_codebooks", minimum=2)
        vocab = _int(d, "vocab_size")
        text_vocab = _int(d, "text_vocab_size")
        backbone, backbone_rope = _llama(d, "", vocab)
        depth, depth_rope = _llama(d, DEPTH, vocab)
        for name, want, what in (("backbone_hidden_size", backbone.hidden_size, "hidden_size"),
                                 ("num_codebooks", n, "num_codebooks"), ("vocab_size", vocab, "vocab_size")):
            got = _int(d, f"{DEPTH}.{name}")
            if got != want:
                raise ConfigError(f"config.json: field '{DEPTH}.{name}' ({got}) must equal '{what}' ({want})")
        tie = _get(d, "tie_codebooks_embeddings", True)
        if not isinstance(tie, bool):
            raise ConfigError(f"config.json: field 'tie_codebooks_embeddings' must be a boolean, got {tie!r}")
        return cls(backbone=backbone, depth=depth, backbone_rope=backbone_rope, depth_rope=depth_rope,
                   num_codebooks=n, vocab_size=vocab, text_vocab_size=text_vocab,
                   ids=CsmIds.from_dict(d, text_vocab, vocab), tie_codebooks_embeddings=tie)


@dataclass(frozen=True)
class CsmSampling:
    """One request's sampling: `backbone` chooses codebook 0 from lm_head's logits, `depth` the depth
    decoder's codebooks 1..N-1. Each: temperature -> top-k -> top-p -> softmax; temperature 0 = greedy.
    Left out, both heads are greedy; a checkpoint's own defaults are `GenerationDefaults` (its
    generation_config.json)."""

    backbone: HeadSampling = field(default_factory=lambda: HeadSampling(0.0, 0, 1.0))
    depth: HeadSampling = field(default_factory=lambda: HeadSampling(0.0, 0, 1.0))

    @classmethod
    def greedy(cls) -> "CsmSampling":
        return cls(HeadSampling(0.0, 0, 1.0), HeadSampling(0.0, 0, 1.0))


# transformers' GenerationConfig class defaults: what the reference uses for a key generation_config.json
# does not have (the depth decoder's own generation config starts from the same class)
GENERATION_CONFIG_DEFAULTS: dict[str, Any] = dict(do_sample=False, temperature=1.0, top_k=50, top_p=1.0)
KEYS = tuple(GENERATION_CONFIG_DEFAULTS) + tuple(f"depth_decoder_{k}" for k in GENERATION_CONFIG_DEFAULTS) + (
    "max_new_tokens",)


@dataclass(frozen=True)
class GenerationDefaults:
    """generation_config.json's sampling of both stages and its frame budget."""

    sampling: CsmSampling
    max_new_tokens: int  # frames

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, **explicit: Any) -> "GenerationDefaults":
        """Explicit arguments (not None) > `d` (generation_config.json) > `GENERATION_CONFIG_DEFAULTS`;
        `max_new_tokens` must come from one of the first two."""
        d = d or {}
        unknown = set(explicit) - set(KEYS)
        if unknown:
            raise ValueError(f"unknown generation arguments: {sorted(unknown)}")

        def pick(name: str, base: str) -> Any:
            if explicit.get(name) is not None:
                return explicit[name]
            return d.get(name, GENERATION_CONFIG_DEFAULTS.get(base, _MISSING))

        def head(prefix: str) -> HeadSampling:
            sample = pick(f"{prefix}do_sample", "do_sample")
            if not isinstance(sample, bool):
                raise ConfigError(f"generation_config.json: field '{prefix}do_sample' must be a boolean, got {sample!r}")
            if not sample:
                return HeadSampling(0.0, 0, 1.0)
            values = {k: pick(f"{prefix}{k}", k) for k in ("temperature", "top_k", "top_p")}
            for k, v in values.items():
                ok = isinstance(v, int) if k == "top_k" else isinstance(v, (int, float)) and math.isfinite(v)
                if isinstance(v, bool) or not ok:
                    raise ConfigError(f"generation_config.json: field '{prefix}{k}' must be a number, got {v!r}")
            try:
                return HeadSampling(float(values["temperature"]), int(values["top_k"]), float(values["top_p"]))
            except ValueError as e:
                raise ConfigError(f"generation_config.json: field '{prefix}temperature/top_k/top_p': {e}") from e

        budget = pick("max_new_tokens", "max_new_tokens")
        if budget is _MISSING:
            raise ConfigError("generation_config.json: missing field 'max_new_tokens'")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ConfigError(f"generation_config.json: field 'max_new_tokens' must be an integer >= 1, got {budget!r}")
        return cls(CsmSampling(head(""), head("depth_decoder_")), budget)
