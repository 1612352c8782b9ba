"""The AuT layer written out the plain way, one clip, window by window (each window its own `exact.attention` call,
each linear `exact.linear`): what the batched `encoder_layer` must equal bit for bit. Test code only."""

from __future__ import annotations

import torch
from torch import Tensor

from v2.models import exact
from v2.models.aut.encoder import AudioEncoder, EncoderLayer


def layer_by_window(layer: EncoderLayer, x: Tensor, window: int) -> Tensor:
    """x [N, d] (one clip's rows) -> [N, d]: pre-LN attention inside consecutive windows of `window` rows, then
    the pre-LN MLP."""
    n, d = x.shape
    a, heads = layer.self_attn, layer.heads
    h = layer.self_attn_layer_norm(x)
    q, k, v = (exact.linear(h, p.weight, p.bias).view(n, heads, d // heads).transpose(0, 1)  # [heads, N, hd]
               for p in (a.q_proj, a.k_proj, a.v_proj))
    out = torch.empty_like(q)
    for s in range(0, n, window):
        e = min(n, s + window)
        out[:, s:e] = exact.attention(q[None, :, s:e], k[None, :, s:e], v[None, :, s:e])[0]
    x = x + exact.linear(out.transpose(0, 1).reshape(n, d), a.out_proj.weight, a.out_proj.bias)
    g = exact.gelu(exact.linear(layer.final_layer_norm(x), layer.fc1.weight, layer.fc1.bias))
    return x + exact.linear(g, layer.fc2.weight, layer.fc2.bias)


def stack_by_window(tower: AudioEncoder, x: Tensor) -> Tensor:
    """One clip's rows entering the layers [N, d_model] -> its output rows [N, output_dim], window by window."""
    for layer in tower.layers:
        x = layer_by_window(layer, x, tower.window)
    h = exact.gelu(exact.linear(tower.ln_post(x), tower.proj1.weight, tower.proj1.bias))
    return exact.linear(h, tower.proj2.weight, tower.proj2.bias)
