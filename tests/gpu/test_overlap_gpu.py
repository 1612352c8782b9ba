"""On a GPU: the overlapped step (CudaStream, depth 1: step N+1 launched before step N is read) gives the codes
and audio of the synchronous order (depth 0), streamed == final, and leaves nothing held."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.runtime import Runtime
from v2.runtime.device import CudaStream

pytestmark = pytest.mark.gpu


def test_the_overlapped_cuda_step_equals_the_synchronous_order():
    device = torch.device("cuda")
    results = {}
    for depth in (0, 1):
        rt = Runtime.from_card("moss_tts_local_tiny", device="cuda", stream=CudaStream(device, depth=depth))
        try:
            assert rt.stats()["device_depth"] == depth
            requests = [{"text": f"gpu overlap {i} " * (1 + i % 3), "seed": i, "max_frames": 8 + 7 * i,
                         "stream": True, "profile": "rollout"} for i in range(6)]
            handles = rt.submit_many(requests)
            results[depth] = [(list(h), h.result(120)) for h in handles]
            s = rt.stats()
            assert s["running"] == s["kv_slots_in_use"] == s["codec_slots_in_use"] == s["steps_in_flight"] == 0
        finally:
            rt.close()
    for (_, a), (chunks, b) in zip(results[0], results[1]):
        assert a.finish_reason == b.finish_reason
        assert np.array_equal(a.codes, b.codes)
        np.testing.assert_allclose(a.audio, b.audio, atol=1e-5)
        np.testing.assert_allclose(a.trajectory.logprobs, b.trajectory.logprobs, atol=1e-4)
        assert np.array_equal(np.concatenate([c.audio for c in chunks], axis=1), b.audio)
