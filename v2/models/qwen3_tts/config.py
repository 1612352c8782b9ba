"""The Qwen3-TTS (12 Hz) config: the release `config.json` and `generation_config.json`, parsed once.

Owns: reading every width, depth, head count, RoPE base, vocab size, group count and special id of the
talker (`talker_config`), its code predictor (`talker_config.code_predictor_config`) and the speaker encoder
(`speaker_encoder_config`) into frozen dataclasses, the speaker / dialect / language tables, and the
release's sampling defaults; an error naming the field when one is missing or not supported.
Must not know: weights, tensors, devices, the runtime, cards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from v2.models.config import _MISSING, BackboneConfig, ConfigError, _float, _get, _int
from v2.sampling_settings import HeadSampling

# The reference suppresses the last 1024 ids of the talker's codec vocab (control ids) except EOS.
CONTROL_IDS = 1024


def _str(d: Mapping[str, Any], path: str, default: Any = _MISSING) -> str:
    value = _get(d, path, default)
    if not isinstance(value, str):
        raise ConfigError(f"config.json: field '{path}' must be a string, got {value!r}")
    return value


def _decoder(d: Mapping[str, Any], p: str, vocab_path: str) -> BackboneConfig:
    """A Qwen3-style decoder section (talker or code predictor) as the shared backbone config."""
    if _get(d, f"{p}.attention_bias", False):
        raise ConfigError(f"config.json: '{p}.attention_bias' true is not supported (the release has none)")
    act = _get(d, f"{p}.hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"config.json: '{p}.hidden_act' must be 'silu', got {act!r}")
    if _get(d, f"{p}.use_sliding_window", False):
        raise ConfigError(f"config.json: '{p}.use_sliding_window' true is not supported (full attention only)")
    scaling = _get(d, f"{p}.rope_scaling", None) or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, Mapping) else None
    if rope_type != "default":
        # M-RoPE with equal t/h/w positions (speech) is plain RoPE; other scalings change the angles
        raise ConfigError(f"config.json: '{p}.rope_scaling' must be absent or of type 'default', got {scaling!r}")
    hidden = _int(d, f"{p}.hidden_size")
    heads = _int(d, f"{p}.num_attention_heads")
    kv_heads = _int(d, f"{p}.num_key_value_heads", heads)
    if heads % kv_heads:
        raise ConfigError(f"config.json: '{p}.num_attention_heads' ({heads}) is not a multiple of "
                          f"'{p}.num_key_value_heads' ({kv_heads})")
    head_dim = _int(d, f"{p}.head_dim", hidden // heads)
    if head_dim % 2:
        raise ConfigError(f"config.json: '{p}.head_dim' must be even for RoPE, got {head_dim}")
    return BackboneConfig(
        hidden_size=hidden, num_layers=_int(d, f"{p}.num_hidden_layers"), num_heads=heads, num_kv_heads=kv_heads,
        head_dim=head_dim, intermediate_size=_int(d, f"{p}.intermediate_size"), vocab_size=_int(d, vocab_path),
        rms_norm_eps=_float(d, f"{p}.rms_norm_eps", 1e-6), rope_theta=_float(d, f"{p}.rope_theta", 10000.0))


@dataclass(frozen=True)
class CodecIds:
    """Control ids of the talker's codec vocab (rows of `talker.model.codec_embedding`)."""

    pad: int
    bos: int
    eos: int
    think: int
    nothink: int
    think_bos: int
    think_eos: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], vocab: int) -> "CodecIds":
        p = "talker_config"
        ids = cls(pad=_int(d, f"{p}.codec_pad_id", minimum=0), bos=_int(d, f"{p}.codec_bos_id", minimum=0),
                  eos=_int(d, f"{p}.codec_eos_token_id", minimum=0), think=_int(d, f"{p}.codec_think_id", minimum=0),
                  nothink=_int(d, f"{p}.codec_nothink_id", minimum=0),
                  think_bos=_int(d, f"{p}.codec_think_bos_id", minimum=0),
                  think_eos=_int(d, f"{p}.codec_think_eos_id", minimum=0))
        for name, value in vars(ids).items():
            if value >= vocab:
                raise ConfigError(f"config.json: codec id '{name}' ({value}) is outside the codec vocab ({vocab})")
        return ids


