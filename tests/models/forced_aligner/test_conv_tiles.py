"""The aligner's conv front end: the AuT's convs in `CONV_TILE`-row exact calls (few calls, the same values)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from v2.bench.launches import counted
from v2.models.forced_aligner.launches import dims_config, random_model
from v2.models.forced_aligner.model import CONV_TILE


def test_conv_front_end_makes_few_matmul_calls_and_matches_the_encoder():
    model = random_model(dims_config("tiny", 1, 1))
    gen = torch.Generator().manual_seed(3)
    mels = [torch.randn(128, 190, generator=gen), torch.randn(128, 40, generator=gen)]  # 2 chunks, 1 chunk
    ops = counted(lambda: model.encoder_inputs(mels), use_kernels=False)
    # the three convs' output rows over the 3 chunks: 9600, 2400, 624; in 256-row calls 38 + 10 + 3, and
    # conv_out's 3 (16-row tiles made 600 + 150 + 39 + 3 calls)
    assert CONV_TILE == 256 and ops["addmm"] + ops["mm"] <= 60
    chunk = 2 * model.cfg.audio.n_window
    padded = [F.pad(m, (0, -m.shape[1] % chunk)) for m in mels]
    with torch.no_grad():
        want = model.audio_tower.conv_rows(padded)  # the shared AuT's front end (16-row tiles)
        got = model.encoder_inputs(mels)
    for g, w, m in zip(got, want, mels):
        assert g.shape[0] <= w.shape[0]
        torch.testing.assert_close(g, w[: g.shape[0]], rtol=1e-5, atol=1e-5)
