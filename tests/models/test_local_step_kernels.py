"""The local step's kernels equal the torch forms: the fused RoPE + K/V writes + attention of one position,
and the residual add + LayerNorm (head dims that are not powers of two included: the release's local heads
are 80 wide). Interpreter runs on the CPU, sm_90 compiles without a GPU, and bf16 runs on a GPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from v2.models.kernels import layer_norm as lnk
from v2.models.kernels import local_attention as lak
from v2.models.moss_tts_local.local_transformer import FRAME_POSITIONS
from v2.models.rope import apply_interleaved, interleaved_cos_sin

pytestmark = pytest.mark.skipif(lak.triton is None, reason="needs triton")


def torch_step(qkv, heads, cos, sin, k_cache, v_cache, position):
    """The torch form: rotate q and k, write k and v at `position`, attend over 0..position."""
    b, _, width = qkv.shape
    d = width // (3 * heads)
    q, k, v = (z.reshape(b, 1, heads, d).transpose(1, 2) for z in qkv.split(heads * d, dim=-1))
    row = slice(position, position + 1)
    q, k = apply_interleaved(q, cos[row], sin[row]), apply_interleaved(k, cos[row], sin[row])
    k_cache[:, :, row], v_cache[:, :, row] = k, v
    out = F.scaled_dot_product_attention(q, k_cache[:, :, : position + 1], v_cache[:, :, : position + 1],
                                         scale=1 / math.sqrt(d))  # [B, heads, 1, D]
    return out.transpose(1, 2).reshape(b, 1, heads * d)


def frame_inputs(b, heads, d, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    cos, sin = interleaved_cos_sin(torch.arange(FRAME_POSITIONS, device=device), d, 10000.0)
    qkvs = [torch.randn(b, 1, 3 * heads * d, generator=g, device=device).mul(2).to(dtype)
            for _ in range(FRAME_POSITIONS)]
    return qkvs, cos.to(dtype), sin.to(dtype)


@pytest.mark.parametrize("heads,d", [(3, 10), (2, 80), (4, 16)])
def test_a_whole_frame_of_steps_equals_the_torch_form(heads, d):
    b = 3
    qkvs, cos, sin = frame_inputs(b, heads, d, seed=d)
    caches = [torch.full((b, heads, FRAME_POSITIONS, d), float("nan")) for _ in range(4)]  # unwritten: NaN
    for position, qkv in enumerate(qkvs):
        want = torch_step(qkv, heads, cos, sin, caches[0], caches[1], position)
        got = lak.local_attention_step(qkv, heads, cos[position], sin[position], caches[2], caches[3], position)
        assert got.shape == (b, 1, heads * d)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(caches[2][:, :, : position + 1], caches[0][:, :, : position + 1], atol=1e-6, rtol=1e-6)
        assert torch.equal(caches[3][:, :, : position + 1], caches[1][:, :, : position + 1])
        assert caches[2][:, :, position + 1 :].isnan().all()  # nothing past `position` is written or read


def test_a_position_outside_the_frame_is_refused():
    qkv = torch.zeros(1, 1, 3 * 2 * 8)
    cache = torch.zeros(1, 2, FRAME_POSITIONS, 8)
    with pytest.raises(ValueError, match="position"):
        lak.local_attention_step(qkv, 2, torch.ones(8), torch.zeros(8), cache, cache.clone(), FRAME_POSITIONS)


@pytest.mark.parametrize("shape", [(3, 1, 64), (5, 2560), (2, 1, 100)])
def test_add_layer_norm_equals_the_torch_form(shape):
    g = torch.Generator().manual_seed(shape[-1])
    x, delta = torch.randn(*shape, generator=g) * 3, torch.randn(*shape, generator=g)
    w, bias = torch.randn(shape[-1], generator=g), torch.randn(shape[-1], generator=g)
    total, y = lnk.add_layer_norm_fused(x, delta, w, bias, 1e-5)
    assert torch.equal(total, x + delta)
    torch.testing.assert_close(y, F.layer_norm(x + delta, (shape[-1],), w, bias, 1e-5), atol=1e-5, rtol=1e-5)


def test_add_layer_norm_refuses_mismatched_inputs():
    with pytest.raises(ValueError, match="delta"):
        lnk.add_layer_norm_fused(torch.zeros(2, 8), torch.zeros(2, 9), torch.ones(8), torch.zeros(8), 1e-5)


def test_embedding_norm_and_running_sum_equal_the_torch_form():
    g = torch.Generator().manual_seed(1)
    b, v, h = 4, 50, 72
    tables = [torch.randn(v, h, generator=g) for _ in range(3)]
    w, bias, slot_row = torch.randn(h, generator=g), torch.randn(h, generator=g), torch.randn(h, generator=g)
    codes = [torch.randint(0, v, (b,), generator=g) for _ in range(3)]
    acc = torch.full((b, h), float("nan"))  # set by the first code
    for c in range(2):
        e, y = lnk.embed_layer_norm_fused(codes[c], tables[c], acc, w, bias, 1e-5, first=c == 0)
        assert torch.equal(e, tables[c][codes[c]])
        torch.testing.assert_close(y, F.layer_norm(e, (h,), w, bias, 1e-5), atol=1e-5, rtol=1e-5)
    assert torch.equal(acc, tables[0][codes[0]] + tables[1][codes[1]])
    row, same = lnk.embed_layer_norm_fused(codes[2], tables[2], acc, None, None, 0.0, first=False, last_row=slot_row)
    assert row is same and torch.equal(row, slot_row + (tables[0][codes[0]] + tables[1][codes[1]] + tables[2][codes[2]]))


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import layer_norm as lnk, local_attention as lak

target = GPUTarget("cuda", 90, 32)
sig = {"qkv_ptr": "*bf16", "stride_row": "i64", "cos_ptr": "*bf16", "sin_ptr": "*bf16", "k_ptr": "*bf16",
       "v_ptr": "*bf16", "out_ptr": "*bf16", "position": "i32", "scale": "fp32",
       **{s: "i64" for s in ("sk_b", "sk_h", "sk_p", "sv_b", "sv_h", "sv_p")}, "HEADS": "constexpr",
       "HEAD_DIM": "constexpr", "BLOCK_D": "constexpr", "BLOCK_P": "constexpr"}
src = ASTSource(fn=lak._local_attention_kernel, signature=sig,
                constexprs={"HEADS": 32, "HEAD_DIM": 80, "BLOCK_D": 128, "BLOCK_P": 16})
built = compile(src, target=target, options={"enable_fp_fusion": False})  # as launched
print(len(built.asm["cubin"]), int("fma.rn.bf16" in built.asm["ptx"]))
sig = {"x_ptr": "*bf16", "delta_ptr": "*bf16", "w_ptr": "*bf16", "b_ptr": "*bf16", "total_ptr": "*bf16",
       "out_ptr": "*bf16", "dim": "i32", "eps": "fp32", "BLOCK_D": "constexpr"}
src = ASTSource(fn=lnk._add_layer_norm_kernel, signature=sig, constexprs={"BLOCK_D": 4096})
print(len(compile(src, target=target).asm["cubin"]))
sig = {"code_ptr": "*i64", "table_ptr": "*bf16", "stride_t": "i64", "acc_ptr": "*bf16", "w_ptr": "*bf16",
       "b_ptr": "*bf16", "last_ptr": "*bf16", "e_ptr": "*bf16", "y_ptr": "*bf16", "dim": "i32", "eps": "fp32",
       "FIRST": "constexpr", "FINAL": "constexpr", "BLOCK_D": "constexpr"}
for first, final in ((True, False), (False, False), (False, True)):
    src = ASTSource(fn=lnk._embed_layer_norm_kernel, signature=sig,
                    constexprs={"FIRST": first, "FINAL": final, "BLOCK_D": 4096})
    print(len(compile(src, target=target).asm["cubin"]))
"""


