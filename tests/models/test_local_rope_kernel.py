"""The local step's fused RoPE + K/V-write kernel equals the torch form, head dims that are not powers of two
included (the release's local heads are 80 wide)."""

from __future__ import annotations

import pytest
import torch

from v2.models.kernels import local_rope as lk
from v2.models.local_transformer import FRAME_POSITIONS
from v2.models.rope import apply_interleaved, interleaved_cos_sin

pytestmark = pytest.mark.skipif(lk.triton is None, reason="needs triton")


@pytest.mark.parametrize("heads,d,position", [(3, 10, 0), (2, 80, 7), (4, 16, 12)])
def test_fused_step_input_equals_the_torch_form(heads, d, position):
    g = torch.Generator().manual_seed(d)
    b = 3
    qkv = torch.randn(b, 1, 3 * heads * d, generator=g) * 2
    cos, sin = interleaved_cos_sin(torch.arange(FRAME_POSITIONS), d, 10000.0)  # [13, D]
    k_cache, v_cache = torch.zeros(b, heads, FRAME_POSITIONS, d), torch.zeros(b, heads, FRAME_POSITIONS, d)
    q = lk.local_rope_write(qkv, heads, cos[position], sin[position], k_cache, v_cache, position)
    q_ref, k_ref, v_ref = (z.reshape(b, 1, heads, d).transpose(1, 2) for z in qkv.split(heads * d, dim=-1))
    row = slice(position, position + 1)
    torch.testing.assert_close(q, apply_interleaved(q_ref, cos[row], sin[row]), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(k_cache[:, :, row], apply_interleaved(k_ref, cos[row], sin[row]), atol=1e-6, rtol=1e-6)
    assert torch.equal(v_cache[:, :, row], v_ref)
    others = [p for p in range(FRAME_POSITIONS) if p != position]
    assert not k_cache[:, :, others].any() and not v_cache[:, :, others].any()  # only `position` is written


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import local_rope as lk

sig = {"qkv_ptr": "*bf16", "stride_row": "i64", "cos_ptr": "*bf16", "sin_ptr": "*bf16", "q_ptr": "*bf16",
       "k_ptr": "*bf16", "v_ptr": "*bf16", "position": "i32", **{s: "i64" for s in ("sk_b", "sk_h", "sk_p", "sv_b",
       "sv_h", "sv_p")}, "HEADS": "constexpr", "HEAD_DIM": "constexpr", "BLOCK_D": "constexpr"}
src = ASTSource(fn=lk._local_rope_kernel, signature=sig, constexprs={"HEADS": 32, "HEAD_DIM": 80, "BLOCK_D": 128})
built = compile(src, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False})  # as launched
print(len(built.asm["cubin"]), int("fma.rn.bf16" in built.asm["ptx"]))
"""


def test_kernel_compiles_for_hopper_without_a_gpu(hopper_compile):
    cubin, fused = hopper_compile(COMPILE_FOR_HOPPER)
    assert cubin > 0 and fused == 0  # each product rounded to bf16 before the add, as in torch
