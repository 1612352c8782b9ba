"""The Sesame CSM family: a Llama backbone choosing codebook 0 of each 80 ms frame, a depth decoder choosing
codebooks 1..N-1, and the Mimi codec (24 kHz mono, 12.5 Hz) for context audio in and speech out.

Owns (one module each): its card section (card.py), the request's fields (request.py), checking a request
and laying out its prompt from conversation turns (prepare.py, turns.py), its loops `backbone` -> `codec`
with `encode` in front (backbone.py, codec.py, encode.py), their executors (frame_executor.py,
codec_executor.py, encode_executor.py), the result and trajectory (results.py), the RL recompute
(recompute.py), weight names (weights.py), and the binding of all of them for the runtime (family.py:
`FAMILY`). The networks stay in `v2.models.csm` and `v2.models.mimi`.
Importing this package loads nothing: import the module you need.
"""
