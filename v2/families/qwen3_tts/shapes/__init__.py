"""Qwen3-TTS 12 Hz's release-shaped configs (the published dimensions) for benchmarks with random weights: no
download. `qwen3_tts_12hz_1_7b.json` and `qwen3_tts_12hz_0_6b.json`, the CustomVoice configs (talker 28
layers, 2048 / 1024 wide; code predictor 5 layers x 1024; 16 code groups; the nine speakers), read by the
launch count (`bench/launches.py`). A real checkpoint's own config.json always wins over these.
"""

from importlib.resources import files

SHAPES = files(__name__)
