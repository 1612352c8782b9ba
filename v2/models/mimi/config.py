"""The Mimi codec's config, read from a Mimi `config.json` dict (a standalone Mimi checkpoint's, the CSM
checkpoint's `codec_config`, the Qwen3-TTS speech tokenizer's `encoder_config`).

Owns: every structural number of Mimi (SEANet filters, ratios, kernels, residual layers; the transformers'
widths, heads, window and RoPE base; the quantizers; the down/up-sampler's factor and groups), the checks
that they chain (GQA divisibility, even head_dim, a down-sampler present, codebook width = quantizer width,
upsample groups dividing the width), and refusals for what Mimi's maths here does not cover (non-causal
convs, conv shortcuts, other activations, padding modes, trims or RoPE types). Every error is a
`ConfigError` naming the field with its path (`where`, e.g. "codec_config.") and the file it came from.
Nothing about the fixture's or the release's sizes is assumed.
Must not know: weights, devices, streaming state, the runtime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import ConfigError


class _Reader:
    """Field readers over one dict whose errors say `file: field 'where' + key ...`."""

    def __init__(self, d: Mapping[str, Any], file: str, where: str) -> None:
        if not isinstance(d, Mapping):
            raise ConfigError(f"{file}: '{where.rstrip('.') or 'config'}' must be a JSON object, got {type(d).__name__}")
        self.d, self.file, self.where = d, file, where

    def fail(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"{self.file}: field '{self.where}{key}' {why}")

    def get(self, key: str) -> Any:
        if key not in self.d:
            raise ConfigError(f"{self.file}: missing field '{self.where}{key}'")
        return self.d[key]

    def integer(self, key: str, minimum: int = 1) -> int:
        v = self.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.fail(key, f"must be an integer >= {minimum}, got {v!r}")
        return v

    def number(self, key: str, value: Any = None) -> float:
        v = self.get(key) if value is None else value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
            raise self.fail(key, f"must be a positive number, got {v!r}")
        return float(v)

    def ints(self, key: str) -> tuple[int, ...]:
        v = self.get(key)
        if not isinstance(v, list) or not v or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in v):
            raise self.fail(key, f"must be a non-empty list of positive integers, got {v!r}")
        return tuple(v)

    def flag(self, key: str, default: bool) -> bool:
        v = self.d.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(key, f"must be true or false, got {v!r}")
        return v

    def expect(self, key: str, allowed: tuple[Any, ...], default: Any) -> None:
        v = self.d.get(key, default)
        if v not in allowed:
            raise self.fail(key, f"must be one of {list(allowed)}, got {v!r}")


def _rope_theta(r: _Reader) -> float:
    """`rope_parameters.rope_theta` (transformers 5) or `rope_theta`; only the default (unscaled) RoPE."""
    params = r.d.get("rope_parameters")
    if params is not None:
        sub = _Reader(params, r.file, f"{r.where}rope_parameters.")
        sub.expect("rope_type", ("default",), "default")
        if "rope_theta" in params:
            return sub.number("rope_theta")
    scaling = r.d.get("rope_scaling")
    if scaling not in (None, {}):
        _Reader(scaling, r.file, f"{r.where}rope_scaling.").expect("rope_type", ("default",), "default")
    return r.number("rope_theta")


@dataclass(frozen=True)
class MimiConfig:
    sample_rate: int
    audio_channels: int
    num_filters: int
    ratios: tuple[int, ...]     # `upsampling_ratios`: the decoder's order; the encoder applies them reversed
    kernel_size: int
    residual_kernel_size: int
    last_kernel_size: int
    compress: int
    num_residual_layers: int
    dilation_growth_rate: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    norm_eps: float
    rope_theta: float
    attention_bias: bool
    sliding_window: int         # a step attends to the last `sliding_window` steps, itself included
    num_quantizers: int
    num_semantic_quantizers: int
    codebook_size: int
    codebook_dim: int
    vq_hidden: int              # `vector_quantization_hidden_dimension`: the quantizers' width
    downsample_kernel: int      # the stride-2 down/up-sampler's kernel: 2 x int(SEANet rate / frame rate)
    upsample_groups: int

    @property
    def seanet_hop(self) -> int:
        """Samples per SEANet step (the transformers' rate)."""
        return math.prod(self.ratios)

    @property
    def hop(self) -> int:
        """Samples per codec frame (the down-sampler's stride is 2)."""
        return self.seanet_hop * 2

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.hop

    @property
    def groups(self) -> int:
        """Codes per frame (every quantizer; the name the codec executors read)."""
        return self.num_quantizers

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, file: str = "config.json", where: str = "") -> "MimiConfig":
        """Parse a Mimi config dict; `where` prefixes field names in errors (e.g. "codec_config.")."""
        r = _Reader(d, file, where)
        mt = d.get("model_type", "mimi")
        if mt != "mimi":
            raise r.fail("model_type", f"must be 'mimi', got {mt!r}")
        r.expect("hidden_act", ("gelu",), "gelu")
        r.expect("pad_mode", ("constant",), "constant")
        if not r.flag("use_causal_conv", True):
            raise r.fail("use_causal_conv", "must be true (only the causal Mimi is supported)")
        if r.flag("use_conv_shortcut", False):
            raise r.fail("use_conv_shortcut", "= true is not supported")
        trim = d.get("trim_right_ratio", 1.0)
        if isinstance(trim, bool) or trim != 1.0:
            raise r.fail("trim_right_ratio", f"must be 1.0 (causal transposed convs trim on the right), got {trim!r}")
        channels = r.integer("audio_channels")
        if channels != 1:
            raise r.fail("audio_channels", f"must be 1 (mono), got {channels}")
        hidden = r.integer("hidden_size")
        heads = r.integer("num_attention_heads")
        kv_heads = r.integer("num_key_value_heads") if "num_key_value_heads" in d else heads
        if heads % kv_heads:
            raise r.fail("num_key_value_heads", f"({kv_heads}) must divide num_attention_heads ({heads})")
        head_dim = r.integer("head_dim") if d.get("head_dim") is not None else hidden // heads
        if head_dim < 2 or head_dim % 2:
            raise r.fail("head_dim", f"must be even (rotary halves), got {head_dim}")
        ratios = r.ints("upsampling_ratios")
        rate = r.integer("sampling_rate")
        seanet_rate = math.ceil(rate / math.prod(ratios))
        given = next((d[k] for k in ("_frame_rate", "frame_rate") if d.get(k) is not None), None)
        frame_rate = r.number("_frame_rate", rate / (math.prod(ratios) * 2) if given is None else given)
        factor = int(seanet_rate / frame_rate)
        if frame_rate >= seanet_rate or factor < 1:
            raise r.fail("_frame_rate", f"({frame_rate}) must be below the SEANet rate {seanet_rate} "
                                        f"(a codec without a down-sampler is not supported)")
        quantizers = r.integer("num_quantizers", minimum=2)
        semantic = r.integer("num_semantic_quantizers")
        if semantic >= quantizers:
            raise r.fail("num_semantic_quantizers", f"({semantic}) must be < num_quantizers ({quantizers})")
        codebook_dim = r.integer("codebook_dim")
        vq_hidden = r.integer("vector_quantization_hidden_dimension")
        if codebook_dim != vq_hidden:
            raise r.fail("codebook_dim", f"({codebook_dim}) must equal vector_quantization_hidden_dimension ({vq_hidden})")
        groups = r.integer("upsample_groups")
        if hidden % groups:
            raise r.fail("upsample_groups", f"({groups}) must divide hidden_size ({hidden})")
        filters, compress = r.integer("num_filters"), r.integer("compress")
        if filters < compress:
            raise r.fail("compress", f"({compress}) must be <= num_filters ({filters}) (residual width filters / compress)")
        return cls(sample_rate=rate, audio_channels=channels, num_filters=filters, ratios=ratios,
                   kernel_size=r.integer("kernel_size"), residual_kernel_size=r.integer("residual_kernel_size"),
                   last_kernel_size=r.integer("last_kernel_size"), compress=compress,
                   num_residual_layers=r.integer("num_residual_layers"), dilation_growth_rate=r.integer("dilation_growth_rate"),
                   hidden_size=hidden, num_layers=r.integer("num_hidden_layers"), num_heads=heads, num_kv_heads=kv_heads,
                   head_dim=head_dim, intermediate_size=r.integer("intermediate_size"), norm_eps=r.number("norm_eps"),
                   rope_theta=_rope_theta(r), attention_bias=r.flag("attention_bias", False),
                   sliding_window=r.integer("sliding_window"), num_quantizers=quantizers,
                   num_semantic_quantizers=semantic, codebook_size=r.integer("codebook_size"), codebook_dim=codebook_dim,
                   vq_hidden=vq_hidden, downsample_kernel=2 * factor, upsample_groups=groups)
