"""On a GPU, once the Qwen3-TTS family and its tiny card are shipped: a runtime replaying CUDA graphs gives
the codes of one running eager, request for request, through the public API only (skipped before)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from v2.card import known_cards

CARD = "qwen3_tts_tiny"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(CARD not in known_cards(), reason=f"the {CARD} card is not shipped yet")]


def _requests(rt: Any) -> list[dict[str, Any]]:
    """Six requests of mixed settings, with a speaker and a frame budget where the family takes them."""
    fields = rt.request_fields
    out = []
    for i in range(6):
        req: dict[str, Any] = {"text": f"request number {i}, spoken on a GPU", "seed": 40 + i}
        if rt.speakers and "speaker" in fields:
            req["speaker"] = rt.speakers[i % len(rt.speakers)]
        if "max_frames" in fields:
            req["max_frames"] = 12 + 3 * i
        if i % 2 and "sampling" in fields:
            req["sampling"] = {"repetition_penalty": 1.2}
        out.append(req)
    return out


def test_qwen3_runtime_with_graphs_equals_runtime_without():
    from v2.runtime import Runtime

    results = []
    for graphs in (True, False):
        rt = Runtime.from_card(CARD, device="cuda", graphs=graphs)
        try:
            handles = [rt.submit(r) for r in _requests(rt)]
            results.append([h.result(300) for h in handles])
            replays = sum(int(v.get("replays", 0)) for v in rt.stats().get("graphs", {}).values()
                          if isinstance(v, dict))
            assert (replays > 0) == graphs, rt.stats().get("graphs")
        finally:
            rt.close()
    for a, b in zip(*results):
        assert np.array_equal(a.codes, b.codes)
        np.testing.assert_allclose(a.audio, b.audio, atol=1e-5)
