"""The Llama stacks (no q/k norms, Llama-3 RoPE) through the layer and decode-attention kernels equal the torch
form: what a GPU runs, checked on the CPU with Triton's interpreter (float32)."""

from __future__ import annotations

import pytest
import torch

from v2.models import kernels
from v2.models.csm.model import Csm
from v2.models.csm.prompt import Turn, prompt_rows
from v2.models.csm.sampling import CsmSamplingTensors

from .test_batch_and_sampling import MIXED

pytestmark = pytest.mark.skipif(kernels.triton is None, reason="needs triton")


def passes(model, monkeypatch) -> list[tuple[torch.Tensor, ...]]:
    """Prefill two prompts (left-padded), then one frame step (N-1 depth decode steps, one backbone decode
    row): without and with the kernels."""
    frames = torch.randint(0, 32, (2, model.num_codebooks), generator=torch.Generator().manual_seed(0))
    prompts = [prompt_rows(model, [Turn("0", text_ids=(5, 6, 7))]),
               prompt_rows(model, [Turn("1", text_ids=(8, 9, 10, 11), audio=frames), Turn("0", text_ids=(12,))])]
    lengths = torch.tensor([p.shape[0] for p in prompts])
    t_max = int(lengths.max())
    x = torch.zeros(2, t_max, model.cfg.hidden_size)
    valid = torch.zeros(2, t_max, dtype=torch.bool)
    for i, p in enumerate(prompts):
        x[i, t_max - p.shape[0]:] = p
        valid[i, t_max - p.shape[0]:] = True
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)
    s = CsmSamplingTensors.build(MIXED[:2], [1, 2])
    runs, triton = [], kernels.triton
    for on in (False, True):
        monkeypatch.setattr(kernels, "FORCE", on)
        monkeypatch.setattr(kernels, "triton", triton if on else None)
        cache = model.allocate_kv(2, 32)
        slots = torch.tensor([1, 0])
        h, lg = model.prefill(x, cache, slots, positions, valid, torch.full((2,), t_max - 1), t_max)
        step = model.frame_step(h, lg, s, torch.tensor([0, 4]), cache, slots, lengths, context_len=t_max + 1)
        runs.append((h, lg, step.frame.codes, step.frame.depth_logits, step.hidden, step.logits))
    return runs


@torch.no_grad()
def test_llama_stacks_through_the_kernels_equal_the_torch_form(other_config, monkeypatch):
    """At the other sizes (5 codebooks: few interpreted depth steps; head_dim 16 and 12)."""
    off, on = passes(Csm.from_seed(other_config, seed=4), monkeypatch)
    assert torch.equal(off[2], on[2])  # the same codes
    for want, got in zip(off, on):
        torch.testing.assert_close(got.float(), want.float(), atol=1e-4, rtol=1e-4)
