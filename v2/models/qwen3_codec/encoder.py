"""Qwen3-TTS-Tokenizer-12Hz encoder (a Mimi encoder): mono 24 kHz waveforms -> codes [frames, G].

Owns: the SEANet convs (`encoder.layers.*`: causal, each padding its own input with zeros on the left and up
to a whole number of strides on the right), the causal transformer (`encoder_transformer`, LayerNorm,
rotate-half RoPE from position 0, full causal attention, GELU MLP, LayerScale, no final norm), the stride-2
`downsample` (replicate padding), the split RVQ's encode side (semantic then acoustic, each from the
down-sampler output through its own `input_proj`; nearest codeword by Euclidean distance, residual
subtraction), keeping the first G codes, and the batching rule of the reference: a batch is right-padded
with zeros to its longest item, one item alone is not padded, item i keeps ceil(len_i / hop) frames.
Must not know: files, resampling, the decoder, the runtime.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models.config import ConfigError
from v2.models.qwen3_codec.config import EncoderConfig, Qwen3CodecConfig
from v2.models.rope import apply_rotate_half, rotate_half_cos_sin


class _Conv(nn.Module):
    """MimiConv1d, causal: left pad (k - 1) * dilation + 1 - stride, right pad to a whole number of strides."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1, bias: bool = True,
                 pad_mode: str = "constant") -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, dilation=dilation, bias=bias)
        self.stride, self.dilation, self.pad_mode = stride, dilation, pad_mode
        self.span = (kernel - 1) * dilation + 1
        self.left = self.span - stride

    def forward(self, x: Tensor) -> Tensor:
        length = x.shape[-1]
        frames = math.ceil((length - self.span + self.left) / self.stride + 1)
        extra = (frames - 1) * self.stride + self.span - self.left - length
        x = F.pad(x, (self.left, extra), mode=self.pad_mode)
        return self.conv(x)


