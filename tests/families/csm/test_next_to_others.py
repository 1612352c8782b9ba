"""CSM next to the other families in one process: CSM requests batched while a MOSS-TTS-Local and a Qwen3-TTS
runtime run theirs equal each alone, and theirs equal theirs alone (every family's state is its own)."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import KEYS, ROLLOUT, request_of

pytestmark = pytest.mark.exact


def test_batched_equals_alone_next_to_moss_and_qwen3(crt, cref):
    from v2.runtime import Runtime

    reqs = [request_of(cref, k, seed=21 + i, max_frames=6, **ROLLOUT) for i, k in enumerate(KEYS)]
    alone = [crt.submit(r).result() for r in reqs]
    with Runtime.from_card("moss_tts_local_tiny", device="cpu") as moss, \
            Runtime.from_card("qwen3_tts_tiny", device="cpu") as qwen:
        moss_reqs = [{"text": f"Hello number {i}.", "seed": i, "max_frames": 6} for i in range(2)]
        qwen_reqs = [{"text": f"Hello number {i}.", "seed": i, "max_frames": 6} for i in range(2)]
        moss_alone = [moss.submit(r).result() for r in moss_reqs]
        qwen_alone = [qwen.submit(r).result() for r in qwen_reqs]
        handles = moss.submit_many(moss_reqs), qwen.submit_many(qwen_reqs), crt.submit_many(reqs)
        for h, b in zip(handles[2], alone):
            a = h.result()
            np.testing.assert_array_equal(a.trajectory.codes, b.trajectory.codes)
            np.testing.assert_array_equal(a.trajectory.logprobs, b.trajectory.logprobs)
            np.testing.assert_array_equal(a.audio, b.audio)
        for hs, bs in ((handles[0], moss_alone), (handles[1], qwen_alone)):
            for h, b in zip(hs, bs):
                np.testing.assert_array_equal(h.result().codes, b.codes)