@dataclass(frozen=True)
class TextIds:
    """Text-vocab ids the prompt layout uses (`tts_*` are embedded through the text projection)."""

    im_start: int
    im_end: int
    tts_bos: int
    tts_eos: int
    tts_pad: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], vocab: int) -> "TextIds":
        # defaults: the reference config class's
        ids = cls(im_start=_int(d, "im_start_token_id", 151644, minimum=0),
                  im_end=_int(d, "im_end_token_id", 151645, minimum=0),
                  tts_bos=_int(d, "tts_bos_token_id", 151672, minimum=0),
                  tts_eos=_int(d, "tts_eos_token_id", 151673, minimum=0),
                  tts_pad=_int(d, "tts_pad_token_id", 151671, minimum=0))
        for name, value in vars(ids).items():
            if value >= vocab:
                raise ConfigError(f"config.json: text id '{name}' ({value}) is outside the text vocab ({vocab})")
        return ids


@dataclass(frozen=True)
class TalkerConfig:
    decoder: BackboneConfig  # vocab_size = the codec vocab (group-0 codes + control ids)
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int

    @property
    def hidden_size(self) -> int:
        return self.decoder.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.decoder.vocab_size


@dataclass(frozen=True)
class CodePredictorConfig:
    decoder: BackboneConfig  # vocab_size = codes per group
    num_code_groups: int

    @property
    def hidden_size(self) -> int:
        return self.decoder.hidden_size

    @property
    def codebook_size(self) -> int:
        return self.decoder.vocab_size


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    """ECAPA-TDNN sizes and the mel front-end (n_fft / hop / window / fmin / fmax are the reference's
    constants; fmax defaults to half the sample rate)."""

    mel_dim: int
    channels: tuple[int, ...]
    kernel_sizes: tuple[int, ...]
    dilations: tuple[int, ...]
    res2net_scale: int
    se_channels: int
    attention_channels: int
    enc_dim: int
    sample_rate: int
    n_fft: int = 1024
    hop_size: int = 256
    win_size: int = 1024
    fmin: float = 0.0
    fmax: float | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SpeakerEncoderConfig":
        p = "speaker_encoder_config"
        lists = {}
        for name in ("enc_channels", "enc_kernel_sizes", "enc_dilations"):
            value = _get(d, f"{p}.{name}")
            if not isinstance(value, list) or len(value) < 3 or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
                raise ConfigError(f"config.json: '{p}.{name}' must be a list of >= 3 positive integers, got {value!r}")
            lists[name] = tuple(value)
        ch = lists["enc_channels"]
        if not len(ch) == len(lists["enc_kernel_sizes"]) == len(lists["enc_dilations"]):
            raise ConfigError(f"config.json: '{p}.enc_channels', 'enc_kernel_sizes' and 'enc_dilations' must have the same length")
        scale = _int(d, f"{p}.enc_res2net_scale")
        for i in range(1, len(ch) - 1):
            if ch[i] != ch[i - 1] or ch[i] % scale:
                raise ConfigError(f"config.json: '{p}.enc_channels[{i}]' ({ch[i]}) must equal the block before it "
                                  f"and be a multiple of 'enc_res2net_scale' ({scale})")
        if sum(ch[1:-1]) != ch[-1]:
            raise ConfigError(f"config.json: '{p}.enc_channels[-1]' ({ch[-1]}) must be the sum of the SE-Res2Net "
                              f"blocks' channels ({sum(ch[1:-1])})")
        return cls(mel_dim=_int(d, f"{p}.mel_dim"), channels=ch, kernel_sizes=lists["enc_kernel_sizes"],
                   dilations=lists["enc_dilations"], res2net_scale=scale, se_channels=_int(d, f"{p}.enc_se_channels"),
                   attention_channels=_int(d, f"{p}.enc_attention_channels"), enc_dim=_int(d, f"{p}.enc_dim"),
                   sample_rate=_int(d, f"{p}.sample_rate", 24000))

    @property
    def mel_fmax(self) -> float:
        return self.sample_rate / 2 if self.fmax is None else self.fmax


