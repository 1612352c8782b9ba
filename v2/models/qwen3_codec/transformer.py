"""The Qwen3 codec decoder's `pre_transformer`: a sliding-window causal transformer over codec frames.

Owns: `input_proj` -> layers (RMSNorm, grouped-query attention with rotate-half RoPE at each stream's
absolute frame positions, a window of `sliding_window` frames, LayerScale; RMSNorm, SiLU-gated MLP,
LayerScale) -> `norm` -> `output_proj`, under the release's names; each layer's window history (the
last window - 1 keys/values after RoPE, oldest first, at the KV heads) read and written per slot.
Attention is `v2.models.window_attention.window_attention`: per query over exactly its own window of keys,
elementwise products and sums on CPU (the same bits whatever the chunk), banded SDPA elsewhere.
Must not know: checkpoints, convolutions, slot allocation, the runtime.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from v2.models.module_list import module_list_of
from v2.models.window_attention import window_attention
from v2.models.qwen3_codec.config import DecoderConfig
from v2.models.conv_ops import last_rows, rms_norm, silu, tile_rows, tiled_linear
from v2.models.rope import apply_rotate_half, rotate_half_cos_sin

TILE = tile_rows(1)  # one row per frame


def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    return tiled_linear(x, layer.weight, layer.bias, TILE)


class _RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


class _LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))


class _Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        qd, kvd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, qd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kvd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kvd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(qd, cfg.hidden_size, bias=cfg.attention_bias)

    def forward(self, x: Tensor, positions: Tensor, k_hist: Tensor, v_hist: Tensor,
                valid: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, n, hidden] at positions [B, n]; k_hist/v_hist [B, KV, window - 1, D]. Returns the output
        [B, n, hidden] and the window history after the chunk (ending at each row's last valid frame)."""
        cfg = self.cfg
        b, n, _ = x.shape
        q = _linear(self.q_proj, x).view(b, n, cfg.num_heads, cfg.head_dim).transpose(1, 2)  # [B, H, n, D]
        k = _linear(self.k_proj, x).view(b, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)  # [B, KV, n, D]
        v = _linear(self.v_proj, x).view(b, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = rotate_half_cos_sin(positions, cfg.head_dim, cfg.rope_theta)  # [B, n, D]
        q, k = apply_rotate_half(q, cos, sin), apply_rotate_half(k, cos, sin)
        keys = torch.cat([k_hist.to(k.dtype), k], dim=2)  # [B, KV, window - 1 + n, D]
        values = torch.cat([v_hist.to(v.dtype), v], dim=2)
        keep = cfg.sliding_window - 1
        new_k, new_v = last_rows(keys, keep, valid, dim=2), last_rows(values, keep, valid, dim=2)
        groups = cfg.num_heads // cfg.num_kv_heads
        if groups > 1:  # query head h reads KV head h // groups
            keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        out = window_attention(q.contiguous(), keys.contiguous(), values.contiguous(), positions[:, 0],
                               cfg.sliding_window)  # [B, H, n, D]
        out = out.transpose(1, 2).reshape(b, n, cfg.num_heads * cfg.head_dim)
        return _linear(self.o_proj, out), new_k, new_v


class _Mlp(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return _linear(self.down_proj, silu(_linear(self.gate_proj, x)) * _linear(self.up_proj, x))


class _Layer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.input_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = _Attention(cfg)
        self.self_attn_layer_scale = _LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = _Mlp(cfg)
        self.mlp_layer_scale = _LayerScale(cfg.hidden_size)


class PreTransformer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = module_list_of(_Layer(cfg) for _ in range(cfg.num_layers))
        self.norm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)

    def forward(self, x: Tensor, first_frame: Tensor, k: list[Tensor], v: list[Tensor], slots: Tensor,
                valid: Tensor | None, trace: dict[str, Tensor] | None = None) -> Tensor:
        """x [B, n, latent] time-major, frames first_frame[b] + i; k[i]/v[i] [slots + 1, KV, window - 1, D]
        each layer's window history, read at and written back to `slots`. Returns [B, n, latent]."""
        n = x.shape[1]
        positions = first_frame[:, None] + torch.arange(n, device=x.device)  # [B, n]
        h = _linear(self.input_proj, x)
        if trace is not None:
            trace["pre_transformer_in"] = h.clone()
        for i, layer in enumerate(self.layers):
            attn, new_k, new_v = layer.self_attn(layer.input_layernorm(h), positions, k[i][slots], v[i][slots], valid)
            k[i][slots], v[i][slots] = new_k.to(k[i].dtype), new_v.to(v[i].dtype)
            h = h + layer.self_attn_layer_scale.scale * attn
            h = h + layer.mlp_layer_scale.scale * layer.mlp(layer.post_attention_layernorm(h))
            if trace is not None:
                trace[f"pre_transformer_layer{i}"] = h.clone()
        return _linear(self.output_proj, self.norm(h))
