"""The fused RMSNorm (alone and after the residual add) and SwiGLU kernels equal the backbone's torch forms."""

from __future__ import annotations

import pytest
import torch

from v2.models import kernels
from v2.models.kernels import rms_norm as rk
from v2.models.qwen3 import RMSNorm

pytestmark = pytest.mark.skipif(rk.triton is None, reason="needs triton")


@pytest.mark.parametrize("shape,split", [((3, 5, 48), None), ((7, 24), None), ((2, 3, 40), 16)])
def test_fused_norm_equals_the_torch_norm(shape, split, monkeypatch):
    g = torch.Generator().manual_seed(sum(shape))
    norm = RMSNorm(split or shape[-1], 1e-6)
    norm.weight.data = torch.randn(norm.weight.shape, generator=g)
    x = torch.randn(shape, generator=g) * 3
    if split:  # the backbone's q/k norms: [B, T, heads, D] views of a wider projection
        x = x[..., : 2 * split].view(*shape[:-1], 2, split)
    with torch.no_grad():
        want = norm(x)
        monkeypatch.setattr(kernels, "FORCE", True)
        got = norm(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_fused_residual_add_and_norm_equal_the_torch_form():
    g = torch.Generator().manual_seed(4)
    norm = RMSNorm(40, 1e-6)
    norm.weight.data = torch.randn(40, generator=g)
    x, delta = torch.randn(3, 2, 40, generator=g), torch.randn(3, 2, 40, generator=g) * 5
    with torch.no_grad():
        total, normed = rk.add_rms_norm_fused(x, delta, norm.weight, norm.eps)
        want = x + delta
        assert torch.equal(total, want)
        torch.testing.assert_close(normed, norm(want), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="must match"):
        rk.add_rms_norm_fused(x, delta[:, :1], norm.weight, norm.eps)


def test_fused_swiglu_equals_the_torch_form():
    from v2.models.kernels.swiglu import silu_mul_fused

    gate_up = torch.randn(5, 1, 2 * 1500, generator=torch.Generator().manual_seed(5)) * 4  # two column blocks
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(silu_mul_fused(gate_up), torch.nn.functional.silu(gate) * up, atol=1e-6, rtol=1e-6)


def test_autograd_keeps_the_torch_norm(monkeypatch):
    monkeypatch.setattr(kernels, "FORCE", True)
    norm = RMSNorm(16, 1e-6)
    x = torch.randn(4, 16, requires_grad=True)
    norm(x).sum().backward()  # the kernel has no backward: training recomputes take the torch form
    assert x.grad is not None and norm.weight.grad is not None


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import rms_norm as rk

from v2.models.kernels import swiglu as sw

hopper = GPUTarget("cuda", 90, 32)
sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "stride_r": "i64", "stride_m": "i64", "dim": "i32",
       "eps": "fp32", "delta_ptr": "*bf16", "total_ptr": "*bf16", "HAS_DELTA": "constexpr", "BLOCK_D": "constexpr"}
for delta, block in ((False, 128), (True, 4096)):  # q/k heads; the residual add + norm at the hidden size
    src = ASTSource(fn=rk._rms_norm_kernel, signature=sig, constexprs={"HAS_DELTA": delta, "BLOCK_D": block})
    print(len(compile(src, target=hopper).asm["cubin"]))
src = ASTSource(fn=sw._silu_mul_kernel, signature={"x_ptr": "*bf16", "out_ptr": "*bf16", "half": "i32",
                                                   "BLOCK": "constexpr"}, constexprs={"BLOCK": sw.BLOCK})
print(len(compile(src, target=hopper).asm["cubin"]))
"""


def test_kernel_compiles_for_hopper_without_a_gpu(hopper_compile):
    assert [n > 0 for n in hopper_compile(COMPILE_FOR_HOPPER)] == [True, True, True]
