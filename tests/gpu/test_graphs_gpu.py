"""On a GPU: graph replay gives exactly the eager path's codes, logprobs and audio."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.families.moss_tts_local.bench.kv import spread_blocks
from v2.card import build_codec, build_model, load_card
from v2.families.moss_tts_local.ar_decode import FramePlan
from v2.families.moss_tts_local.vocoder import ChunkPlan
from v2.sampling_settings import SamplingSettings
from v2.models.moss_tts_local.tokenizer import ByteTokenizer
from v2.runtime import Runtime
from v2.families.moss_tts_local.codec_executor import CodecExecutor
from v2.families.moss_tts_local.ar_executor import ARExecutor

pytestmark = pytest.mark.gpu
SETTINGS = [SamplingSettings(), SamplingSettings.uniform(1.1, 10, 0.9, 1.3), SamplingSettings.uniform(0.0),
            SamplingSettings.uniform(0.8, 0, 0.7)]


@pytest.fixture(scope="module")
def gpu_parts():
    card = load_card("moss_tts_local_tiny")
    return card, build_model(card, device="cuda"), build_codec(card, device="cuda")


@pytest.fixture(scope="module")
def bf16_model():
    return build_model(load_card("moss_tts_local_tiny"), device="cuda", dtype=torch.bfloat16)


def _executor(model, graphs: bool) -> ARExecutor:
    ex = ARExecutor(model, num_slots=16, max_len=512, batch_buckets=[1, 2, 4, 8, 16], graphs=graphs)
    spread_blocks(ex)  # the same scattered blocks in both executors: the tables are written after capture
    for slot in range(16):
        ex.admit(slot, SETTINGS[slot % 4], seed=7 + slot)
        ex.hidden[slot] = torch.randn(model.cfg.hidden_size, generator=torch.Generator().manual_seed(slot)).to(ex.hidden)
    return ex


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rows,bucket", [(1, 1), (2, 2), (3, 4), (8, 8), (11, 16), (16, 16)])
def test_frame_graph_equals_eager_for_every_bucket(gpu_parts, bf16_model, rows, bucket, dtype):
    model = gpu_parts[1] if dtype == "float32" else bf16_model
    graph, eager = _executor(model, True), _executor(model, False)
    assert graph.graphs.stats()["captured"] == len(graph.graphs.keys)
    for step in range(3):  # rows at mixed positions and settings; state carried between steps
        plans = [FramePlan(slot, 10 + 9 * slot + step, step, step > 0) for slot in range(rows)]
        replayed = graph.frame(plans, bucket)
        context = eager.stage(plans, bucket)
        direct = eager.frame_step(graph.graph_key(bucket, context))
        assert torch.equal(replayed[:rows], direct[:rows])
        assert torch.equal(graph.hidden[:-1], eager.hidden[:-1])  # every real slot; the last is the dummy
        assert torch.equal(graph.presence[:-1], eager.presence[:-1])
        assert torch.equal(graph.kv.k[:, :-1], eager.kv.k[:, :-1])  # every real block; the last is the dummy
    assert graph.graphs.stats()["replays"] == 3


def test_runtime_with_graphs_equals_runtime_without(gpu_parts):
    card, model, codec = gpu_parts
    results = []
    for graphs in (True, False):
        rt = Runtime(card, model, codec, ByteTokenizer(), graphs=graphs)
        try:
            first = [rt.submit({"text": f"request {i}", "seed": i, "max_frames": 20 + 3 * i, "stream": True,
                                "sampling": {"repetition_penalty": 1.2} if i % 2 else {}}) for i in range(6)]
            first[0].result(120)
            late = [rt.submit({"text": f"late {i}", "seed": 50 + i, "max_frames": 15}) for i in range(3)]  # join
            results.append([h.result(120) for h in first + late])
            stats = rt.stats()["graphs"]
            assert (stats["ar_frame"]["replays"] > 0) == graphs
        finally:
            rt.close()
    for a, b in zip(*results):
        assert np.array_equal(a.codes, b.codes)
        # when the late requests join differs between the runs, so do the codec's batch shapes (and GEMM kernels)
        np.testing.assert_allclose(a.audio, b.audio, atol=1e-5)


def test_codec_graph_equals_eager_chunk_decode(gpu_parts):
    _, _, codec = gpu_parts
    codes = torch.randint(0, 1024, (3, 40, 12), generator=torch.Generator().manual_seed(3)).tolist()
    outs = []
    for graphs in (True, False):
        ex = CodecExecutor(codec, num_slots=4, batch_buckets=[1, 2, 4], frame_buckets=[4, 8, 16, 32], graphs=graphs)
        chunks = []
        for start, n in ((0, 3), (3, 25), (28, 12)):
            plans = [ChunkPlan(s, tuple(map(tuple, codes[s][start:start + n])), False) for s in range(3)]
            chunks.append(ex.chunk(plans, 4, 4 if n <= 4 else 32 if n > 16 else 16)[:3, :, : n * 3840].cpu())
        outs.append(torch.cat(chunks, -1))
        assert (ex.graphs.stats()["replays"] == 3) == graphs
    assert torch.equal(outs[0], outs[1])
