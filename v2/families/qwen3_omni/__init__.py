"""The Qwen3-Omni family: the thinker -> talker -> code2wav cascade of `Qwen3OmniMoeForConditionalGeneration`
on the runtime, three driven loops in one graph (designs/qwen3_omni.md).

Owns (one module each): its card section (card.py), the request's fields (request.py), checking a request and
laying out the thinker's prompt and the talker's prefix (prepare.py), the loops `thinker` -> `talker` ->
`code2wav` (loops.py), their executors (executors.py), and the binding of all of them for the runtime
(family.py: `FAMILY`). The networks stay in `v2.models.qwen3_omni`; the chat template is chat.py's.
Importing this package loads nothing: import the module you need.
"""
