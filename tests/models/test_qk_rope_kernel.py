"""The fused q/k norm + RoPE + KV-write kernel equals the backbone's torch form (prefill and decode)."""

from __future__ import annotations

import pytest
import torch

from v2.models import kernels
from v2.models.kernels import qk_rope as qk

pytestmark = pytest.mark.skipif(qk.triton is None, reason="needs triton")


def cached_passes(model, monkeypatch, dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
    """A chunked prefill of two rows at different offsets, then a decode step with a padded row, without
    and with the kernels: (outputs of the prefill, of the decode, the cache's K and V) for each."""
    h, g = model.cfg.hidden_size, torch.Generator().manual_seed(1)
    dev = model.device
    prompt = torch.randn(2, 12, h, generator=g).to(dev, dtype)
    step = torch.randn(3, 1, h, generator=g).to(dev, dtype)
    t = lambda *a: torch.tensor(*a, device=dev)  # noqa: E731
    runs, triton = [], kernels.triton
    for on in (False, True):  # off: as without Triton (on CUDA too); on: forced (the interpreter on a CPU)
        monkeypatch.setattr(kernels, "FORCE", on)
        monkeypatch.setattr(kernels, "triton", triton if on else None)
        cache = model.allocate_kv(3, 32)
        first = model.transformer.forward_cached(prompt[:, :5], cache, t([2, 0]), t([list(range(5))] * 2))
        rest = model.transformer.forward_cached(prompt[:, 5:], cache, t([2, 0]), t([list(range(5, 12))] * 2),
                                                t([[True] * 7, [True] * 4 + [False] * 3]), 12)
        last = model.transformer.forward_cached(step, cache, t([2, 0, cache.dummy_slot]), t([[12], [9], [0]]),
                                                t([[True], [True], [False]]), 13)
        runs.append((torch.cat([first, rest], 1), last[:2], cache.k[:, :3].clone(), cache.v[:, :3].clone()))
    return runs


@torch.no_grad()
def test_cached_passes_through_the_kernels_equal_the_torch_form(tiny_model, monkeypatch):
    """float32 only: Triton's interpreter rounds to bfloat16 differently from a GPU (tests/gpu has bf16)."""
    for want, got in zip(*cached_passes(tiny_model, monkeypatch, torch.float32)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)



@pytest.mark.gpu
@torch.no_grad()
def test_backbone_kernels_in_bf16_match_the_torch_form_on_cuda(tiny_card, monkeypatch):
    """Fused norms, q/k RoPE + cache writes and the decode kernel vs the torch form, in bf16 on a GPU."""
    from v2.card import build_model

    model = build_model(tiny_card, device="cuda", dtype=torch.bfloat16)
    runs = cached_passes(model, monkeypatch, torch.bfloat16)
    for want, got in zip(*runs):
        torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=0.02)
    assert (runs[0][2] == runs[1][2]).float().mean() > 0.99  # keys: one bf16 rounding apart, rarely


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import qk_rope as qk

sig = {"qkv_ptr": "*bf16", "stride_tok": "i64", "qw_ptr": "*bf16", "kw_ptr": "*bf16", "cos_ptr": "*fp32",
       "sin_ptr": "*fp32", "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "slot_ptr": "*i64", "pos_ptr": "*i64",
       "sk_s": "i64", "sk_h": "i64", "sk_l": "i64", "sv_s": "i64", "sv_h": "i64", "sv_l": "i64", "eps": "fp32",
       "NUM_Q": "constexpr", "NUM_KV": "constexpr", "HEAD_DIM": "constexpr"}
src = ASTSource(fn=qk._qk_rope_kernel, signature=sig, constexprs={"NUM_Q": 32, "NUM_KV": 8, "HEAD_DIM": 128})
built = compile(src, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False})  # as launched
print(len(built.asm["cubin"]), int("fma.rn.bf16" in built.asm["ptx"]))
"""


def test_kernel_compiles_for_hopper_without_a_gpu(hopper_compile):
    """Built as launched (no multiply-add fusion): x * cos and rotate_half(x) * sin are each rounded to
    bf16 before the add, as in torch, so the PTX has no bf16 fma."""
    cubin, fused = hopper_compile(COMPILE_FOR_HOPPER)
    assert cubin > 0 and fused == 0
