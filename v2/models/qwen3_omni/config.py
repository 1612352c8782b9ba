"""The Qwen3-Omni (`Qwen3OmniMoeForConditionalGeneration`) config: the release `config.json`, parsed once.

Owns: every width, depth, head count, expert count, routing top-k, RoPE base and section, window, rate and
special id of the thinker (text decoder and audio encoder), the talker, its code predictor and code2wav, as
frozen dataclasses; the talker's sampling defaults from `generation_config.json`; an error naming the field
when one is missing or not supported. Both the transformers 5.x schema (`rope_parameters`) and the release's
4.x one (`rope_theta` + `rope_scaling`) are read. The vision tower is not modelled (its keys are skipped).
Here: the token ids, the thinker and the whole (`Qwen3OmniConfig`); the field readers and the
MoE decoder sections are in config_sections.py, the talker / code predictor / code2wav ones in config_speech.py
(all re-exported here: import them from this module); the audio encoder's is the shared AuT's
(v2/models/aut/config.py, re-exported too).
Must not know: weights, tensors, devices, the runtime, cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from v2.models.aut.config import AudioEncoderConfig
from v2.models.config import ConfigError, _get, _int
from v2.models.qwen3_omni.config_sections import THINKER, MoeConfig, MoeDecoderConfig, _ids
from v2.models.qwen3_omni.config_speech import (
    CodecIds, Code2WavConfig, CodePredictorConfig, TalkerConfig, TalkerDefaults, _code_predictor, _talker,
)

__all__ = ["AudioEncoderConfig", "CodecIds", "Code2WavConfig", "CodePredictorConfig", "MoeConfig", "MoeDecoderConfig",
           "Qwen3OmniConfig", "TalkerConfig", "TalkerDefaults", "ThinkerConfig", "TokenIds"]


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