def _table(d: Mapping[str, Any], path: str, check: Any) -> dict[str, Any]:
    value = _get(d, path, {}) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"config.json: field '{path}' must be an object, got {value!r}")
    for key, v in value.items():
        check(f"{path}.{key}", v)
    return {str(k).lower(): v for k, v in value.items()}


@dataclass(frozen=True)
class Qwen3TTSConfig:
    """Everything the model reads from config.json."""

    talker: TalkerConfig
    code_predictor: CodePredictorConfig
    speaker_encoder: SpeakerEncoderConfig | None
    codec: CodecIds
    text: TextIds
    model_type: str          # tts_model_type: "base" (speaker encoder), "custom_voice", "voice_design"
    model_size: str          # tts_model_size, e.g. "1b7", "0b6"
    speakers: Mapping[str, int] = field(default_factory=dict)           # spk_id (lower-case names)
    speaker_dialect: Mapping[str, str | None] = field(default_factory=dict)  # spk_is_dialect (False -> None)
    languages: Mapping[str, int] = field(default_factory=dict)          # codec_language_id
    speaker_names: tuple[str, ...] = ()  # spk_id's names as config.json spells them, in its order

    @property
    def num_code_groups(self) -> int:
        return self.talker.num_code_groups

    @property
    def control_ids(self) -> range:
        """Ids the group-0 choice never takes except EOS (the reference's suppress list)."""
        v = self.talker.vocab_size
        return range(max(v - CONTROL_IDS, 0), v)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Qwen3TTSConfig":
        if not isinstance(d, Mapping):
            raise ConfigError("config.json: top level must be an object")
        model_type = _get(d, "model_type", "qwen3_tts")
        if model_type != "qwen3_tts":
            raise ConfigError(f"config.json: field 'model_type' must be 'qwen3_tts', got {model_type!r}")
        t, c = "talker_config", "talker_config.code_predictor_config"
        talker = TalkerConfig(decoder=_decoder(d, t, f"{t}.vocab_size"), text_vocab_size=_int(d, f"{t}.text_vocab_size"),
                              text_hidden_size=_int(d, f"{t}.text_hidden_size"),
                              num_code_groups=_int(d, f"{t}.num_code_groups", minimum=2))
        groups = _int(d, f"{c}.num_code_groups", talker.num_code_groups, minimum=2)
        if groups != talker.num_code_groups:
            raise ConfigError(f"config.json: '{c}.num_code_groups' ({groups}) must equal '{t}.num_code_groups' "
                              f"({talker.num_code_groups})")
        predictor = CodePredictorConfig(decoder=_decoder(d, c, f"{c}.vocab_size"), num_code_groups=groups)
        if predictor.codebook_size > talker.vocab_size:
            raise ConfigError(f"config.json: '{c}.vocab_size' ({predictor.codebook_size}) exceeds '{t}.vocab_size'")
        tts_type = _str(d, "tts_model_type")
        speaker = SpeakerEncoderConfig.from_dict(d) if tts_type == "base" else None
        if speaker is not None and speaker.enc_dim != talker.hidden_size:
            raise ConfigError(f"config.json: 'speaker_encoder_config.enc_dim' ({speaker.enc_dim}) must equal "
                              f"'{t}.hidden_size' ({talker.hidden_size}): the x-vector is a talker row")
        codec = CodecIds.from_dict(d, talker.vocab_size)
        v = talker.vocab_size

        def codec_id(path: str, value: Any) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < v:
                raise ConfigError(f"config.json: field '{path}' must be a codec id in [0, {v}), got {value!r}")

        languages = _table(d, f"{t}.codec_language_id", codec_id)
        speakers = _table(d, f"{t}.spk_id", codec_id)

        def dialect(path: str, value: Any) -> None:
            if value is not False and value is not None and str(value).lower() not in languages:
                raise ConfigError(f"config.json: field '{path}' must be false or a key of '{t}.codec_language_id', "
                                  f"got {value!r}")

        dialects = _table(d, f"{t}.spk_is_dialect", dialect)
        return cls(talker=talker, code_predictor=predictor, speaker_encoder=speaker, codec=codec,
                   text=TextIds.from_dict(d, talker.text_vocab_size), model_type=tts_type,
                   model_size=_str(d, "tts_model_size", ""), speakers=speakers, languages=languages,
                   speaker_names=tuple(str(k) for k in (_get(d, f"{t}.spk_id", {}) or {})),
                   speaker_dialect={k: (str(x).lower() if x not in (False, None) else None) for k, x in dialects.items()})


