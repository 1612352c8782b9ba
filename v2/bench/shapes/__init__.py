"""Release-shaped configs (the published dimensions) for benchmarks with random weights: no download.

`moss_tts_local_v1_5.json` is a config.json in the release's schema with the published sizes (Qwen3-4B
backbone, 1-layer local transformer); `moss_audio_tokenizer_v2.json` the codec's (six stages, ~1 B decoder
parameters); `qwen3_tts_12hz_1_7b.json` and `qwen3_tts_12hz_0_6b.json` the Qwen3-TTS 12 Hz CustomVoice
configs (talker 28 layers, 2048 / 1024 wide; code predictor 5 layers x 1024; 16 code groups; the nine
speakers). A real checkpoint's own config.json always wins over these.
"""

from importlib.resources import files

SHAPES = files(__name__)
