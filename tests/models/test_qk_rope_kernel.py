"""The fused q/k norm + RoPE + KV-write kernel equals the backbone's torch form (prefill and decode); without q/k
norms (a Llama stack, Llama-3 scaled tables) it equals the torch rotation and cache writes."""

from __future__ import annotations

import pytest
import torch

from v2.models import kernels
from v2.models.kernels import qk_rope as qk
from v2.models.rope import Llama3Scaling, apply_rotate_half, rotate_half_cos_sin

pytestmark = pytest.mark.skipif(qk.triton is None, reason="needs triton")


def cached_passes(model, monkeypatch, dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
    """A chunked prefill of two rows at different offsets, then a decode step with a padded row, without
    and with the kernels: (outputs of the prefill, of the decode, the cache's K and V) for each."""
    h, g = model.cfg.hidden_size, torch.Generator().manual_seed(1)
    dev = model.device
    prompt = torch.randn(2, 12, h, generator=g).to(dev, dtype)
    step = torch.randn(3, 1, h, generator=g).to(dev, dtype)
    t = lambda data: torch.tensor(data, device=dev)  # noqa: E731
    runs: list[tuple[torch.Tensor, ...]] = []
    triton = kernels.triton
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


LLAMA3 = Llama3Scaling(8.0, 1.0, 4.0, 64)


def no_norm_runs(dtype: torch.dtype, device: str) -> list[tuple[torch.Tensor, ...]]:
    """Two rows of three tokens (5 query heads over 1 kv head, head_dim 16) at mixed positions into a slot cache,
    one row's last token sent to the dummy slot: (q, the cache's K, V) by the torch form and by the kernel."""
    hq, hkv, d, b, t = 5, 1, 16, 2, 3
    g = torch.Generator().manual_seed(7)
    qkv = torch.randn(b, t, (hq + 2 * hkv) * d, generator=g).to(device, dtype)
    positions = torch.tensor([[4, 5, 6], [40, 41, 42]], device=device)
    slots = torch.tensor([[1, 1, 1], [0, 0, 3]], device=device)  # slot 3: the dummy
    cos, sin = rotate_half_cos_sin(positions, d, 10000.0, LLAMA3)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], -1)
    want_q = apply_rotate_half(q.view(b, t, hq, d).transpose(1, 2), cos, sin).transpose(1, 2)  # [B, T, Hq, D]
    k = apply_rotate_half(k.view(b, t, hkv, d).transpose(1, 2), cos, sin).transpose(1, 2)  # [B, T, Hkv, D]
    runs: list[tuple[torch.Tensor, ...]] = []
    for fused in (False, True):
        kc = torch.zeros(4, hkv, 48, d, dtype=dtype, device=device)
        vc = torch.zeros_like(kc)
        if fused:
            got_q = qk.qk_norm_rope_write(qkv, hq, hkv, None, None, 0.0, cos, sin, kc, vc, slots, positions)
        else:
            got_q = want_q
            kc[slots, :, positions] = k
            vc[slots, :, positions] = v.reshape(b, t, hkv, d)
        runs.append((got_q, kc[:3], vc[:3]))
    return runs


@torch.no_grad()
def test_without_norms_the_kernel_rotates_and_writes_as_the_torch_form(monkeypatch):
    monkeypatch.setattr(kernels, "FORCE", True)
    for want, got in zip(*no_norm_runs(torch.float32, "cpu")):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_norm_weights_come_both_or_neither():
    x = torch.zeros(1, 1, 3 * 16)
    with pytest.raises(ValueError, match="both"):
        qk.qk_norm_rope_write(x, 1, 1, torch.ones(16), None, 1e-6, x[..., :16], x[..., :16], torch.zeros(2, 1, 4, 16),
                              torch.zeros(2, 1, 4, 16), torch.zeros(1, 1, dtype=torch.long),
                              torch.zeros(1, 1, dtype=torch.long))


@pytest.mark.gpu
@torch.no_grad()
def test_without_norms_the_kernel_in_bf16_equals_the_torch_form_on_cuda():
    """No q/k norms, Llama-3 tables: the products and the sum rounded as torch rounds them, so bit-equal."""
    for want, got in zip(*no_norm_runs(torch.bfloat16, "cuda")):
        assert torch.equal(got, want)


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
from v2.models.rope import Llama3Scaling, apply_rotate_half, rotate_half_cos_sin

sig = {"qkv_ptr": "*bf16", "stride_tok": "i64", "qw_ptr": "*bf16", "kw_ptr": "*bf16", "cos_ptr": "*fp32",
       "sin_ptr": "*fp32", "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "slot_ptr": "*i64", "pos_ptr": "*i64",
       "sk_s": "i64", "sk_h": "i64", "sk_l": "i64", "sv_s": "i64", "sv_h": "i64", "sv_l": "i64", "eps": "fp32",
       "NUM_Q": "constexpr", "NUM_KV": "constexpr", "HEAD_DIM": "constexpr", "NORM": "constexpr"}
for norm, (hq, hkv, d) in ((True, (32, 8, 128)), (False, (32, 8, 64))):  # Qwen3's; CSM-1B backbone's (no norms)
    src = ASTSource(fn=qk._qk_rope_kernel, signature=sig,
                    constexprs={"NUM_Q": hq, "NUM_KV": hkv, "HEAD_DIM": d, "NORM": norm})
    built = compile(src, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False})  # as launched
    print(len(built.asm["cubin"]), int("fma.rn.bf16" in built.asm["ptx"]))
"""


def test_kernel_compiles_for_hopper_without_a_gpu(hopper_compile):
    """Built as launched (no multiply-add fusion), with and without q/k norms: x * cos and rotate_half(x) * sin
    are each rounded to bf16 before the add, as in torch, so the PTX has no bf16 fma."""
    sizes = hopper_compile(COMPILE_FOR_HOPPER)
    assert len(sizes) == 4
    for cubin, fused in zip(sizes[::2], sizes[1::2]):
        assert cubin > 0 and fused == 0
