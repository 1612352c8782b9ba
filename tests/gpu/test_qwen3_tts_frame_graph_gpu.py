"""On a GPU: the Qwen3-TTS talker executor's frame step replayed from its CUDA graphs (the fused sampler, the code
predictor's fused pass, the talker's decode row) gives exactly the eager step's packed result and state, bucket
by bucket, with rows at mixed positions and settings, state carried over three steps."""

from __future__ import annotations

import pytest
import torch

from v2.families.qwen3_tts.bench.framestep import executor, model_for
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.kit.sequence import FramePlan
from v2.sampling_settings import HeadSampling

pytestmark = pytest.mark.gpu
SETTINGS = [Qwen3TTSSampling(), Qwen3TTSSampling.greedy(1.05),
            Qwen3TTSSampling(HeadSampling(1.2, 0, 0.8), HeadSampling(0.7, 20, 1.0), 1.3)]  # one needs the full sort
BUCKETS = [1, 2, 4, 8, 16]


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def model(request):
    return model_for(None, torch.device("cuda")).to(getattr(torch, request.param))


@pytest.mark.parametrize("rows,bucket", [(1, 1), (2, 2), (3, 4), (8, 8), (11, 16), (16, 16)])
def test_frame_graph_equals_eager_for_every_bucket(model, rows, bucket):
    graph = executor(model, 16, 512, BUCKETS, graphs=True, settings=SETTINGS)
    eager = executor(model, 16, 512, BUCKETS, settings=SETTINGS)
    assert graph.graphs.stats()["captured"] == len(graph.graphs.keys)
    pad = model.cfg.text.tts_pad
    for step in range(3):
        plans = [FramePlan(slot, 10 + 9 * slot + step, step, step > 1, feed=pad) for slot in range(rows)]
        replayed = graph.frame(plans, bucket)
        direct = eager.frame_step(graph.graph_key(bucket, eager.stage(plans, bucket)))
        assert torch.equal(replayed[:rows], direct[:rows])
        assert torch.equal(graph.hidden[:-1], eager.hidden[:-1])  # every real slot; the last is the dummy
        assert torch.equal(graph.seen[:-1], eager.seen[:-1])
        assert torch.equal(graph.kv.k[:, :-1], eager.kv.k[:, :-1])  # every real block; the last is the dummy
    assert graph.graphs.stats()["replays"] == 3
