"""The Qwen3-Omni config's speech-out sections: the talker, its code predictor, code2wav, the talker's defaults.

Owns: `CodecIds`, `TalkerConfig` (with the speaker table), `CodePredictorConfig`, `Code2WavConfig`,
`TalkerDefaults` (release `generation_config.json`), each read from the release's `talker_config` /
`code2wav_config` with an error naming the field. config.py assembles the whole model and re-exports these.
Must not know: weights, tensors, devices, the runtime, cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.config import BackboneConfig, ConfigError, _float, _get, _int
from v2.models.qwen3_omni.config_sections import TALKER, MoeDecoderConfig, _decoder, _ids, _int_list, _rope


@dataclass(frozen=True)
class CodecIds:
    """Control ids of the talker's codec vocab (rows of `talker.model.codec_embedding`)."""

    pad: int
    bos: int
    eos: int
    nothink: int
    think_bos: int
    think_eos: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], vocab: int) -> "CodecIds":
        p = TALKER
        ids = cls(pad=_ids(d, f"{p}.codec_pad_id"), bos=_ids(d, f"{p}.codec_bos_id"),
                  eos=_ids(d, f"{p}.codec_eos_token_id"), nothink=_ids(d, f"{p}.codec_nothink_id"),
                  think_bos=_ids(d, f"{p}.codec_think_bos_id"), think_eos=_ids(d, f"{p}.codec_think_eos_id"))
        for name, value in vars(ids).items():
            if value >= vocab:
                raise ConfigError(f"config.json: codec id '{name}' ({value}) is outside the codec vocab ({vocab})")
        return ids


@dataclass(frozen=True)
class TalkerConfig:
    """The talker (`talker.*`): an MoE decoder with a shared expert over codec rows. `decoder.vocab_size` is the
    codec vocab (group-0 codes then control ids); `decoder.intermediate_size` is the width of `text_projection`
    and `hidden_projection` (thinker width -> it -> talker width). `speakers`: lower-case name -> codec id."""

    text: MoeDecoderConfig
    thinker_hidden_size: int
    accept_hidden_layer: int
    num_code_groups: int
    codec: CodecIds
    speakers: tuple[tuple[str, int], ...]

    @property
    def hidden_size(self) -> int:
        return self.text.decoder.hidden_size

    @property
    def codebook_size(self) -> int:
        """Group-0 codes are ids [0, codebook_size); the rest of the codec vocab is control ids."""
        return self.text.decoder.vocab_size - 1024

    def speaker_id(self, name: str) -> int:
        """The codec id of speaker `name` (case-insensitive, as the reference's `speaker.lower()`)."""
        table = dict(self.speakers)
        if name.lower() not in table:
            raise ConfigError(f"speaker: unknown speaker {name!r}; known: {sorted(table)}")
        return table[name.lower()]


@dataclass(frozen=True)
class CodePredictorConfig:
    """The dense code predictor (`talker.code_predictor.*`): groups 1..num_code_groups-1, one embedding table and
    one head each (`decoder.vocab_size` codes per group)."""

    decoder: BackboneConfig
    num_code_groups: int


