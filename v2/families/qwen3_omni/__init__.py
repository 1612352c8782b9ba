"""The Qwen3-Omni family: the thinker -> talker -> code2wav cascade of `Qwen3OmniMoeForConditionalGeneration`
on the runtime, three driven loops in one graph with the audio encoder in front (designs/qwen3_omni.md).

Owns (one module each): its card section (card.py), the request's fields (request.py), checking a request and
laying out the thinker's prompt and the talker's prefix (prepare.py; messages rendered by chat.py), the front
loop of the prompt's audio (front.py), the loops `thinker` -> `talker` -> `code2wav` (loops.py), their
executors (executors.py, over the parts as models.py adapts them), the result and the RL trajectory
(results.py), the teacher-forced recompute (recompute.py), and the binding of all of them for the runtime
(family.py: `FAMILY`). The networks stay in `v2.models.qwen3_omni`.
Importing this package loads nothing: import the module you need.
"""
