"""The local (depth) transformer: GPT-J-style pre-LN blocks over one frame's 13 positions.

Owns: the block arithmetic (LayerNorm with bias, fused c_attn, interleaved RoPE, biased MLP), a full
causal pass for teacher forcing, a batched `step(x, position, kv)` over a per-frame `LocalKV`, and the same
steps' CPU form (`frame_stack(batch)`: the blocks on `frame_stack_ln.LnFrameStack`, float32 without autograd,
`frame_stack_fits`).
Must not know: codebooks, heads, sampling, the backbone, requests.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import exact
from v2.models.frame_stack_ln import LnBlock, LnFrameStack, Norm, aligned

from v2.models.moss_tts_local.config import LocalConfig
from v2.models.kernels import inference_kernels
from v2.models.kernels.layer_norm import add_layer_norm_fused
from v2.models.kernels.local_attention import local_attention_step
from v2.models.module_list import module_list_of
from v2.models.persist import ParamVersions, persistent
from v2.models.rope import (apply_interleaved, interleaved_cos_sin, interleaved_order, rotate_half_rows,
                             rotate_half_table)

FRAME_POSITIONS = 13  # backbone state + 12 codebook inputs (the last is never needed for logits)


def _relu_into(x: Tensor, out: Tensor) -> None:
    out.copy_(F.relu(x))


# the activations written into a given tensor (the same values), for the CPU frame pass; relu: F.relu copied
_ACT_INTO: dict[str, Callable[[Tensor, Tensor], None]] = {
    "silu": exact.silu_into,
    "relu": _relu_into,
    "gelu": exact.gelu_into,
    "gelu_new": exact.gelu_tanh_into,
    "gelu_pytorch_tanh": exact.gelu_tanh_into,
}

# the activations the CPU frame pass runs on negated MLP weights (fc_in's weight and bias, fc_out's weight): given
# -x, -act(x) (the same bits with an operation fewer; exact.silu_of_negated_into says why)
_ACT_OF_NEGATED_INTO: dict[str, Callable[[Tensor, Tensor], None]] = {"silu": exact.silu_of_negated_into}

_ACT: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": exact.silu,
    "relu": F.relu,
    "gelu": exact.gelu,
    "gelu_new": exact.gelu_tanh,
    "gelu_pytorch_tanh": exact.gelu_tanh,
}


@dataclass
class LocalKV:
    """Per-frame state of a batch's steps: keys/values k, v [layers, B, heads, 13, head_dim] and the RoPE
    tables cos, sin [13, head_dim] of the frame's positions (made once, so a step only slices them)."""

    k: Tensor
    v: Tensor
    cos: Tensor
    sin: Tensor

    @classmethod
    def allocate(cls, cfg: LocalConfig, batch: int, *, dtype: torch.dtype, device: torch.device | str) -> "LocalKV":
        """Empty K/V (a step writes its position before it reads 0 .. position) and the shared RoPE tables."""
        shape = (cfg.num_layers, batch, cfg.num_heads, FRAME_POSITIONS, cfg.head_dim)
        cos, sin = _frame_rope(cfg.head_dim, cfg.rope_base, torch.device(device), dtype)
        return cls(torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device),
                   cos, sin)


