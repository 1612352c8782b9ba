"""The code predictor's kernels equal the torch forms: the attention of a frame's new positions (q/k norms, RoPE,
the K/V writes, causal attention, GQA), the gate/up projection with SwiGLU in one launch, and a code's row with
the frame's running sum and the input norm. Interpreter runs on the CPU, sm_90 compiles without a GPU, and bf16
runs on a GPU (`gpu`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from v2.models.kernels import frame_attention as fak
from v2.models.kernels import rms_norm as rnk
from v2.models.kernels import swiglu as swk
from v2.models.rope import Llama3Scaling, apply_rotate_half, rotate_half_cos_sin

pytestmark = pytest.mark.skipif(fak.triton is None, reason="needs triton")
P = 16  # a frame's positions (Qwen3-TTS: the talker's state, then 15 groups)


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The torch form of the backbone's RMSNorm (float32, rounded to x's dtype, times the weight)."""
    h = x.float()
    return w * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def torch_attention(qkv, hq, hkv, qw, kw, eps, cos, sin, k_cache, v_cache, position):
    """qk norms, rotate-half RoPE, the K/V writes at position .. position + T - 1, causal GQA attention."""
    b, t, width = qkv.shape
    d = width // (hq + 2 * hkv)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q, k = q.view(b, t, hq, d), k.view(b, t, hkv, d)  # [B, T, Hq, D], [B, T, Hkv, D]
    if qw is not None:
        q, k = rms(q, qw, eps), rms(k, kw, eps)
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, Hq, T, D], [B, Hkv, T, D]
    rows = slice(position, position + t)
    c, s = cos[rows][None].expand(b, t, d), sin[rows][None].expand(b, t, d)
    q, k = apply_rotate_half(q, c, s), apply_rotate_half(k, c, s)
    k_cache[:b, :, rows] = k
    v_cache[:b, :, rows] = v.view(b, t, hkv, d).transpose(1, 2)
    keys, values = k_cache[:b, :, : position + t], v_cache[:b, :, : position + t]
    mask = torch.arange(position + t)[None, :] <= (position + torch.arange(t))[:, None]  # [T, C]
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)  # [B, Hq, T, D]
    return out.transpose(1, 2).reshape(b, t, hq * d)


@pytest.mark.parametrize("hq,hkv,d", [(4, 2, 32), (2, 1, 16), (6, 3, 8), (4, 4, 64)])
def test_a_whole_frame_of_steps_equals_the_torch_form(hq, hkv, d):
    """Two positions first (the talker's state and group 0), then one position at a time to the frame's end."""
    b, eps = 3, 1e-6
    g = torch.Generator().manual_seed(d + hq)
    qw, kw = 1 + 0.1 * torch.randn(d, generator=g), 1 + 0.1 * torch.randn(d, generator=g)
    cos, sin = (z[0] for z in rotate_half_cos_sin(torch.arange(P)[None], d, 10000.0))
    caches = [torch.full((b + 1, hkv, P, d), float("nan")) for _ in range(4)]  # unwritten: NaN; one spare slot
    position = 0
    for t in [2] + [1] * (P - 2):
        qkv = torch.randn(b, t, (hq + 2 * hkv) * d, generator=g) * 2
        want = torch_attention(qkv, hq, hkv, qw, kw, eps, cos, sin, caches[0], caches[1], position)
        got = fak.frame_attention(qkv, hq, hkv, qw, kw, eps, cos, sin, caches[2], caches[3], position)
        assert got.shape == (b, t, hq * d)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        done = slice(0, position + t)
        torch.testing.assert_close(caches[2][:b, :, done], caches[0][:b, :, done], atol=1e-6, rtol=1e-6)
        assert torch.equal(caches[3][:b, :, done], caches[1][:b, :, done])
        assert caches[2][:, :, position + t:].isnan().all() and caches[2][b:].isnan().all()  # nothing else written
        position += t


@pytest.mark.parametrize("hq,hkv,d,positions", [(4, 2, 32, 32), (8, 2, 16, 17), (2, 2, 8, 5)])
def test_without_q_k_norms_a_frame_of_up_to_32_positions_equals_the_torch_form(hq, hkv, d, positions):
    """The neutral form (no q/k norm weights) with Llama-3 scaled RoPE tables, over frames longer than 16."""
    b, eps = 2, 1e-5
    g = torch.Generator().manual_seed(d + positions)
    scaling = Llama3Scaling(32.0, 1.0, 4.0, 8192)
    cos, sin = (z[0] for z in rotate_half_cos_sin(torch.arange(positions)[None], d, 500000.0, scaling))
    caches = [torch.full((b + 1, hkv, positions, d), float("nan")) for _ in range(4)]
    position = 0
    for t in [2] + [1] * (positions - 2):
        qkv = torch.randn(b, t, (hq + 2 * hkv) * d, generator=g) * 2
        want = torch_attention(qkv, hq, hkv, None, None, eps, cos, sin, caches[0], caches[1], position)
        got = fak.frame_attention(qkv, hq, hkv, None, None, eps, cos, sin, caches[2], caches[3], position)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        done = slice(0, position + t)
        assert torch.equal(caches[2][:b, :, done], caches[0][:b, :, done])  # no norm: RoPE alone, rounded alike
        assert torch.equal(caches[3][:b, :, done], caches[1][:b, :, done])
        assert caches[2][:, :, position + t:].isnan().all() and caches[2][b:].isnan().all()
        position += t
    with pytest.raises(ValueError, match="q_weight True, k_weight False"):  # one norm weight without the other
        fak.frame_attention(qkv, hq, hkv, torch.ones(d), None, eps, cos, sin, caches[2], caches[3], 0)


