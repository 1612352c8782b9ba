"""Mimi's transformer (`encoder_transformer`, `decoder_transformer`): pre-norm layers over SEANet-rate steps.

Owns: the layer under the release's names (`input_layernorm` LayerNorm with bias, `self_attn` q/k/v/o
projections, rotate-half RoPE at each row's absolute step positions, causal attention over the last
`window` steps or over every earlier step, `self_attn_layer_scale`; `post_attention_layernorm`, `mlp`
fc1 -> exact GELU -> fc2, `mlp_layer_scale`; no final norm), every matmul a fixed-tile `exact.linear`,
and the `KVWindow` protocol through which a streaming caller gives each layer's key/value history and
takes back the keys/values after a chunk (the transformer itself holds no state and knows no slots).
Must not know: checkpoints, convolutions, slot allocation, the runtime.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import exact
from v2.models.mimi.config import MimiConfig
from v2.models.module_list import module_list_of
from v2.models.rope import apply_rotate_half, rotate_half_cos_sin
from v2.models.window_attention import window_attention

TILE = 64  # rows per matmul call (2 rows per codec frame: a 32-frame chunk per call)


class KVWindow(Protocol):
    """A streaming call's view of each layer's key/value history (after RoPE, at the KV heads)."""

    def history(self, layer: int) -> tuple[Tensor, Tensor]:
        """Layer `layer`'s last window - 1 keys and values, oldest first: [B, KV, window - 1, D] each."""
        ...

    def keep(self, layer: int, keys: Tensor, values: Tensor) -> None:
        """Store the history after the chunk, from the history followed by the chunk's [B, KV, window - 1 + n, D]."""
        ...


def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    return exact.linear(x, layer.weight, layer.bias, TILE)


class _Attention(nn.Module):
    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__()
        self.cfg = cfg
        qd, kvd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, qd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kvd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kvd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(qd, cfg.hidden_size, bias=cfg.attention_bias)

    def forward(self, x: Tensor, first: Tensor, positions: Tensor, window: int | None, layer: int,
                kv: KVWindow | None) -> Tensor:
        cfg = self.cfg
        b, n, _ = x.shape
        q = _linear(self.q_proj, x).view(b, n, cfg.num_heads, cfg.head_dim).transpose(1, 2)  # [B, H, n, D]
        k = _linear(self.k_proj, x).view(b, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)  # [B, KV, n, D]
        v = _linear(self.v_proj, x).view(b, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = rotate_half_cos_sin(positions, cfg.head_dim, cfg.rope_theta)  # [B, n, D]
        q, k = apply_rotate_half(q, cos, sin), apply_rotate_half(k, cos, sin)
        if window is None:
            if kv is not None:
                raise ValueError("a transformer without a window keeps no streaming history")
            out = exact.attention(q, k, v, causal=True)  # [B, H, n, D]
        else:
            if kv is None:  # a fresh sequence: the history is before the stream (masked)
                k_hist = k.new_zeros(b, cfg.num_kv_heads, window - 1, cfg.head_dim)
                v_hist = k_hist
            else:
                k_hist, v_hist = kv.history(layer)
            keys = torch.cat([k_hist.to(k.dtype), k], dim=2)  # [B, KV, window - 1 + n, D]
            values = torch.cat([v_hist.to(v.dtype), v], dim=2)
            if kv is not None:
                kv.keep(layer, keys, values)
            groups = cfg.num_heads // cfg.num_kv_heads
            if groups > 1:  # query head h reads KV head h // groups
                keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
            out = window_attention(q.contiguous(), keys.contiguous(), values.contiguous(), first, window)
        return _linear(self.o_proj, out.transpose(1, 2).reshape(b, n, cfg.num_heads * cfg.head_dim))


class _Mlp(nn.Module):
    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return _linear(self.fc2, exact.gelu(_linear(self.fc1, x)))


class _LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))


class _Layer(nn.Module):
    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = _Attention(cfg)
        self.self_attn_layer_scale = _LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = _Mlp(cfg)
        self.mlp_layer_scale = _LayerScale(cfg.hidden_size)


def _norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)


class MimiTransformer(nn.Module):
    """`layers.{i}`; `window`: each step attends to the last `window` steps (itself included), or to every
    earlier step when None (then no streaming history)."""

    def __init__(self, cfg: MimiConfig, window: int | None) -> None:
        super().__init__()
        self.window = window
        self.layers = module_list_of(_Layer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: Tensor, first: Tensor, kv: KVWindow | None = None) -> Tensor:
        """x [B, n, hidden] time-major; row i of batch row b sits at step first[b] + i ([B] int64, 0 for a
        fresh sequence). `kv` (streaming) gives and keeps each layer's history. Returns [B, n, hidden]."""
        n = x.shape[1]
        positions = first[:, None] + torch.arange(n, device=x.device)  # [B, n]
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn(_norm(layer.input_layernorm, x), first, positions, self.window, i, kv)
            x = x + layer.self_attn_layer_scale.scale * attn
            x = x + layer.mlp_layer_scale.scale * layer.mlp(_norm(layer.post_attention_layernorm, x))
        return x
