"""The depth decoder's fused pass (`DepthDecoder.predict_fused`, the kernels in Triton's interpreter) completes a frame
as the torch pass does: the same codes, raw logits and logprobs up to float rounding, and the same per-frame cache,
for the tiny fixture (32 codebooks, head_dim 8) and other dims (20 codebooks, four query heads over one kv head,
head_dim 16), and through `Csm.predict_codes`."""

from __future__ import annotations

import copy

import pytest
import torch

from v2.models import kernels
from v2.models.csm.model import Csm
from v2.models.csm.sampling import CsmSamplingTensors, draw
from v2.models.kernels import frame_attention

from .test_batch_and_sampling import MIXED

pytestmark = pytest.mark.skipif(frame_attention.triton is None, reason="needs triton")


def other_dims(other_config: dict) -> dict:
    """20 codebooks (a frame between 16 and 32 positions) and a GQA depth stack of head_dim 16."""
    d = copy.deepcopy(other_config)
    d.update(num_codebooks=20)
    d["depth_decoder_config"].update(num_codebooks=20, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=1, head_dim=16)
    return d


def frame_inputs(model: Csm, b: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, CsmSamplingTensors]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, model.cfg.hidden_size, generator=g) * 2
    c0 = torch.randint(0, model.cfg.vocab_size, (b,), generator=g)
    return hidden, c0, CsmSamplingTensors.build((MIXED * b)[:b], list(range(3, 3 + b)))


def check_decoder(model: Csm, b: int, monkeypatch) -> None:
    """The torch pass and the fused pass with one draw (the torch sampler), then their caches."""
    dd = model.depth_decoder
    assert dd.fits_kernels
    hidden, c0, s = frame_inputs(model, b, 1)
    frame = torch.arange(b) * 7
    n = model.num_codebooks

    def pick(k: int, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return draw(logits, s, 1, frame, k, n)

    want_cache, got_cache = dd.allocate_kv(b, dtype=model.dtype, device="cpu"), dd.allocate_kv(b, dtype=model.dtype,
                                                                                                  device="cpu")
    want = dd.predict(hidden, c0, pick, cache=want_cache)
    monkeypatch.setattr(kernels, "FORCE", True)
    got = dd.predict_fused(hidden, c0, pick, cache=got_cache)
    assert torch.equal(got[0], want[0])  # the same codes
    assert got[1].dtype == torch.float32 and got[1].shape == want[1].shape
    torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[2], want[2], atol=1e-5, rtol=1e-5)
    for layer in range(len(dd.model.layers)):  # every position of every row's slot (the last position is never written)
        torch.testing.assert_close(got_cache.k[layer][:b], want_cache.k[layer][:b], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_cache.v[layer][:b], want_cache.v[layer][:b], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_the_fused_pass_completes_the_tiny_fixtures_frames_as_the_torch_pass(cmodel, monkeypatch):
    check_decoder(cmodel, 2, monkeypatch)


@torch.no_grad()
def test_the_fused_pass_completes_frames_at_other_dims_as_the_torch_pass(other_config, monkeypatch):
    check_decoder(Csm.from_seed(other_dims(other_config), seed=3), 3, monkeypatch)


@torch.no_grad()
def test_predict_codes_takes_the_fused_pass_where_the_kernels_run(other_config, monkeypatch):
    """Through the model with its own draws (the sampling kernel too), padding rows flagged as the executor does."""
    model = Csm.from_seed(other_dims(other_config), seed=5)
    hidden, c0, s = frame_inputs(model, 3, 2)
    frame, valid = torch.tensor([0, 4, 9]), torch.tensor([True, True, False])
    want = model.predict_codes(hidden, c0, s, frame, valid=valid)
    calls: list[int] = []
    fused = type(model.depth_decoder).predict_fused
    monkeypatch.setattr(type(model.depth_decoder), "predict_fused",
                        lambda self, *a, **kw: calls.append(1) or fused(self, *a, **kw))
    monkeypatch.setattr(kernels, "FORCE", True)
    got = model.predict_codes(hidden, c0, s, frame, valid=valid)
    assert calls == [1]
    assert torch.equal(got[0][:2], want[0][:2])  # row 2 is padding: its outputs mean nothing
    torch.testing.assert_close(got[1][:2], want[1][:2], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[2][:2], want[2][:2], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_the_projected_table_is_each_row_through_the_projection_and_follows_the_weights(other_config):
    """Rows equal the projection of each table row alone; an in-place change of either weight remakes the table."""
    dd = Csm.from_seed(other_dims(other_config), seed=6).depth_decoder
    table, proj = dd.model.embed_tokens.weight, dd.model.inputs_embeds_projector
    rows = torch.tensor([0, 5, table.shape[0] - 1])
    first = dd.projected_table()
    assert first.shape == (table.shape[0], dd.cfg.depth.hidden_size) and dd.projected_table() is first
    for r in rows.tolist():
        assert torch.equal(first[r], proj(table[r][None])[0])
    proj.weight.mul_(2)
    assert torch.equal(dd.projected_table()[rows], proj(table[rows]))
    table[5].add_(1)
    assert torch.equal(dd.projected_table()[5], proj(table[5][None])[0])
