"""The path that runs off the CPU (F.linear, F.conv1d, F.elu, SDPA, banded window attention): forced on the CPU
it still reproduces the reference and streams within float rounding; on CUDA (gpu-marked) the same checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import v2.models.exact as exact
import v2.models.mimi.transformer as mimi_transformer
import v2.models.conv_ops as qwen3_ops
from v2.models.window_attention import banded_window_attention

from .conftest import TOL, random_codes


def check_codec(model, mref, device: torch.device) -> None:
    (codes,) = model.encode([torch.from_numpy(mref["wav0"]).to(device)])
    assert torch.equal(codes.cpu(), torch.from_numpy(mref["wav0_codes"]))
    wav = model.decode(torch.from_numpy(mref["wav0_codes"])[None].to(device))
    np.testing.assert_allclose(wav[0].cpu().numpy(), mref["wav0_decoded"], **TOL)
    codes = random_codes(model, 12, 4).to(device)
    state, out = model.allocate_state(2), []
    for s, n in ((0, 1), (1, 4), (5, 7)):
        out.append(model.decode_chunk(torch.tensor([1], device=device), codes[:, s : s + n], state=state))
    torch.testing.assert_close(torch.cat(out, 1), model.decode(codes), atol=1e-5, rtol=0)


def test_the_device_path_forced_on_the_cpu(mimi, mref, monkeypatch):
    monkeypatch.setattr(exact, "on", lambda x: False)
    monkeypatch.setattr(qwen3_ops, "exact_path", lambda x: False)
    monkeypatch.setattr(mimi_transformer, "window_attention", banded_window_attention)
    check_codec(mimi, mref, torch.device("cpu"))


@pytest.mark.gpu
def test_cuda(mref):
    from v2.models.mimi import MimiModel

    from .conftest import CHECKPOINT

    model = MimiModel.from_pretrained(CHECKPOINT, prefix="codec_model.", config_key="codec_config", device="cuda")
    check_codec(model, mref, torch.device("cuda"))
