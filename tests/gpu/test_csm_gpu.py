"""On a GPU, the CSM family: the tiny fixture through the runtime in float32 gives the reference's greedy codes
and stop frames; a runtime replaying CUDA graphs gives the codes of one running eager; a request among others
equals itself alone (codes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.families.csm.conftest import CHECKPOINT, CSM_DIR, GREEDY, KEYS, fixture_card, request_of

pytestmark = pytest.mark.gpu


def _runtime(**options: Any) -> Any:
    from v2.runtime import Runtime

    return Runtime.from_card(fixture_card(), checkpoint=str(CHECKPOINT), device="cuda", dtype=torch.float32, **options)


@pytest.fixture(scope="module")
def ref() -> dict[str, np.ndarray]:
    with np.load(CSM_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


def test_the_fixture_on_cuda(ref):
    with _runtime() as rt:
        results = {k: rt.submit(request_of(ref, k, max_frames=8, profile="rollout", **GREEDY)).result(300) for k in KEYS}
    for k, r in results.items():
        np.testing.assert_array_equal(r.trajectory.codes, ref[f"{k}_gen_codes"])
        np.testing.assert_allclose(r.trajectory.logprobs, ref[f"{k}_gen_logprobs"], atol=1e-3, rtol=1e-3)


def test_graphs_equal_eager_and_batched_equals_alone(ref):
    requests = [{"text_ids": ref["s1_input_ids"].tolist()[1:-1], "seed": 60 + i, "max_frames": 10 + i,
                 "temperature": 0.9} for i in range(6)]
    got = []
    for graphs in (True, False):
        with _runtime(graphs=graphs) as rt:
            got.append([h.result(300).codes for h in [rt.submit(r) for r in requests]])
            if not graphs:
                alone = rt.submit(requests[3]).result(300).codes
    for a, b in zip(*got):
        assert np.array_equal(a, b)
    assert np.array_equal(got[1][3], alone)
