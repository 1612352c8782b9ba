"""On a GPU: the forced aligner's device forms (F.linear, SDPA under the key mask, one strided patch copy per conv)
on CUDA encode a batch of clips as the exact CPU forms do, to float32 rounding, and its marker logits agree."""

from __future__ import annotations

import copy

import pytest
import torch

from v2.models.forced_aligner.align import prompt_ids
from v2.models.forced_aligner.features import audio_tokens
from v2.models.forced_aligner.launches import dims_config, random_model
from v2.models.forced_aligner.model import ForcedAligner

pytestmark = pytest.mark.gpu

LENGTHS = [40, 200, 1700, 101, 5]  # frames: a part chunk, whole chunks, several attention windows


@pytest.fixture(scope="module")
def cpu_model() -> ForcedAligner:
    torch.manual_seed(0)
    return random_model(dims_config("tiny", 2, 1))


def test_the_encoder_on_cuda_equals_the_cpus_forms(cpu_model: ForcedAligner) -> None:
    gen = torch.Generator().manual_seed(5)
    mels = [torch.randn(128, n, generator=gen) for n in LENGTHS]
    gpu_model = copy.deepcopy(cpu_model).to("cuda")
    with torch.no_grad():
        want = cpu_model.encode(mels)
        got = gpu_model.encode([m.to("cuda") for m in mels])
        again = gpu_model.encode([m.to("cuda") for m in mels[::-1]])[::-1]  # kept buffers reused in another order
    for g, a, w in zip(got, again, want):
        assert g.device.type == "cuda" and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, rtol=1e-3, atol=1e-4)
        torch.testing.assert_close(a.cpu(), w, rtol=1e-3, atol=1e-4)


def test_marker_logits_on_cuda_agree_with_the_cpus(cpu_model: ForcedAligner) -> None:
    gen = torch.Generator().manual_seed(7)
    mels = [torch.randn(128, n, generator=gen) for n in (200, 101)]
    cfg = cpu_model.cfg
    words = [[5, 6], [7], [8, 9, 10]]  # three words' token ids
    ids = [torch.tensor(prompt_ids(words, audio_tokens(m.shape[1], cfg.audio), cfg.ids)) for m in mels]
    gpu_model = copy.deepcopy(cpu_model).to("cuda")
    with torch.no_grad():
        want = cpu_model.marker_logits(ids, mels)
        got = gpu_model.marker_logits([i.to("cuda") for i in ids], [m.to("cuda") for m in mels])
    for g, w in zip(got, want):
        assert g.shape == w.shape == (6, w.shape[1])  # two markers a word
        torch.testing.assert_close(g.float().cpu(), w.float(), rtol=1e-3, atol=1e-3)
