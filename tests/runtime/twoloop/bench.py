"""The two-loop test family's bench hooks (what v2/bench/family.py asks of a family's bench): `overhead`, its
stand-ins for the engine bench (`python -m v2.bench.engine --register twoloop=twoloop --two-loop CARD`, with
tests/runtime on PYTHONPATH): executors that keep their host halves and answer at once, and requests that
decode a given number of frames in both loops."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Iterator

import torch

from twoloop.family import HOP


@contextmanager
def instant_experts(runtime: Any) -> Iterator[None]:
    """Every executor's device half answers at once with zeros of its result's shape (code 0, logprob 0)."""
    executors = runtime.family.executors
    real = {kind: ex.launch for kind, ex in executors.items()}
    shapes = {"think_prefill": lambda p: torch.zeros(int(p[1].shape[0])),
              "talk_prefill": lambda p: torch.zeros(int(p[1].shape[0])),
              "think_token": lambda p: torch.zeros(int(p[1].shape[0]), 2),
              "talk_frame": lambda p: torch.zeros(int(p[1].shape[0]), 2),
              "audio_chunk": lambda p: torch.zeros(int(p[0].shape[0]), 1, int(p[0].shape[1]) * HOP)}
    try:
        for kind, ex in executors.items():
            ex.launch = shapes[kind.value]
        yield
    finally:
        for kind, ex in executors.items():
            ex.launch = real[kind]


def one_row_requests(runtime: Any, rows: int, *, frames: int) -> list[dict[str, Any]]:
    """`rows` requests with a one-row prompt and a one-row talker prefix, each making `frames` tokens and frames."""
    return [{"prompt": [i % 48], "talker_prefix": [1], "tokens": frames} for i in range(rows)]


overhead = SimpleNamespace(instant_experts=instant_experts, one_row_requests=one_row_requests)
fixed_batch = None
