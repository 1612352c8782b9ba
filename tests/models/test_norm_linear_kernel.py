"""The residual add + RMSNorm + matmul kernel (`kernels.norm_linear`) equals its torch form: the add, the norm (as
`RMSNorm` computes it) and the linear (or the fused gate/up projection with SwiGLU), for plain rows, rows read from a
table by index, and a transposed weight view (a per-codebook head); float32 in Triton's interpreter, bf16 on a GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from v2.models import kernels
from v2.models.kernels import norm_linear as nlk

pytestmark = pytest.mark.skipif(nlk.triton is None, reason="needs triton")


def torch_form(s: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float,
               swiglu: bool) -> torch.Tensor:
    h = s.float()
    h = norm_weight * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(s.dtype)
    out = h @ weight.T
    if not swiglu:
        return out
    gate, up = out.chunk(2, dim=-1)
    return F.silu(gate) * up


def cases(dtype: torch.dtype, device: str, m: int, k: int, n: int) -> list[tuple]:
    """(want s, got s, want out, got out) for: x + delta then a linear; table rows by index then SwiGLU; x alone
    through a transposed [K, N] weight without keeping s (its s: None)."""
    g = torch.Generator(device=device).manual_seed(3)
    r = lambda *shape, scale=1.0: (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)  # noqa: E731
    x, delta, nw = r(m, k, scale=2.0), r(m, k), 1 + r(k, scale=0.1)
    w, gu, head = r(n, k, scale=k ** -0.5), r(2 * n, k, scale=k ** -0.5), r(k, n, scale=k ** -0.5)
    table, idx = r(3 * m + 5, k), torch.randint(0, 3 * m + 5, (m,), generator=g, device=device)
    s = x + delta
    got_s, got = nlk.norm_linear(x, w, nw, 1e-5, delta=delta)
    out: list[tuple] = [(s, got_s, torch_form(s, w, nw, 1e-5, False), got)]
    got_s, got = nlk.norm_linear(table, gu, nw, 1e-5, rows=idx, swiglu=True)
    out.append((table[idx], got_s, torch_form(table[idx], gu, nw, 1e-5, True), got))
    none, got = nlk.norm_linear(x, head.t(), nw, 1e-5, keep_sum=False)
    assert none is None
    out.append((None, None, torch_form(x, head.t(), nw, 1e-5, False), got))
    return out


@pytest.mark.parametrize("m, k, n", [(3, 40, 37), (70, 96, 130)])  # tails in every dim; two row blocks
@torch.no_grad()
def test_norm_linear_equals_the_torch_form(monkeypatch, m, k, n):
    monkeypatch.setattr(kernels, "FORCE", True)
    for want_s, got_s, want, got in cases(torch.float32, "cpu", m, k, n):
        assert want_s is None or torch.equal(got_s, want_s)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_bad_shapes_are_refused():
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError, match="norm_linear"):
        nlk.norm_linear(x, torch.zeros(4, 6), torch.ones(8), 1e-5)
    with pytest.raises(ValueError, match="delta"):
        nlk.norm_linear(x, torch.zeros(4, 8), torch.ones(8), 1e-5, delta=torch.zeros(3, 8))


@pytest.mark.gpu
@torch.no_grad()
def test_norm_linear_in_bf16_matches_the_torch_form_on_cuda():
    """The release CSM depth decoder's widths: 64 rows, K 1024, the fused q/k/v (1536) and gate/up (2 x 8192)."""
    for want_s, got_s, want, got in cases(torch.bfloat16, "cuda", 64, 1024, 1536) + cases(torch.bfloat16, "cuda", 1,
                                                                                          1024, 8192):
        assert want_s is None or torch.equal(got_s, want_s)
        torch.testing.assert_close(got.float(), want.float(), atol=0.03, rtol=0.02)


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import norm_linear as nlk

sig = {"x_ptr": "*bf16", "idx_ptr": "*i64", "stride_x": "i64", "d_ptr": "*bf16", "stride_d": "i64", "nw_ptr": "*bf16",
       "w_ptr": "*bf16", "stride_wn": "i64", "stride_wk": "i64", "s_ptr": "*bf16", "out_ptr": "*bf16", "m": "i32",
       "n": "i32", "eps": "fp32", "K": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
       "BLOCK_K": "constexpr", "GATHER": "constexpr", "DELTA": "constexpr", "KEEP_SUM": "constexpr",
       "SWIGLU": "constexpr", "IEEE": "constexpr"}
# the release CSM depth decoder's calls (K 1024): the first q/k/v from table rows, the q/k/v and the gate/up after an
# add, the head without keeping the sum; and the backbone's (K 2048)
for k, block_m, gather, delta, keep, swiglu in ((1024, 16, True, False, True, False), (1024, 64, False, True, True, False),
                                                 (1024, 16, False, True, True, True), (1024, 16, False, True, False, False),
                                                 (2048, 64, False, True, True, True)):
    consts = {"K": k, "BLOCK_M": block_m, "BLOCK_N": nlk.BLOCK_N, "BLOCK_K": nlk.BLOCK_K, "GATHER": gather,
              "DELTA": delta, "KEEP_SUM": keep, "SWIGLU": swiglu, "IEEE": False}
    src = ASTSource(fn=nlk._norm_linear_kernel, signature=sig, constexprs=consts)
    print(len(compile(src, target=GPUTarget("cuda", 90, 32)).asm["cubin"]))
"""


def test_kernel_compiles_for_hopper_without_a_gpu(hopper_compile):
    sizes = hopper_compile(COMPILE_FOR_HOPPER)
    assert len(sizes) == 5 and all(n > 0 for n in sizes)