def test_positions_outside_the_frame_and_odd_head_dims_are_refused():
    cos = torch.ones(P, 8)
    cache = torch.zeros(1, 1, P, 8)
    with pytest.raises(ValueError, match="positions 15..16"):
        fak.frame_attention(torch.zeros(1, 2, 24), 1, 1, torch.ones(8), torch.ones(8), 1e-6, cos, cos, cache,
                            cache.clone(), 15)
    with pytest.raises(ValueError, match="power-of-two head_dim"):
        fak.frame_attention(torch.zeros(1, 1, 18), 1, 1, torch.ones(6), torch.ones(6), 1e-6, torch.ones(P, 6),
                            torch.ones(P, 6), torch.zeros(1, 1, P, 6), torch.zeros(1, 1, P, 6), 0)


@pytest.mark.parametrize("m,k,i", [(1, 32, 64), (5, 100, 70), (17, 64, 130), (70, 48, 16)])
def test_gate_up_swiglu_equals_the_projection_then_the_activation(m, k, i):
    g = torch.Generator().manual_seed(m + k + i)
    x, w = torch.randn(2, m, k, generator=g), torch.randn(2 * i, k, generator=g) / k ** 0.5
    gate, up = (x @ w.T).chunk(2, dim=-1)
    got = swk.gate_up_swiglu(x, w)
    assert got.shape == (2, m, i)
    torch.testing.assert_close(got, F.silu(gate) * up, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="weight must be"):
        swk.gate_up_swiglu(x, w[:, :-1])


def test_a_code_row_the_running_sum_and_the_norm_equal_the_torch_form():
    g = torch.Generator().manual_seed(2)
    b, v, h, eps = 4, 50, 72, 1e-6
    tables = [torch.randn(v, h, generator=g) for _ in range(3)]
    w, text = 1 + 0.1 * torch.randn(h, generator=g), torch.randn(b, h, generator=g)
    codes = [torch.randint(0, v, (b,), generator=g) for _ in range(3)]
    acc = torch.full((b, h), float("nan"))  # set by the first code
    e, y = rnk.embed_rms_norm_fused(codes[0], tables[0], acc, None, 0.0, first=True)
    assert y is None and torch.equal(e, tables[0][codes[0]]) and torch.equal(acc, e)
    e, y = rnk.embed_rms_norm_fused(codes[1], tables[1], acc, w, eps, first=False)
    assert y is not None and torch.equal(e, tables[1][codes[1]])
    torch.testing.assert_close(y, rms(e, w, eps), atol=1e-6, rtol=1e-6)
    summed = tables[0][codes[0]] + tables[1][codes[1]]
    assert torch.equal(acc, summed)
    row, none = rnk.embed_rms_norm_fused(codes[2], tables[2], acc, w, eps, first=False, add=text)
    assert none is None and torch.equal(row, (summed + tables[2][codes[2]]) + text)
    assert torch.equal(acc, summed)  # the last code leaves the sum alone


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import frame_attention as fak, rms_norm as rnk, swiglu as swk

target = GPUTarget("cuda", 90, 32)
sig = {"qkv_ptr": "*bf16", "stride_tok": "i64", "qw_ptr": "*bf16", "kw_ptr": "*bf16", "cos_ptr": "*fp32",
       "sin_ptr": "*fp32", "k_ptr": "*bf16", "v_ptr": "*bf16", "out_ptr": "*bf16", "position": "i32", "eps": "fp32",
       "scale": "fp32", **{s: "i64" for s in ("sk_s", "sk_h", "sk_p", "sv_s", "sv_h", "sv_p")},
       **{c: "constexpr" for c in ("T", "NUM_Q", "NUM_KV", "GROUP", "BLOCK_G", "HEAD_DIM", "BLOCK_P", "QK_NORM")}}
