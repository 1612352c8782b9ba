"""Qwen3-Omni-30B-A3B-Instruct's shapes as a config, for counting and timing without the checkpoint.

Owns: `release_config()`: a `Qwen3OmniConfig` with the release's widths, depths, expert counts and routing
(the fixture README's "Release values" table) and its ids; `release_dict()` the config.json it is read from.
Only the fields the config readers use are given. No weights, no download.
Must not know: the models' modules, requests, devices.
"""

from __future__ import annotations

from typing import Any

from v2.models.qwen3_omni.config import Qwen3OmniConfig

_THINKER_TEXT = dict(vocab_size=152064, hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                     num_key_value_heads=4, head_dim=128, intermediate_size=768, moe_intermediate_size=768,
                     num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, rms_norm_eps=1e-6,
                     rope_parameters=dict(rope_type="default", rope_theta=1000000, mrope_section=[24, 20, 20],
                                          interleaved=True, mrope_interleaved=True))
_AUDIO = dict(num_mel_bins=128, d_model=1280, encoder_layers=32, encoder_attention_heads=20, encoder_ffn_dim=5120,
              downsample_hidden_size=480, output_dim=2048, n_window=50, n_window_infer=800, conv_chunksize=500,
              max_source_positions=1500)
_TALKER_TEXT = dict(vocab_size=3072, hidden_size=1024, num_hidden_layers=20, num_attention_heads=16,
                    num_key_value_heads=2, head_dim=128, intermediate_size=2048, moe_intermediate_size=384,
                    num_local_experts=128, num_experts_per_tok=6, norm_topk_prob=True,
                    shared_expert_intermediate_size=768, rms_norm_eps=1e-6,
                    rope_parameters=dict(rope_type="default", rope_theta=1000000, mrope_section=[24, 20, 20],
                                         interleaved=True))
_PREDICTOR = dict(vocab_size=2048, hidden_size=1024, num_hidden_layers=5, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, intermediate_size=3072, num_code_groups=16, rms_norm_eps=1e-6,
                  rope_parameters=dict(rope_type="default", rope_theta=1000000))
_CODE2WAV = dict(codebook_size=2048, num_quantizers=16, hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                 num_key_value_heads=16, intermediate_size=3072, decoder_dim=1536, sliding_window=72,
                 rms_norm_eps=1e-5, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2],
                 layer_scale_initial_scale=0.01, rope_parameters=dict(rope_type="default", rope_theta=10000))
_MEDIA_IDS = dict(audio_start_token_id=151669, audio_end_token_id=151670, audio_token_id=151675,
                  image_token_id=151655, video_token_id=151656, vision_start_token_id=151652)


def release_dict() -> dict[str, Any]:
    """The release's config.json as far as the config readers go (vision tower omitted: not built)."""
    return dict(
        enable_audio_output=True, im_start_token_id=151644, im_end_token_id=151645, system_token_id=8948,
        user_token_id=872, assistant_token_id=77091,
        thinker_config=dict(text_config=dict(_THINKER_TEXT), audio_config=dict(_AUDIO), user_token_id=872,
                            vision_end_token_id=151653, position_id_per_seconds=13, seconds_per_chunk=2,
                            **_MEDIA_IDS),
        talker_config=dict(text_config=dict(_TALKER_TEXT), code_predictor_config=dict(_PREDICTOR),
                           accept_hidden_layer=24, thinker_hidden_size=2048, num_code_groups=16,
                           codec_bos_id=2149, codec_eos_token_id=2150, codec_nothink_id=2155, codec_pad_id=2148,
                           codec_think_bos_id=2156, codec_think_eos_id=2157,
                           speaker_id=dict(chelsie=2301, ethan=2302, aiden=2303), position_id_per_seconds=13,
                           seconds_per_chunk=2, spatial_merge_size=2, **_MEDIA_IDS),
        code2wav_config=dict(_CODE2WAV))


def release_config() -> Qwen3OmniConfig:
    return Qwen3OmniConfig.from_dict(release_dict())