@dataclass(frozen=True)
class Qwen3TTSSampling:
    """One request's sampling: the talker's group-0 choice (with its repetition penalty over earlier group-0
    ids) and the code predictor's groups 1..G-1. temperature 0 = greedy (`do_sample` false)."""

    talker: HeadSampling = field(default_factory=lambda: HeadSampling(0.9, 50, 1.0))
    subtalker: HeadSampling = field(default_factory=lambda: HeadSampling(0.9, 50, 1.0))
    repetition_penalty: float = 1.05

    def __post_init__(self) -> None:
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(f"repetition_penalty must be a finite number > 0, got {self.repetition_penalty!r}")

    @classmethod
    def greedy(cls, repetition_penalty: float = 1.0) -> "Qwen3TTSSampling":
        return cls(HeadSampling(0.0, 0, 1.0), HeadSampling(0.0, 0, 1.0), repetition_penalty)


# The reference API's hard defaults, used where generation_config.json is silent.
HARD_DEFAULTS: dict[str, Any] = dict(do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05,
                                     subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0,
                                     subtalker_temperature=0.9, max_new_tokens=2048)


@dataclass(frozen=True)
class GenerationDefaults:
    """generation_config.json merged over the reference API's hard defaults."""

    sampling: Qwen3TTSSampling
    max_new_tokens: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, **explicit: Any) -> "GenerationDefaults":
        """Explicit arguments (not None) > `d` (generation_config.json) > `HARD_DEFAULTS`."""
        d = d or {}
        unknown = set(explicit) - set(HARD_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown generation arguments: {sorted(unknown)}")

        def pick(name: str) -> Any:
            if explicit.get(name) is not None:
                return explicit[name]
            return d.get(name, HARD_DEFAULTS[name])

        def head(prefix: str, sample_key: str) -> HeadSampling:
            if not pick(sample_key):
                return HeadSampling(0.0, 0, 1.0)
            try:
                return HeadSampling(float(pick(f"{prefix}temperature")), int(pick(f"{prefix}top_k")),
                                    float(pick(f"{prefix}top_p")))
            except (TypeError, ValueError) as e:
                raise ConfigError(f"generation_config.json: bad '{prefix}temperature/top_k/top_p' ({e})") from e

        budget = pick("max_new_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ConfigError(f"generation_config.json: 'max_new_tokens' must be an integer >= 1, got {budget!r}")
        sampling = Qwen3TTSSampling(head("", "do_sample"), head("subtalker_", "subtalker_dosample"),
                                    float(pick("repetition_penalty")))
        return cls(sampling=sampling, max_new_tokens=budget)
