"""A test family whose card chains two paged loops and a chunk loop: a tiny "thinker" (a Qwen3 stack of the
shared `v2/models/qwen3.py`) whose tokens feed, while both decode, a tiny "talker" (another Qwen3 stack:
other width, other layer count, its own paged KV pool) whose frames feed a chunk loop that makes the audio.
The engine drives it through its card's graph with no line of `v2/` naming it (registered with
`v2.registry.register("twoloop", "twoloop")`); `tests/runtime/test_twoloop.py` holds its properties and
`python -m v2.bench.engine --two-loop` times it.
"""