@dataclass(frozen=True)
class Code2WavConfig:
    """code2wav (`code2wav.*`): mean of per-group embeddings, a sliding-window causal transformer with layer
    scales (`transformer`: head_dim = width / heads, vocab = codebook_size * num_quantizers), ConvNeXt
    upsampling by `upsampling_ratios`, a SnakeBeta decoder by `upsample_rates` from `decoder_dim` channels."""

    transformer: BackboneConfig
    codebook_size: int
    num_quantizers: int
    sliding_window: int
    decoder_dim: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    sample_rate: int = 24000

    @property
    def samples_per_frame(self) -> int:
        n = 1
        for r in (*self.upsample_rates, *self.upsampling_ratios):
            n *= r
        return n

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Code2WavConfig":
        p = "code2wav_config"
        codebook, groups = _int(d, f"{p}.codebook_size"), _int(d, f"{p}.num_quantizers")
        heads, hidden = _int(d, f"{p}.num_attention_heads"), _int(d, f"{p}.hidden_size")
        if hidden % heads:
            raise ConfigError(f"config.json: '{p}.hidden_size' ({hidden}) is not a multiple of "
                              f"'{p}.num_attention_heads' ({heads})")
        theta, _ = _rope(d, p)
        tr = BackboneConfig(hidden_size=hidden, num_layers=_int(d, f"{p}.num_hidden_layers"), num_heads=heads,
                            num_kv_heads=_int(d, f"{p}.num_key_value_heads", heads), head_dim=hidden // heads,
                            intermediate_size=_int(d, f"{p}.intermediate_size"), vocab_size=codebook * groups,
                            rms_norm_eps=_float(d, f"{p}.rms_norm_eps", 1e-5), rope_theta=theta)
        if heads % tr.num_kv_heads:
            raise ConfigError(f"config.json: '{p}.num_attention_heads' is not a multiple of '{p}.num_key_value_heads'")
        rates, ratios = _int_list(d, f"{p}.upsample_rates"), _int_list(d, f"{p}.upsampling_ratios")
        if not rates or 0 in rates or 0 in ratios:
            raise ConfigError(f"config.json: '{p}.upsample_rates' / '{p}.upsampling_ratios' must be integers >= 1")
        dim = _int(d, f"{p}.decoder_dim")
        if dim % (1 << len(rates)):
            raise ConfigError(f"config.json: '{p}.decoder_dim' ({dim}) must halve {len(rates)} times")
        return cls(transformer=tr, codebook_size=codebook, num_quantizers=groups,
                   sliding_window=_int(d, f"{p}.sliding_window"), decoder_dim=dim, upsample_rates=rates,
                   upsampling_ratios=ratios)


@dataclass(frozen=True)
class TalkerDefaults:
    """The talker's sampling defaults (release `generation_config.json`, `talker_*` keys; the reference's
    generate() signature holds the same values). The code predictor samples with top-k 50, top-p 0.8."""

    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    max_new_tokens: int = 4096
    predictor_top_k: int = 50
    predictor_top_p: float = 0.8

    @classmethod
    def from_dict(cls, g: Mapping[str, Any]) -> "TalkerDefaults":
        base = cls()
        return cls(temperature=_float(g, "talker_temperature", base.temperature),
                   top_k=_int(g, "talker_top_k", base.top_k), top_p=_float(g, "talker_top_p", base.top_p),
                   repetition_penalty=_float(g, "talker_repetition_penalty", base.repetition_penalty),
                   max_new_tokens=_int(g, "talker_max_new_tokens", base.max_new_tokens))


def _talker(d: Mapping[str, Any], thinker_width: int, thinker_layers: int) -> TalkerConfig:
    p = TALKER
    text = MoeDecoderConfig.from_dict(d, f"{p}.text_config", shared=True)
    width = _int(d, f"{p}.thinker_hidden_size", thinker_width)
    if width != thinker_width:
        raise ConfigError(f"config.json: '{p}.thinker_hidden_size' ({width}) must equal the thinker width "
                          f"({thinker_width})")
    accept = _int(d, f"{p}.accept_hidden_layer")
    if accept > thinker_layers:
        raise ConfigError(f"config.json: '{p}.accept_hidden_layer' ({accept}) exceeds the thinker's "
                          f"{thinker_layers} layers")
    if text.decoder.vocab_size <= 1024:
        raise ConfigError(f"config.json: '{p}.text_config.vocab_size' must exceed the 1024 control ids")
    table = _get(d, f"{p}.speaker_id")
    if not isinstance(table, Mapping) or not table:
        raise ConfigError(f"config.json: field '{p}.speaker_id' must be a non-empty object of name -> codec id")
    speakers = tuple(sorted((str(k).lower(), _ids(table, str(k))) for k in table))
    return TalkerConfig(text=text, thinker_hidden_size=width, accept_hidden_layer=accept,
                        num_code_groups=_int(d, f"{p}.num_code_groups", minimum=2),
                        codec=CodecIds.from_dict(d, text.decoder.vocab_size), speakers=speakers)


def _code_predictor(d: Mapping[str, Any]) -> CodePredictorConfig:
    p = f"{TALKER}.code_predictor_config"
    dec = _decoder(d, p)
    talker_width = _int(d, f"{TALKER}.text_config.hidden_size")
    if dec.hidden_size != talker_width:
        raise ConfigError(f"config.json: '{p}.hidden_size' ({dec.hidden_size}) must equal the talker width "
                          f"({talker_width}): the model has no projection between them")
    groups = _int(d, f"{p}.num_code_groups", _int(d, f"{TALKER}.num_code_groups"), minimum=2)
    return CodePredictorConfig(decoder=dec, num_code_groups=groups)