sig_attention = dict(sig)
for t in (2, 1):  # the release code predictor: 16 heads of 128 over 8 kv heads
    consts = {"T": t, "NUM_Q": 16, "NUM_KV": 8, "GROUP": 2, "BLOCK_G": 2, "HEAD_DIM": 128, "BLOCK_P": 16, "QK_NORM": True}
    built = compile(ASTSource(fn=fak._frame_attention_kernel, signature=sig, constexprs=consts), target=target,
                    options={"enable_fp_fusion": False})
    print(len(built.asm["cubin"]), int("fma.rn.bf16" in built.asm["ptx"]))
sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "m": "i32", "half": "i32", "stride_x": "i64",
       "stride_wn": "i64", "stride_wk": "i64", "K": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
       "BLOCK_K": "constexpr", "IEEE": "constexpr"}
for block_m in (16, 64):  # the release code predictor's width
    consts = {"K": 1024, "BLOCK_M": block_m, "BLOCK_N": swk.GEMM_N, "BLOCK_K": swk.GEMM_K, "IEEE": False}
    print(len(compile(ASTSource(fn=swk._gate_up_kernel, signature=sig, constexprs=consts), target=target).asm["cubin"]))
sig = {"code_ptr": "*i64", "table_ptr": "*bf16", "stride_t": "i64", "acc_ptr": "*bf16", "w_ptr": "*bf16",
       "add_ptr": "*bf16", "e_ptr": "*bf16", "y_ptr": "*bf16", "dim": "i32", "eps": "fp32", "FIRST": "constexpr",
       "NORM": "constexpr", "FINAL": "constexpr", "BLOCK_D": "constexpr"}
for first, norm, final in ((True, False, False), (False, True, False), (False, False, True)):
    consts = {"FIRST": first, "NORM": norm, "FINAL": final, "BLOCK_D": 2048}
    print(len(compile(ASTSource(fn=rnk._embed_rms_norm_kernel, signature=sig, constexprs=consts), target=target).asm["cubin"]))
sig = {**sig_attention}
for t in (2, 1):  # the release depth decoder without q/k norms: 8 heads of 128 over 2, a frame of 32 positions
    consts = {"T": t, "NUM_Q": 8, "NUM_KV": 2, "GROUP": 4, "BLOCK_G": 4, "HEAD_DIM": 128, "BLOCK_P": 32,
              "QK_NORM": False}
    built = compile(ASTSource(fn=fak._frame_attention_kernel, signature=sig, constexprs=consts), target=target,
                    options={"enable_fp_fusion": False})
    print(len(built.asm["cubin"]), int("fma.rn.bf16" in built.asm["ptx"]))
"""


def test_kernels_compile_for_hopper_without_a_gpu(hopper_compile):
    sizes = hopper_compile(COMPILE_FOR_HOPPER)
    attention = sizes[:4]
    assert attention[0] > 0 and attention[2] > 0 and attention[1] == attention[3] == 0  # RoPE rounded as torch
    assert len(sizes) == 13 and all(n > 0 for n in sizes[4:9])
    no_norm = sizes[9:]  # the form without q/k norms at a frame of 32
    assert no_norm[0] > 0 and no_norm[2] > 0 and no_norm[1] == no_norm[3] == 0


@pytest.mark.gpu
@torch.no_grad()
def test_frame_kernels_in_bf16_match_the_torch_forms_on_cuda():
    """The release code predictor's layout (16 heads of 128 over 8, width 1024, intermediate 3072), 64 rows."""
    dev, dt, b, hq, hkv, d = "cuda", torch.bfloat16, 64, 16, 8, 128
    g = torch.Generator(device=dev).manual_seed(0)
    qw, kw = (1 + 0.1 * torch.randn(d, generator=g, device=dev)).to(dt), torch.ones(d, dtype=dt, device=dev)
    cos, sin = (z[0] for z in rotate_half_cos_sin(torch.arange(P, device=dev)[None], d, 10000.0))
    caches = [torch.zeros(b, hkv, P, d, dtype=dt, device=dev) for _ in range(4)]
    position = 0
    for t in [2] + [1] * (P - 2):
        qkv = torch.randn(b, t, (hq + 2 * hkv) * d, generator=g, device=dev).to(dt)
        want = torch_attention(qkv, hq, hkv, qw, kw, 1e-6, cos, sin, caches[0], caches[1], position)
        got = fak.frame_attention(qkv, hq, hkv, qw, kw, 1e-6, cos, sin, caches[2], caches[3], position)
        torch.testing.assert_close(got.float(), want.float(), atol=0.03, rtol=0.02)
        assert torch.equal(caches[3], caches[1])
        position += t
    x = torch.randn(b, 1024, generator=g, device=dev).to(dt)
    w = (torch.randn(2 * 3072, 1024, generator=g, device=dev) / 32).to(dt)
    gate, up = (x @ w.T).chunk(2, dim=-1)
    torch.testing.assert_close(swk.gate_up_swiglu(x, w).float(), (F.silu(gate) * up).float(), atol=0.03, rtol=0.02)
