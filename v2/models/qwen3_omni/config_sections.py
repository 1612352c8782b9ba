"""Qwen3-Omni config readers shared by its sections: release field paths, RoPE in both schemas, MoE decoders.

Owns: the section prefixes, the field readers this package adds to `v2/models/config.py`'s (id, integer list),
the RoPE block of a section in the transformers 5.x schema (`rope_parameters`) and the release's 4.x one
(`rope_theta` + `rope_scaling`), a Qwen3-style decoder section's sizes (`_decoder`), and the MoE decoder
sections of the thinker and the talker (`MoeConfig`, `MoeDecoderConfig`). config.py assembles the whole model.
Must not know: weights, tensors, devices, the runtime, cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import _MISSING, BackboneConfig, ConfigError, _float, _get, _int

THINKER = "thinker_config"
TALKER = "talker_config"


def _ids(d: Mapping[str, Any], path: str, default: Any = _MISSING) -> int:
    return _int(d, path, default, minimum=0)


def _int_list(d: Mapping[str, Any], path: str, default: Any = _MISSING) -> tuple[int, ...]:
    value = _get(d, path, default)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                       and v >= 0 for v in value):
        raise ConfigError(f"config.json: field '{path}' must be a list of integers >= 0, got {value!r}")
    return tuple(value)


def _rope(d: Mapping[str, Any], p: str) -> tuple[float, dict[str, Any]]:
    """(theta, the rope parameter dict) of section `p` from `rope_parameters` (5.x) or `rope_scaling` (4.x)."""
    params = _get(d, f"{p}.rope_parameters", None)
    if params is None:
        params = _get(d, f"{p}.rope_scaling", None) or {}
        theta = _float(d, f"{p}.rope_theta", 10000.0)
        where = f"{p}.rope_scaling"
    else:
        theta = _float(d, f"{p}.rope_parameters.rope_theta", 10000.0)
        where = f"{p}.rope_parameters"
    if not isinstance(params, Mapping):
        raise ConfigError(f"config.json: field '{where}' must be an object, got {params!r}")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise ConfigError(f"config.json: '{where}.rope_type' must be 'default', got {kind!r}")
    return theta, dict(params)


def _decoder(d: Mapping[str, Any], p: str, *, intermediate: str = "intermediate_size",
             head_dim: int | None = None) -> BackboneConfig:
    """A Qwen3-style decoder section's sizes (for an MoE section `intermediate_size` is the dense width the
    section also names, e.g. the talker's projections; the experts' is in `MoeConfig`)."""
    if _get(d, f"{p}.attention_bias", False):
        raise ConfigError(f"config.json: '{p}.attention_bias' true is not supported (the release has none)")
    act = _get(d, f"{p}.hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"config.json: '{p}.hidden_act' must be 'silu', got {act!r}")
    hidden = _int(d, f"{p}.hidden_size")
    heads = _int(d, f"{p}.num_attention_heads")
    kv_heads = _int(d, f"{p}.num_key_value_heads", heads)
    if heads % kv_heads:
        raise ConfigError(f"config.json: '{p}.num_attention_heads' ({heads}) is not a multiple of "
                          f"'{p}.num_key_value_heads' ({kv_heads})")
    hd = head_dim if head_dim is not None else _int(d, f"{p}.head_dim", hidden // heads)
    if hd % 2:
        raise ConfigError(f"config.json: '{p}.head_dim' must be even for RoPE, got {hd}")
    theta, _ = _rope(d, p)
    return BackboneConfig(
        hidden_size=hidden, num_layers=_int(d, f"{p}.num_hidden_layers"), num_heads=heads, num_kv_heads=kv_heads,
        head_dim=hd, intermediate_size=_int(d, f"{p}.{intermediate}"), vocab_size=_int(d, f"{p}.vocab_size"),
        rms_norm_eps=_float(d, f"{p}.rms_norm_eps", 1e-6), rope_theta=theta)


@dataclass(frozen=True)
class MoeConfig:
    """A mixture-of-experts block (moe.py): softmax router over `num_experts`, top `top_k`, renormalised when
    `norm_topk_prob`; SwiGLU experts of width `intermediate_size`; a sigmoid-gated shared SwiGLU expert of width
    `shared_intermediate_size` when that is > 0 (the talker), none when 0 (the thinker)."""

    hidden_size: int
    num_experts: int
    top_k: int
    intermediate_size: int
    norm_topk_prob: bool
    shared_intermediate_size: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], p: str, *, shared: bool) -> "MoeConfig":
        key = "num_experts" if _get(d, f"{p}.num_experts", None) is not None else "num_local_experts"
        experts = _int(d, f"{p}.{key}")
        top_k = _int(d, f"{p}.num_experts_per_tok")
        if top_k > experts:
            raise ConfigError(f"config.json: '{p}.num_experts_per_tok' ({top_k}) exceeds '{p}.{key}' ({experts})")
        if _int(d, f"{p}.decoder_sparse_step", 1) != 1 or _int_list(d, f"{p}.mlp_only_layers", []):
            raise ConfigError(f"config.json: '{p}.decoder_sparse_step' 1 and an empty '{p}.mlp_only_layers' are "
                              "supported (every layer MoE, as the release)")
        norm = _get(d, f"{p}.norm_topk_prob", True)
        if not isinstance(norm, bool):
            raise ConfigError(f"config.json: field '{p}.norm_topk_prob' must be a boolean, got {norm!r}")
        return cls(hidden_size=_int(d, f"{p}.hidden_size"), num_experts=experts, top_k=top_k,
                   intermediate_size=_int(d, f"{p}.moe_intermediate_size"), norm_topk_prob=norm,
                   shared_intermediate_size=_int(d, f"{p}.shared_expert_intermediate_size") if shared else 0)


def _section(rope: Mapping[str, Any], where: str, head_dim: int) -> tuple[int, int, int]:
    """M-RoPE's [t, h, w] frequency counts (absent: all on t, i.e. plain RoPE)."""
    value = rope.get("mrope_section", [head_dim // 2, 0, 0])
    if (not isinstance(value, (list, tuple)) or len(value) != 3 or sum(value) != head_dim // 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        raise ConfigError(f"config.json: '{where}.mrope_section' must be 3 integers >= 0 summing to head_dim / 2 "
                          f"({head_dim // 2}), got {value!r}")
    return (value[0], value[1], value[2])


@dataclass(frozen=True)
class MoeDecoderConfig:
    """An MoE decoder (thinker text model, talker): attention sizes, the MoE block, M-RoPE sections.
    `mrope_section` [t, h, w] sums to head_dim / 2; `interleaved` picks the frequency-to-axis assignment."""

    decoder: BackboneConfig
    moe: MoeConfig
    mrope_section: tuple[int, int, int]
    interleaved: bool

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], p: str, *, shared: bool) -> "MoeDecoderConfig":
        dec = _decoder(d, p)
        _, rope = _rope(d, p)
        where = f"{p}.rope_parameters" if _get(d, f"{p}.rope_parameters", None) is not None else f"{p}.rope_scaling"
        section = _section(rope, where, dec.head_dim)
        inter = rope.get("interleaved", rope.get("mrope_interleaved", False))
        if not isinstance(inter, bool):
            raise ConfigError(f"config.json: field '{where}.interleaved' must be a boolean, got {inter!r}")
        if _get(d, f"{p}.sliding_window", None) is not None and _get(d, f"{p}.use_sliding_window", False):
            raise ConfigError(f"config.json: '{p}.use_sliding_window' true is not supported (full attention only)")
        return cls(decoder=dec, moe=MoeConfig.from_dict(d, p, shared=shared),
                   mrope_section=(section[0], section[1], section[2]), interleaved=inter)
