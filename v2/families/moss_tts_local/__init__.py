"""The MOSS-TTS-Local family: everything model-specific of MOSS-TTS-Local v1.5 and its codec.

Owns (one module each): its card section (card.py), its loops `ar_decode` -> `vocoder` with `encode` in
front (ar_decode.py, vocoder.py, encode.py), their executors (ar_executor.py, codec_executor.py,
encode_executor.py), checking a request and laying out its prompt (prepare.py) and the carried and
recompute layouts (segments.py), the result (results.py), the RL recompute (recompute.py), weight names
(weights.py), and the binding of all of them for the runtime (family.py: `FAMILY`). The networks and
kernels stay in `v2.models` (shared with the reference loop `v2.models.moss_tts_local.generate` and the benchmarks).
Importing this package loads nothing: import the module you need.
"""
