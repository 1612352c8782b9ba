"""The codec's config, read from a MOSS-Audio-Tokenizer `config.json`.

Owns: the quantizer sizes, the ordered decoder module list (transformer stages and patch up-samplers),
the ordered encoder module list when the config has one (patch down-samplers and transformer stages),
each stage's token rate and causal window (`round(rate * context_duration)`), and the consistency
checks between them (dims chain, hop = product of patches / channels). Errors name the field.
Must not know: weights, devices, streaming state, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import ConfigError

DECODE_CODEBOOKS = 12  # the TTS model emits the first 12 of the codec's codebooks


def _req(d: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise ConfigError(f"codec config.json: missing field '{where}{key}'")
    return d[key]


def _pos_int(d: Mapping[str, Any], key: str, where: str) -> int:
    v = _req(d, key, where)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"codec config.json: field '{where}{key}' must be a positive integer, got {v!r}")
    return v


@dataclass(frozen=True)
class StageConfig:
    """One causal local-window transformer stage (release `module_type` "Transformer")."""

    index: int          # position in `decoder_kwargs` (weights live under `decoder.{index}.`)
    input_dim: int
    d_model: int
    output_dim: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    window: int         # a query at p sees keys p - window + 1 .. p
    max_period: float
    upsample: int       # tokens per codec frame at this stage (decoder or encoder)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


@dataclass(frozen=True)
class PatchConfig:
    """A release `module_type` "PatchedPretransform": in the decoder an up-sampler [C, L] -> [C / patch, L * patch],
    in the encoder a down-sampler [C, L * patch] -> [C * patch, L]."""

    index: int
    patch: int


@dataclass(frozen=True)
class CodecConfig:
    codebook_size: int
    codebook_dim: int
    rvq_dim: int
    latent_dim: int     # quantizer output_dim: the first stage's input
    num_quantizers: int
    modules: tuple[StageConfig | PatchConfig, ...]
    sampling_rate: int
    channels: int
    hop: int            # samples per channel per frame (`downsample_rate`)
    encoder_modules: tuple[StageConfig | PatchConfig, ...] = ()  # empty: the config has no `encoder_kwargs`
    encoder_dim: int = 0  # quantizer input_dim: the last encoder module's output width

    @property
    def encoder_stages(self) -> tuple[StageConfig, ...]:
        return tuple(m for m in self.encoder_modules if isinstance(m, StageConfig))

    @property
    def stages(self) -> tuple[StageConfig, ...]:
        return tuple(m for m in self.modules if isinstance(m, StageConfig))

    @property
    def frame_rate(self) -> float:
        return self.sampling_rate / self.hop

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CodecConfig":
        q = _req(d, "quantizer_kwargs", "")
        w = "quantizer_kwargs."
        quantizer_type = q.get("quantizer_type", d.get("quantizer_type", "rlfq"))
        if quantizer_type != "rlfq":
            raise ConfigError(f"codec config.json: 'quantizer_kwargs.quantizer_type' must be 'rlfq', got {quantizer_type!r}")
        num_quantizers = _pos_int(q, "num_quantizers", w)
        if num_quantizers < DECODE_CODEBOOKS:
            raise ConfigError(f"codec config.json: '{w}num_quantizers' ({num_quantizers}) < {DECODE_CODEBOOKS}")
        channels = d.get("number_channels", 1)
        if channels > 1 and not d.get("enable_channel_interleave", False):
            raise ConfigError("codec config.json: several channels need 'enable_channel_interleave' = true")
        sampling_rate = _pos_int(d, "sampling_rate", "")
        hop = _pos_int(d, "downsample_rate", "")
        top_context = d.get("causal_transformer_context_duration")
        frame_rate = sampling_rate / hop
        modules: list[StageConfig | PatchConfig] = []
        upsample, dim = 1, _pos_int(q, "output_dim", w)
        for i, m in enumerate(_req(d, "decoder_kwargs", "")):
            where = f"decoder_kwargs[{i}]."
            kind = _req(m, "module_type", where)
            if kind == "PatchedPretransform":
                patch = _pos_int(m, "patch_size", where)
                if dim % patch:
                    raise ConfigError(f"codec config.json: '{where}patch_size' ({patch}) does not divide {dim} channels")
                modules.append(PatchConfig(i, patch))
                upsample, dim = upsample * patch, dim // patch
            elif kind == "Transformer":
                stage = _stage(m, i, where, dim, upsample, frame_rate, top_context)
                modules.append(stage)
                dim = stage.output_dim
            else:
                raise ConfigError(f"codec config.json: '{where}module_type' {kind!r} is not Transformer or PatchedPretransform")
        if dim != 1 or upsample != hop * channels:
            raise ConfigError(f"codec config.json: decoder_kwargs end with {dim} channel(s) at {upsample} samples per "
                              f"frame; expected 1 channel at downsample_rate x number_channels = {hop * channels}")
        encoder_modules: tuple[StageConfig | PatchConfig, ...] = ()
        encoder_dim = 0
        if "encoder_kwargs" in d:
            encoder_dim = _pos_int(q, "input_dim", w)
            encoder_modules = _encoder_modules(d["encoder_kwargs"], hop * channels, encoder_dim, frame_rate, top_context)
        return cls(codebook_size=_pos_int(q, "codebook_size", w), codebook_dim=_pos_int(q, "codebook_dim", w),
                   rvq_dim=_pos_int(q, "rvq_dim", w), latent_dim=_pos_int(q, "output_dim", w),
                   num_quantizers=num_quantizers, modules=tuple(modules), sampling_rate=sampling_rate,
                   channels=channels, hop=hop, encoder_modules=encoder_modules, encoder_dim=encoder_dim)


def _encoder_modules(kwargs: Any, samples_per_frame: int, encoder_dim: int, frame_rate: float,
                     top_context: Any) -> tuple[StageConfig | PatchConfig, ...]:
    """`encoder_kwargs` in order: the interleaved signal (1 channel, `samples_per_frame` samples a frame) is
    folded by each patch (channels x patch, tokens / patch) and reshaped by each stage, ending at one token per
    frame of `encoder_dim` channels."""
    if not isinstance(kwargs, list) or not kwargs:
        raise ConfigError("codec config.json: 'encoder_kwargs' must be a non-empty list")
    modules: list[StageConfig | PatchConfig] = []
    tokens, dim = samples_per_frame, 1  # tokens per frame, channels
    for i, m in enumerate(kwargs):
        where = f"encoder_kwargs[{i}]."
        kind = _req(m, "module_type", where)
        if kind == "PatchedPretransform":
            patch = _pos_int(m, "patch_size", where)
            if tokens % patch:
                raise ConfigError(f"codec config.json: '{where}patch_size' ({patch}) does not divide the {tokens} "
                                  f"tokens per frame at this module")
            modules.append(PatchConfig(i, patch))
            tokens, dim = tokens // patch, dim * patch
        elif kind == "Transformer":
            stage = _stage(m, i, where, dim, tokens, frame_rate, top_context)
            modules.append(stage)
            dim = stage.output_dim
        else:
            raise ConfigError(f"codec config.json: '{where}module_type' {kind!r} is not Transformer or PatchedPretransform")
    if dim != encoder_dim or tokens != 1:
        raise ConfigError(f"codec config.json: encoder_kwargs end with {dim} channel(s) at {tokens} tokens per frame; "
                          f"expected quantizer_kwargs.input_dim = {encoder_dim} channels at 1 token per frame")
    return tuple(modules)


def _stage(m: Mapping[str, Any], i: int, where: str, dim: int, upsample: int, frame_rate: float,
           top_context: Any) -> StageConfig:
    if not m.get("causal", True):
        raise ConfigError(f"codec config.json: '{where}causal' must be true (streaming and batching rely on it)")
    if m.get("positional_embedding", "rope") != "rope" or m.get("norm", "layer_norm") != "layer_norm":
        raise ConfigError(f"codec config.json: '{where}' needs positional_embedding 'rope' and norm 'layer_norm'")
    if m.get("gating", "none") != "none":
        raise ConfigError(f"codec config.json: '{where}gating' must be 'none', got {m.get('gating')!r}")
    input_dim = _pos_int(m, "input_dimension", where)
    if input_dim != dim:
        raise ConfigError(f"codec config.json: '{where}input_dimension' is {input_dim} but the previous module gives {dim}")
    d_model, heads = _pos_int(m, "d_model", where), _pos_int(m, "num_heads", where)
    if d_model % heads or (d_model // heads) % 2:
        raise ConfigError(f"codec config.json: '{where}d_model' ({d_model}) must split into {heads} heads of even size")
    context = m.get("context_duration", top_context)
    if not isinstance(context, (int, float)) or context <= 0:
        raise ConfigError(f"codec config.json: '{where}context_duration' must be a positive number, got {context!r}")
    window = round(frame_rate * upsample * context)
    if window < 1:
        raise ConfigError(f"codec config.json: '{where}context_duration' gives an empty window")
    return StageConfig(index=i, input_dim=input_dim, d_model=d_model, output_dim=_pos_int(m, "output_dimension", where),
                       num_layers=_pos_int(m, "num_layers", where), num_heads=heads,
                       ffn_dim=_pos_int(m, "dim_feedforward", where), window=window,
                       max_period=float(m.get("max_period", 10000)), upsample=upsample)