def test_kernels_compile_for_hopper_without_a_gpu(hopper_compile):
    attention, fused, norm, *embed = hopper_compile(COMPILE_FOR_HOPPER)
    assert attention > 0 and fused == 0 and norm > 0  # RoPE products rounded to bf16 before the add, as in torch
    assert len(embed) == 3 and all(n > 0 for n in embed)


@pytest.mark.gpu
@torch.no_grad()
def test_local_step_kernels_in_bf16_match_the_torch_form_on_cuda():
    """The release's local head layout (32 heads of 80), 64 rows, a whole frame of steps, bf16."""
    b, heads, d = 64, 32, 80
    qkvs, cos, sin = frame_inputs(b, heads, d, torch.bfloat16, "cuda")
    caches = [torch.zeros(b, heads, FRAME_POSITIONS, d, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    for position, qkv in enumerate(qkvs):
        want = torch_step(qkv, heads, cos, sin, caches[0], caches[1], position)
        got = lak.local_attention_step(qkv, heads, cos[position], sin[position], caches[2], caches[3], position)
        torch.testing.assert_close(got.float(), want.float(), atol=0.03, rtol=0.02)
        assert torch.equal(caches[3], caches[1])
    x = torch.randn(b, 1, heads * d, device="cuda", dtype=torch.bfloat16)
    delta = torch.randn_like(x)
    w, bias = torch.randn(heads * d, device="cuda", dtype=torch.bfloat16), torch.randn(heads * d, device="cuda", dtype=torch.bfloat16)
    total, y = lnk.add_layer_norm_fused(x, delta, w, bias, 1e-5)
    assert torch.equal(total, x + delta)
    torch.testing.assert_close(y.float(), F.layer_norm(x + delta, (heads * d,), w, bias, 1e-5).float(), atol=0.05, rtol=0.02)
    table = torch.randn(1024, heads * d, device="cuda", dtype=torch.bfloat16)
    codes = torch.randint(0, 1024, (b,), device="cuda")
    acc = torch.zeros(b, heads * d, device="cuda", dtype=torch.bfloat16)
    e, y = lnk.embed_layer_norm_fused(codes, table, acc, w, bias, 1e-5, first=True)
    assert torch.equal(e, table[codes]) and torch.equal(acc, table[codes])
    torch.testing.assert_close(y.float(), F.layer_norm(e, (heads * d,), w, bias, 1e-5).float(), atol=0.05, rtol=0.02)
