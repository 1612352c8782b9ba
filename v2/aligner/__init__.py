"""The word aligner any card can add: Qwen3-ForcedAligner as an added loop named "aligner" (v2/runtime/added.py).

Modules: `card` (the aligner's cards: `cards/forced_aligner_*.toml`, `kind = "aligner"`; a card name, a
checkpoint directory or a hub id resolved to one), `tokenizer` (a word -> its ids: the release's byte-level
BPE, or "bytes" for the seeded card), `service` (`Aligner`: the model, its tokenizer and `align`, a service in
itself behind `Runtime.align`), `loop` (the added loop: a request's audio cut into its sentences / segments,
each aligned once its audio is complete), `executor` (its work kind: a batch of spans across requests, one
forward on a GPU, on a CPU one per group of like prompt length) and `factory` (`FACTORY`, registered as the
added loop "aligner"). Its cost on the serving path is `python -m v2.bench --aligner CARD --paired N`
(v2/bench/aligner_cost.py). designs/aligner.md.
Importing this package imports no model (`factory.build` does).
"""
