"""The fused RMSNorm kernel equals the backbone's torch RMSNorm, on contiguous rows and on head views."""

from __future__ import annotations

import pytest
import torch

from v2.models import kernels
from v2.models import rms_norm_kernel as rk
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


def test_autograd_keeps_the_torch_norm(monkeypatch):
    monkeypatch.setattr(kernels, "FORCE", True)
    norm = RMSNorm(16, 1e-6)
    x = torch.randn(4, 16, requires_grad=True)
    norm(x).sum().backward()  # the kernel has no backward: training recomputes take the torch form
    assert x.grad is not None and norm.weight.grad is not None


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models import rms_norm_kernel as rk

sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "stride_r": "i64", "stride_m": "i64", "dim": "i32",
       "eps": "fp32", "BLOCK_D": "constexpr"}
for block in (128, 4096):  # q/k heads and the hidden size
    print(len(compile(ASTSource(fn=rk._rms_norm_kernel, signature=sig, constexprs={"BLOCK_D": block}),
                      target=GPUTarget("cuda", 90, 32)).asm["cubin"]))
"""


def test_kernel_compiles_for_hopper_without_a_gpu(hopper_compile):
    assert [n > 0 for n in hopper_compile(COMPILE_FOR_HOPPER)] == [True, True]