class _ResnetBlock(nn.Module):
    """x + conv_1x1(ELU(conv_k(ELU(x)))) at `dim` channels, inner width dim / compress."""

    def __init__(self, cfg: EncoderConfig, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList([nn.ELU(), _Conv(dim, hidden, cfg.residual_kernel_size, dilation=dilation),
                                    nn.ELU(), _Conv(hidden, dim, 1)])

    def forward(self, x: Tensor) -> Tensor:
        h = x
        for layer in self.block:
            h = layer(h)
        return x + h


class _SEANet(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [_Conv(cfg.audio_channels, cfg.num_filters, cfg.kernel_size)]
        scale = 1
        for ratio in reversed(cfg.ratios):
            dim = scale * cfg.num_filters
            layers += [_ResnetBlock(cfg, dim, cfg.dilation_growth_rate ** j) for j in range(cfg.num_residual_layers)]
            layers += [nn.ELU(), _Conv(dim, dim * 2, 2 * ratio, stride=ratio)]
            scale *= 2
        layers += [nn.ELU(), _Conv(scale * cfg.num_filters, cfg.hidden_size, cfg.last_kernel_size)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class _Attention(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        qd, kvd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, qd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kvd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kvd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(qd, cfg.hidden_size, bias=cfg.attention_bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        cfg = self.cfg
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, cfg.num_heads, cfg.head_dim).transpose(1, 2)  # [B, H, n, D]
        k = self.k_proj(x).view(b, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)  # [B, KV, n, D]
        v = self.v_proj(x).view(b, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = apply_rotate_half(q, cos, sin), apply_rotate_half(k, cos, sin)
        groups = cfg.num_heads // cfg.num_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, n, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class _Mlp(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)


class _LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))


class _Layer(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = _Attention(cfg)
        self.self_attn_layer_scale = _LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = _Mlp(cfg)
        self.mlp_layer_scale = _LayerScale(cfg.hidden_size)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.self_attn_layer_scale.scale * self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.mlp.fc2(F.gelu(self.mlp.fc1(self.post_attention_layernorm(x))))
        return x + self.mlp_layer_scale.scale * h


class _Transformer(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_layers))

    def forward(self, x: Tensor) -> Tensor:
        """x [B, n, hidden] time-major from position 0."""
        b, n, _ = x.shape
        positions = torch.arange(n, device=x.device).expand(b, n)  # [B, n]
        cos, sin = rotate_half_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class _Codebook(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(cfg.codebook_size))
        self.embed_sum = nn.Parameter(torch.zeros(cfg.codebook_size, cfg.codebook_dim))


class _VQ(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.codebook = _Codebook(cfg)


class _RVQ(nn.Module):
    """Encode side of one Mimi residual VQ: `input_proj` (when the width changes), `layers.{i}.codebook`."""

    def __init__(self, cfg: EncoderConfig, count: int) -> None:
        super().__init__()
        if cfg.vq_hidden != cfg.hidden_size:
            self.input_proj = nn.Conv1d(cfg.hidden_size, cfg.vq_hidden, 1, bias=False)
        self.layers = nn.ModuleList(_VQ(cfg) for _ in range(count))

    def forward(self, x: Tensor, count: int) -> Tensor:
        """x [B, hidden, F] -> codes [count, B, F] of the first `count` codebooks."""
        if hasattr(self, "input_proj"):
            x = F.conv1d(x, self.input_proj.weight)
        residual = x.transpose(1, 2).float()  # [B, F, vq]
        codes = []
        for vq in self.layers[:count]:
            cb = vq.codebook
            table = (cb.embed_sum / cb.cluster_usage.clamp(min=1e-5)[:, None]).float()  # [K, vq]
            flat = residual.reshape(-1, residual.shape[-1])
            index = torch.cdist(flat[None], table[None], p=2)[0].argmin(dim=-1).view(residual.shape[:2])  # [B, F]
            residual = residual - table[index]
            codes.append(index)
        return torch.stack(codes)


class _SplitRVQ(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.semantic_residual_vector_quantizer = _RVQ(cfg, cfg.num_semantic_quantizers)
        self.acoustic_residual_vector_quantizer = _RVQ(cfg, cfg.num_quantizers - cfg.num_semantic_quantizers)


class Qwen3CodecEncoder(nn.Module):
    """The encoder side of a Qwen3-TTS-Tokenizer-12Hz checkpoint (`encoder.*`)."""

    def __init__(self, cfg: Qwen3CodecConfig) -> None:
        super().__init__()
        if cfg.encoder is None:
            raise ConfigError("speech_tokenizer config.json: missing field 'encoder_config' (needed to encode audio)")
        self.cfg = cfg
        e = cfg.encoder
        self.encoder = _SEANet(e)
        self.encoder_transformer = _Transformer(e)
        self.downsample = _Conv(e.hidden_size, e.hidden_size, e.downsample_kernel, stride=2, bias=False,
                                pad_mode="replicate")
        self.quantizer = _SplitRVQ(e)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "Qwen3CodecEncoder":
        from v2.models.qwen3_codec.loader import load_side

        return load_side(cls, Path(path), "encoder", dtype=dtype, device=device)

    @classmethod
    def from_seed(cls, config: dict, seed: int, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> "Qwen3CodecEncoder":
        from v2.models.qwen3_codec.loader import seeded_side

        return seeded_side(cls, config, seed, "encoder", dtype=dtype, device=device)

    @property
    def device(self) -> torch.device:
        return self.downsample.conv.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.downsample.conv.weight.dtype

    @torch.no_grad()
    def latent(self, audio: Tensor, trace: dict[str, Tensor] | None = None) -> Tensor:
        """audio [B, S] -> the down-sampler output [B, hidden, ceil(S / hop)] (channel-major)."""
        seanet = self.encoder(audio.to(device=self.device, dtype=self.dtype)[:, None])  # [B, hidden, L]
        h = self.encoder_transformer(seanet.transpose(1, 2))  # [B, L, hidden]
        x = self.downsample(h.transpose(1, 2))  # [B, hidden, F]
        if trace is not None:
            trace.update(seanet_out=seanet, transformer_out=h, downsample_out=x)
        return x

    @torch.no_grad()
    def quantize(self, latent: Tensor, count: int | None = None) -> Tensor:
        """latent [B, hidden, F] -> codes [B, F, count] (default: the G codes a frame keeps), semantic first."""
        e = self.cfg.encoder
        count = self.cfg.valid_quantizers if count is None else count
        if not 1 <= count <= e.num_quantizers:
            raise ValueError(f"count: expected 1..{e.num_quantizers}, got {count}")
        q = self.quantizer
        semantic = min(count, e.num_semantic_quantizers)
        codes = q.semantic_residual_vector_quantizer(latent, semantic)
        if count > semantic:
            codes = torch.cat([codes, q.acoustic_residual_vector_quantizer(latent, count - semantic)])
        return codes.permute(1, 2, 0)  # [count, B, F] -> [B, F, count]

    def check_audio(self, audio: Tensor | np.ndarray, name: str = "audio") -> Tensor:
        t = torch.as_tensor(audio)
        if t.dim() != 1 or t.shape[0] < 1 or not t.dtype.is_floating_point:
            raise ValueError(f"{name}: expected a non-empty 1-D float waveform, got {t.dtype} {list(t.shape)}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name}: contains NaN or infinite samples")
        return t

    @torch.no_grad()
    def encode_batch(self, audio: Tensor, lengths: Tensor | Sequence[int]) -> tuple[Tensor, Tensor]:
        """audio [B, S] right-padded (samples past lengths[b] are replaced by zeros), at the codec's rate ->
        codes [B, F, G] with F = ceil(max(lengths) / hop), -1 past each item's ceil(lengths[b] / hop) frames,
        and those frame counts [B] (int64). The reference's batch rule: the tail of a short item is zero
        waveform, so its partial last frame may differ from encoding it alone."""
        lengths = torch.as_tensor(lengths, dtype=torch.long).cpu()
        if audio.dim() != 2 or lengths.shape != (audio.shape[0],) or bool(((lengths < 1) | (lengths > audio.shape[1])).any()):
            raise ValueError(f"lengths: expected {audio.shape[0]} sample counts in [1, {audio.shape[-1]}], "
                             f"got {lengths.tolist()}")
        longest = int(lengths.max())
        audio = audio[:, :longest]
        valid = torch.arange(longest)[None] < lengths[:, None]  # [B, S]
        audio = torch.where(valid.to(audio.device), audio, torch.zeros((), dtype=audio.dtype, device=audio.device))
        codes = self.quantize(self.latent(audio))  # [B, F, G]
        frames = -(-lengths // self.cfg.hop)
        keep = torch.arange(codes.shape[1])[None] < frames[:, None]  # [B, F]
        return codes.masked_fill(~keep[..., None].to(codes.device), -1), frames

    def encode(self, wavs: Sequence[Tensor | np.ndarray]) -> list[Tensor]:
        """The reference's public encode of mono waveforms at the codec's rate: one waveform alone is not
        padded, several are right-padded with zeros to the longest and encoded together. Returns each item's
        codes [ceil(len / hop), G] int64."""
        items = [self.check_audio(w, f"wavs[{i}]") for i, w in enumerate(wavs)]
        if not items:
            return []
        lengths = torch.tensor([len(w) for w in items])
        batch = torch.zeros(len(items), int(lengths.max()), dtype=torch.float32)
        for i, w in enumerate(items):
            batch[i, : len(w)] = w.float()
        codes, frames = self.encode_batch(batch, lengths)
        return [codes[i, : int(frames[i])].cpu() for i in range(len(items))]
