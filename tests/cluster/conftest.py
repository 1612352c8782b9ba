"""One real local Ray cluster (2 CPUs, no dashboard) for every cluster test, started once and shut down after;
the tiny card's reference runtime in this process; weights to push."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest
import torch

CARD = "moss_tts_local_tiny"


@pytest.fixture(scope="package")
def ray_cluster() -> Any:
    ray = pytest.importorskip("ray", reason="the cluster tests need Ray: pip install v2[ray]")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


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
