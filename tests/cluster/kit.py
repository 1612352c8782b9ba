"""What the cluster tests share besides the Ray cluster: the card, weights to push, waiting for a condition."""

from __future__ import annotations

import time
from typing import Callable

import torch

CARD = "moss_tts_local_tiny"


def scaled_weights(factor: float) -> dict[str, torch.Tensor]:
    """The tiny card's local-transformer weights times `factor`: a real, valid update that changes the codes."""
    from v2.card import build_model, load_card

    model = build_model(load_card(CARD))
    return {n: (p.detach() * factor).contiguous() for n, p in model.named_parameters()
            if n.startswith("local_transformer.")}


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
