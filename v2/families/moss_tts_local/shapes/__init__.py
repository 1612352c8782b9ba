"""MOSS-TTS-Local's release-shaped configs (the published dimensions), for benchmarks with random weights: no
download.

`moss_tts_local_v1_5.json` is a config.json in the release's schema with the published sizes (Qwen3-4B
backbone, 1-layer local transformer); `moss_audio_tokenizer_v2.json` the codec's (six stages, ~1 B decoder
parameters). A real checkpoint's own config.json always wins over these. Package data (pyproject.toml).
"""

from importlib.resources import files

SHAPES = files(__name__)
