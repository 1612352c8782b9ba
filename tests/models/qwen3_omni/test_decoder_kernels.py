"""The thinker's MoE decoder through the Triton kernels (Triton's interpreter on the CPU, float32) equals its torch
form: a prefill of more than `DECODE_ROWS` rows (each residual add inside the norm after it) and decode steps
(the input norm inside the q/k/v matmul, the post-attention add and norm inside the routing launch), with the
MoE blocks through the routing and grouped-expert kernels; and the kernels really served (the layers' own norms
were not called)."""

from __future__ import annotations

import pytest
import torch

from v2.models import kernels
from v2.models.kernels import grouped_experts
from v2.models.kv_cache import KVCache
from v2.models.qwen3 import RMSNorm
from v2.models.qwen3_omni import decoder

pytestmark = pytest.mark.skipif(grouped_experts.triton is None, reason="needs triton")


@torch.no_grad()
def test_prefill_and_decode_through_the_kernels_equal_the_torch_form(thinker, monkeypatch) -> None:
    model = thinker.model
    d = model.cfg.decoder
    b, t = 2, decoder.DECODE_ROWS // 2 + 3  # a prefill of b t > DECODE_ROWS rows
    g = torch.Generator().manual_seed(7)
    x = torch.randn(b, t, d.hidden_size, generator=g)
    steps = torch.randn(3, b, 1, d.hidden_size, generator=g)
    slots = torch.arange(b)

    def run() -> list[torch.Tensor]:
        cache = KVCache.allocate(d, b, t + 4, dtype=torch.float32, device="cpu")
        outs = [model.forward_cached(x, cache, slots, torch.arange(t).expand(b, t), context_len=t + 4)]
        for i, row in enumerate(steps):
            outs.append(model.forward_cached(row, cache, slots, torch.full((b, 1), t + i), context_len=t + 4))
        return outs

    want = run()
    norms: list[int] = []
    real_forward = RMSNorm.forward

    def counted(self: RMSNorm, h: torch.Tensor) -> torch.Tensor:
        norms.append(1)
        return real_forward(self, h)

    monkeypatch.setattr(RMSNorm, "forward", counted)
    monkeypatch.setattr(kernels, "FORCE", True)
    got = run()
    assert not norms  # every norm went through the fused kernels
    for w, o in zip(want, got):
        torch.testing.assert_close(o, w, atol=1e-4, rtol=1e-4)
