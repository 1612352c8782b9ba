"""The Qwen3-Omni (`Qwen3OmniMoeForConditionalGeneration`) config: the release `config.json`, parsed once.

Owns: every width, depth, head count, expert count, routing top-k, RoPE base and section, window, rate and
special id of the thinker (text decoder and audio encoder), the talker, its code predictor and code2wav, as
frozen dataclasses; the talker's sampling defaults from `generation_config.json`; an error naming the field
when one is missing or not supported. Both the transformers 5.x schema (`rope_parameters`) and the release's
4.x one (`rope_theta` + `rope_scaling`) are read. The vision tower is not modelled (its keys are skipped).
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
        p = f"{THINKER}.audio_config"
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


@dataclass(frozen=True)
class TokenIds:
    """Text-vocab ids of the chat layout, the audio placeholders and the talker's `tts_*` rows (release values
    as defaults)."""

    im_start: int = 151644
    im_end: int = 151645
    system: int = 8948
    user: int = 872
    assistant: int = 77091
    audio: int = 151675
    audio_start: int = 151669
    audio_end: int = 151670
    image: int = 151655
    video: int = 151656
    vision_start: int = 151652
    vision_end: int = 151653
    tts_pad: int = 151671
    tts_bos: int = 151672
    tts_eos: int = 151673

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], vocab: int) -> "TokenIds":
        t, base = THINKER, cls()
        ids = cls(
            im_start=_ids(d, "im_start_token_id", base.im_start), im_end=_ids(d, "im_end_token_id", base.im_end),
            system=_ids(d, "system_token_id", base.system), user=_ids(d, "user_token_id", base.user),
            assistant=_ids(d, "assistant_token_id", base.assistant), audio=_ids(d, f"{t}.audio_token_id", base.audio),
            audio_start=_ids(d, f"{t}.audio_start_token_id", base.audio_start),
            audio_end=_ids(d, f"{t}.audio_end_token_id", base.audio_end),
            image=_ids(d, f"{t}.image_token_id", base.image), video=_ids(d, f"{t}.video_token_id", base.video),
            vision_start=_ids(d, f"{t}.vision_start_token_id", base.vision_start),
            vision_end=_ids(d, f"{t}.vision_end_token_id", base.vision_end),
            tts_pad=_ids(d, "tts_pad_token_id", base.tts_pad), tts_bos=_ids(d, "tts_bos_token_id", base.tts_bos),
            tts_eos=_ids(d, "tts_eos_token_id", base.tts_eos))
        for name, value in vars(ids).items():
            if value >= vocab:
                raise ConfigError(f"config.json: text id '{name}' ({value}) is outside the text vocab ({vocab})")
        return ids


@dataclass(frozen=True)
class ThinkerConfig:
    text: MoeDecoderConfig  # vocab_size = the text vocab; lm_head untied
    audio: AudioEncoderConfig

    @property
    def hidden_size(self) -> int:
        return self.text.decoder.hidden_size


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


@dataclass(frozen=True)
class Qwen3OmniConfig:
    """The whole model. `talker`, `code_predictor` and `code2wav` are None when `enable_audio_output` is false
    (a thinker-only checkpoint)."""

    thinker: ThinkerConfig
    ids: TokenIds
    talker: TalkerConfig | None
    code_predictor: CodePredictorConfig | None
    code2wav: Code2WavConfig | None
    talker_defaults: TalkerDefaults = TalkerDefaults()
    thinker_eos: int = 151645

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], generation: Mapping[str, Any] | None = None) -> "Qwen3OmniConfig":
        text = MoeDecoderConfig.from_dict(d, f"{THINKER}.text_config", shared=False)
        audio = AudioEncoderConfig.from_dict(d)
        if audio.output_dim != text.decoder.hidden_size:
            raise ConfigError(f"config.json: '{THINKER}.audio_config.output_dim' ({audio.output_dim}) must equal "
                              f"'{THINKER}.text_config.hidden_size' ({text.decoder.hidden_size})")
        ids = TokenIds.from_dict(d, text.decoder.vocab_size)
        thinker = ThinkerConfig(text=text, audio=audio)
        defaults = TalkerDefaults.from_dict(generation or {})
        audio_out = _get(d, "enable_audio_output", True)
        if not isinstance(audio_out, bool):
            raise ConfigError(f"config.json: field 'enable_audio_output' must be a boolean, got {audio_out!r}")
        if not audio_out:
            return cls(thinker, ids, None, None, None, defaults, ids.im_end)
        return cls(thinker, ids, _talker(d, text.decoder.hidden_size, text.decoder.num_layers),
                   _code_predictor(d), Code2WavConfig.from_dict(d), defaults, ids.im_end)


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
