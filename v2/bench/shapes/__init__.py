"""Release-shaped configs (the published dimensions) for benchmarks with random weights: no download.

A family's own configs live with the family where it provides them (MOSS-TTS-Local's:
`v2.families.moss_tts_local.shapes`); this folder holds the ones the benchmarks keep themselves:
`qwen3_tts_12hz_1_7b.json` and `qwen3_tts_12hz_0_6b.json`, the Qwen3-TTS 12 Hz CustomVoice configs (talker
28 layers, 2048 / 1024 wide; code predictor 5 layers x 1024; 16 code groups; the nine speakers). A real
checkpoint's own config.json always wins over these.
"""

from importlib.resources import files

SHAPES = files(__name__)