@functools.lru_cache(maxsize=16)
@persistent
def _frame_rope(head_dim: int, base: float, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos, sin [13, head_dim] (`interleaved_cos_sin` of a frame's positions), made once per device and dtype
    (read-only): the shared rotate-half rows' columns in the interleaved order (`rope.interleaved_order`)."""
    order = interleaved_order(head_dim, device)
    cos, sin = (torch.index_select(t, 1, order).to(dtype)
                for t in rotate_half_rows(FRAME_POSITIONS, head_dim, base, None, device))  # [13, D] each
    return cos, sin


@functools.lru_cache(maxsize=16)
@persistent
def _frame_rope_signed(head_dim: int, base: float, device: torch.device) -> tuple[Tensor, Tensor]:
    """`_frame_rope`'s float32 cos and its sin with the even columns negated (the interleaved swap's sign), [13, D]:
    the shared signed rotate-half table's columns in the interleaved order (its negated first half lands there)."""
    table = rotate_half_table(FRAME_POSITIONS, head_dim, base, None, device)  # [13, 2, D]
    rows = torch.index_select(table, 2, interleaved_order(head_dim, device))  # [13, 2, D]: cos, signed sin
    return rows[:, 0], rows[:, 1]


def frame_stack_fits(x: Tensor) -> bool:
    """Whether the CPU frame pass serves rows like x: on the CPU, float32, autograd off."""
    return exact.on(x) and x.dtype == torch.float32 and not torch.is_grad_enabled()


def _norm(ln: nn.LayerNorm) -> Norm:
    assert ln.weight is not None and ln.bias is not None  # the blocks' norms are affine
    return Norm(ln.weight, ln.bias, ln.eps)


class LocalAttention(nn.Module):
    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.c_attn = exact.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.c_proj = exact.Linear(cfg.hidden_size, cfg.hidden_size)

    def _qkv(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, t, h = x.shape
        heads, d = self.cfg.num_heads, self.cfg.head_dim
        qkv = self.c_attn(x)
        qk = qkv[..., : 2 * h].reshape(b, t, 2 * heads, d).transpose(1, 2)  # [B, 2 heads, T, D]: q's heads, k's
        q, k = apply_interleaved(qk, cos, sin).split(heads, dim=1)  # one rotation for both
        return q, k, qkv[..., 2 * h :].reshape(b, t, heads, d).transpose(1, 2)  # v [B, heads, T, D]

    def _out(self, attn: Tensor) -> Tensor:
        b, _, t, _ = attn.shape
        return self.c_proj(attn.transpose(1, 2).reshape(b, t, self.cfg.hidden_size))  # [B, T, H]

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        q, k, v = self._qkv(x, cos, sin)
        scale = 1.0 / math.sqrt(self.cfg.head_dim)
        return self._out(exact.attention(q, k, v, causal=True, scale=scale))

    def step(self, x: Tensor, cos: Tensor, sin: Tensor, position: int, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        """x [B, 1, H] at `position`; k_cache/v_cache [B, heads, 13, D] are written at `position`."""
        if inference_kernels(x.device):  # RoPE, the K/V writes and the attention in one kernel
            heads = local_attention_step(self.c_attn(x), self.cfg.num_heads, cos[0], sin[0], k_cache, v_cache,
                                         position)  # [B, 1, H]
            return self.c_proj(heads)
        q, k, v = self._qkv(x, cos, sin)
        k_cache[:, :, position : position + 1] = k.to(k_cache.dtype)
        v_cache[:, :, position : position + 1] = v.to(v_cache.dtype)
        keys, values = k_cache[:, :, : position + 1].to(q.dtype), v_cache[:, :, : position + 1].to(q.dtype)
        scale = 1.0 / math.sqrt(self.cfg.head_dim)
        return self._out(exact.attention(q, keys, values, scale=scale))


class LocalMLP(nn.Module):
    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__()
        self.fc_in = exact.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc_out = exact.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.act = _ACT[cfg.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(self.act(self.fc_in(x)))


class LocalBlock(nn.Module):
    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attn = LocalAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = LocalMLP(cfg)


class LocalTransformer(nn.Module):
    """Blocks `h.{j}` and final LayerNorm `ln_f` (release prefix `local_transformer.`)."""

    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.h = module_list_of(LocalBlock(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self._stacks: dict[tuple[int, int], LnFrameStack] = {}  # (thread, batch) -> the frame pass
        self._versions = ParamVersions()  # whether the parameters the kept passes were made from changed
        self._blocks: list[LnBlock] | None = None  # the passes' blocks (negated MLP weights), shared by every pass

    def forward(self, x: Tensor) -> Tensor:
        """One causal pass over x [B, T, H] (T <= 13) from position 0; returns ln_f output [B, T, H]."""
        cos, sin = interleaved_cos_sin(torch.arange(x.shape[1], device=x.device), self.cfg.head_dim, self.cfg.rope_base)
        for block in self.h:
            x = x + block.attn(block.ln_1(x), cos, sin)
            x = x + block.mlp(block.ln_2(x))
        return self.ln_f(x)

    def frame_stack(self, batch: int) -> LnFrameStack:
        """The blocks' CPU frame pass for `batch` rows over a frame's positions (`frame_stack_fits`): the same values
        as `step`, position after position. Kept for the next frame of the same batch in the same thread (a frame
        writes every K/V it reads) while the parameters are the same tensors, unchanged; at most 8 kept."""
        if self._versions.changed(self):
            self._stacks.clear()
            self._blocks = None
        key = (threading.get_ident(), batch)
        stack = self._stacks.get(key)
        if stack is None:
            if len(self._stacks) >= 8:
                self._stacks.pop(next(iter(self._stacks)))
            stack = self._stacks[key] = self._frame_stack(batch)
        return stack

    @persistent
    def _frame_blocks(self) -> list[LnBlock]:
        """The blocks as the frame passes read them (made once per parameter version, shared by every batch's and
        thread's pass): aligned weights, the MLP's negated where the activation takes its negated input (fc_out's
        bias is not)."""
        if self._blocks is not None:
            return self._blocks
        negated = self.cfg.activation in _ACT_OF_NEGATED_INTO

        def sign(t: Tensor) -> Tensor:
            return torch.neg(t.detach()) if negated else t

        blocks = [aligned(LnBlock(_norm(b.ln_1), b.attn.c_attn.weight, b.attn.c_attn.bias, b.attn.c_proj.weight,
                                  b.attn.c_proj.bias, _norm(b.ln_2), sign(b.mlp.fc_in.weight),
                                  None if b.mlp.fc_in.bias is None else sign(b.mlp.fc_in.bias),
                                  sign(b.mlp.fc_out.weight), b.mlp.fc_out.bias)) for b in self.h]
        self._blocks = blocks
        return blocks

    @persistent
    def _frame_stack(self, batch: int) -> LnFrameStack:
        act = self.cfg.activation
        act_into = _ACT_OF_NEGATED_INTO[act] if act in _ACT_OF_NEGATED_INTO else _ACT_INTO[act]
        cos, sin = _frame_rope_signed(self.cfg.head_dim, self.cfg.rope_base, self.ln_f.weight.device)
        return LnFrameStack(self._frame_blocks(), _norm(self.ln_f), act_into, batch=batch, positions=FRAME_POSITIONS,
                            heads=self.cfg.num_heads, cos=cos, sin=sin)

    def step(self, x: Tensor, position: int, kv: LocalKV, *, normed: Tensor | None = None) -> Tensor:
        """Advance every row by one position: x [B, H] at `position` (same for all rows) -> [B, H].
        `normed` [B, H]: the first block's ln_1(x) when the caller made it (kernels only)."""
        cos, sin = kv.cos[position : position + 1], kv.sin[position : position + 1]  # [1, D] views
        h = x[:, None]  # [B, 1, H]
        if inference_kernels(x.device):  # each residual add fused with the norm after it
            y = self.h[0].ln_1(h) if normed is None else normed[:, None]
            for j, block in enumerate(self.h):
                h, y = _add_norm(h, block.attn.step(y, cos, sin, position, kv.k[j], kv.v[j]), block.ln_2)
                h, y = _add_norm(h, block.mlp(y), self.h[j + 1].ln_1 if j + 1 < len(self.h) else self.ln_f)
            return y[:, 0]
        for j, block in enumerate(self.h):
            h = h + block.attn.step(block.ln_1(h), cos, sin, position, kv.k[j], kv.v[j])
            h = h + block.mlp(block.ln_2(h))
        return self.ln_f(h)[:, 0]


def _add_norm(h: Tensor, delta: Tensor, norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
    """(h + delta, norm(h + delta)) in one launch."""
    return add_layer_norm_fused(h, delta, norm.weight, norm.bias, norm.eps)
