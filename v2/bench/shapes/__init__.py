"""Release-shaped configs (the published dimensions) for benchmarks with random weights: no download.

A family's own configs live with the family where it provides them (MOSS-TTS-Local's:
`v2.families.moss_tts_local.shapes`); this folder holds the ones the benchmarks keep themselves. A real
checkpoint's own config.json always wins over these.
"""

from importlib.resources import files

SHAPES = files(__name__)
