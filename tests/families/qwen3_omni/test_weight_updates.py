"""Weight updates reach every part of the Qwen3-Omni cascade by the release's names: the seeded tiny card given
the fixture checkpoint through `update_weights_from_disk` speaks the fixture's references exactly (every fused and
per-expert key placed), and one expert's release key changes that expert's rows and nothing else."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch

from tests.families.qwen3_omni.conftest import request
from tests.families.qwen3_omni.test_parity import check
from tests.models.qwen3_omni.conftest import CHECKPOINT
from v2.runtime import Runtime
from v2.runtime.weight_updates import WeightUpdateError

pytestmark = pytest.mark.exact


@pytest.fixture(scope="module")
def seeded() -> Iterator[Runtime]:
    with Runtime.from_card("qwen3_omni_tiny", device="cpu", dtype=torch.float32) as runtime:
        yield runtime


def test_the_fixture_checkpoint_by_update_speaks_the_references(seeded: Runtime, fixture: tuple[dict, dict]) -> None:
    ref, meta = fixture
    seeded.update_weights_from_disk(str(CHECKPOINT), version=1)
    for key in ("a", "c"):
        check(ref, meta, key, seeded.submit(request(ref, meta, key)).result())


def test_one_experts_key_updates_its_rows_only(seeded: Runtime) -> None:
    params = dict(seeded.family.weights.named_parameters())
    stacked = params["talker.talker.model.layers.0.mlp.experts.gate_up_proj"]  # [experts, 2 I, H]: gate rows, then up rows
    before = stacked.detach().clone()
    half = stacked.shape[1] // 2
    seeded.update_weights({"talker.model.layers.0.mlp.experts.1.up_proj.weight": torch.zeros(half, stacked.shape[2])},
                          version=seeded.weight_version + 1)
    after = stacked.detach()
    assert torch.equal(after[1, half:], torch.zeros_like(after[1, half:]))
    assert torch.equal(after[1, :half], before[1, :half])
    assert torch.equal(after[0], before[0]) and torch.equal(after[2:], before[2:])


def test_the_vision_tower_and_unknown_names_are_refused(seeded: Runtime) -> None:
    with pytest.raises(WeightUpdateError, match="thinker.visual.x"):
        seeded.update_weights({"thinker.visual.x": torch.zeros(2)}, version=seeded.weight_version + 1)
