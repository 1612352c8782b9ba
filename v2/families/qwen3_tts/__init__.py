"""The Qwen3-TTS 12 Hz family: everything model-specific of Qwen3-TTS (talker + code predictor + speaker
encoder) and its 12 Hz codec.

Owns (one module each): its card section (card.py), the request's fields (request.py), checking a request
and laying out its prompt (prepare.py), its loops `talker` -> `codec` with `encode` in front (talker.py,
codec.py, encode.py), their executors (talker_executor.py, codec_executor.py, encode_executor.py), the
result (results.py), weight names (weights.py), and the binding of all of them for the runtime (family.py:
`FAMILY`). The networks stay in `v2.models.qwen3_tts` and `v2.models.qwen3_codec`.
Importing this package loads nothing: import the module you need.
"""
