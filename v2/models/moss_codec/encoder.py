"""MOSS-Audio-Tokenizer-v2 encoder: waveforms -> the first 12 residual-LFQ codes per frame, batched with lengths.

Owns: interleaving the channels (L R L R ...), the configured patch down-samplers and causal local-window
stages run over whole sequences (position 0 at the first sample), the encode side of the quantizer
(`input_proj`, then per codebook `in_proj`, the nearest L2-normalised code, its `out_proj` subtracted from
the residual), and the batching rule: items right-padded, samples past an item's length zeroed, the longest
item padded to whole frames, an item's frames counted as `floor(length / hop)`, and the residual zeroed past
them (those frames get the codes of a zero residual, as in the reference).
Also `encode_chunk`: a long recording encoded a few frames at a time over `CodecState` (the decoder's
per-slot window K/V history), so a scheduler can spread one reference over several steps.
Why batched equals alone (and chunked equals whole): every stage is causal and per position (the decoder's
`StableLinear` and exact per-query window attention), so an item's frames never see the padding and get the
same arithmetic at any batch size or chunking; the quantizer is per frame.
Must not know: files, resampling, loudness, requests, the runtime, how slots are allocated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models.module_list import module_list_of
from v2.models.moss_codec.config import DECODE_CODEBOOKS, CodecConfig, StageConfig
from v2.models.moss_codec.decoder import CodecState, MossAudioDecoder
from v2.models.moss_codec.layers import CodecStage, PatchDownsample, StableLinear, stable_linear
from v2.models.config import ConfigError


def _linear32(x: Tensor, layer: nn.Linear) -> Tensor:
    """A quantizer projection in float32 whatever the codec's dtype (the reference quantizes in float32)."""
    bias = None if layer.bias is None else layer.bias.float()
    return stable_linear(x.float(), layer.weight.float(), bias)


def nearest_code(z: Tensor, codebook: Tensor) -> Tensor:
    """z [..., cd] -> [...] index of the codebook row [K, cd] nearest to z, both L2-normalised, by the
    reference's squared distance |e|^2 - 2 e.c + |c|^2 (first index on a tie)."""
    e = F.normalize(z.float(), dim=-1)
    c = F.normalize(codebook.float(), dim=-1)
    dist = e.pow(2).sum(-1, keepdim=True) - stable_linear(2 * e, c) + c.pow(2).sum(-1)  # [..., K]
    return (-dist).max(dim=-1).indices


class _EncodeCodebook(nn.Module):
    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.in_proj = nn.Linear(cfg.rvq_dim, cfg.codebook_dim)
        self.codebook = nn.Embedding(cfg.codebook_size, cfg.codebook_dim)
        self.out_proj = nn.Linear(cfg.codebook_dim, cfg.rvq_dim)


class EncodeQuantizer(nn.Module):
    """Encode side of the residual LFQ (weight norm folded): `input_proj`, `quantizers.{k}.{in_proj, codebook,
    out_proj}` for the first 12 codebooks."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.input_proj = StableLinear(cfg.encoder_dim, cfg.rvq_dim)
        self.quantizers = module_list_of(_EncodeCodebook(cfg) for _ in range(DECODE_CODEBOOKS))

    def forward(self, latent: Tensor, frame_lengths: Tensor) -> Tensor:
        """latent [B, F, encoder_dim], frame_lengths [B] -> codes [B, 12, F] int64."""
        frames = latent.shape[1]
        valid = torch.arange(frames, device=latent.device)[None] < frame_lengths.to(latent.device)[:, None]
        mask = valid[..., None].float()  # [B, F, 1]
        residual = _linear32(latent, self.input_proj)  # [B, F, rvq]
        codes = []
        for q in self.quantizers:
            z = _linear32(residual * mask, q.in_proj)  # [B, F, cd]
            code = nearest_code(z, q.codebook.weight)  # [B, F]
            chosen = q.codebook.weight.float()[code]  # [B, F, cd]
            chosen = z + (chosen - z)  # the reference's straight-through form, kept for its rounding
            residual = residual - _linear32(chosen, q.out_proj) * mask
            codes.append(code)
        return torch.stack(codes, dim=1)


def _run_stage(stage: CodecStage, x: Tensor) -> Tensor:
    """A stage over whole sequences from position 0: x [B, n, C_in] -> [B, n, C_out]; no history is kept."""
    cfg = stage.cfg
    b, n, _ = x.shape
    positions = torch.arange(n, device=x.device).expand(b, n)  # [B, n]
    h = stage.input_proj(x)
    for layer in stage.transformer.layers:
        # keys before position 0 are masked; zeros fill the window's history
        empty = h.new_zeros(b, cfg.num_heads, cfg.window - 1, cfg.head_dim)
        attn, _, _ = layer.self_attn(layer.norm1(h), positions, empty, empty)
        h = h + layer.layer_scale_1(attn)
        h = h + layer.layer_scale_2(layer.ffn(layer.norm2(h)))
    return stage.output_proj(h)


class MossAudioEncoder(nn.Module):
    """The encode side of a codec checkpoint: `encoder.{i}` modules and the encode-side quantizer."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        if not cfg.encoder_modules:
            raise ConfigError("codec config.json: missing field 'encoder_kwargs' (needed to encode audio)")
        self.cfg = cfg
        self.encoder = nn.ModuleList(
            CodecStage(m) if isinstance(m, StageConfig) else PatchDownsample(m.patch) for m in cfg.encoder_modules)
        self.quantizer = EncodeQuantizer(cfg)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "MossAudioEncoder":
        """The encoder side of a codec checkpoint (the decoder side's keys are skipped)."""
        from v2.models.moss_codec.loader import load_codec

        return load_codec(cls, Path(path), dtype=dtype, device=device, encoder=True)

    @classmethod
    def from_seed(cls, config: dict, seed: int, *, decoder: nn.Module | None = None,
                  dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                  init_device: torch.device | str = "cpu") -> "MossAudioEncoder":
        """Weights drawn from `seed`, sharing the codebooks and `out_proj` of `decoder` (default: the decoder
        `MossAudioDecoder.from_seed(config, seed)` builds), as one checkpoint's two sides do."""
        from v2.models.moss_codec.loader import seeded_encoder

        if decoder is None:
            decoder = MossAudioDecoder.from_seed(config, seed, device=init_device, init_device=init_device)
        return seeded_encoder(cls, config, seed, decoder, dtype=dtype, device=device, init_device=init_device)

    @property
    def device(self) -> torch.device:
        return self.quantizer.input_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.quantizer.input_proj.weight.dtype

    @property
    def sample_rate(self) -> int:
        return self.cfg.sampling_rate

    def check_audio(self, audio: Tensor, lengths: Tensor | Sequence[int] | None) -> Tensor:
        """The per-item sample counts [B] (int64, CPU) of audio [B, channels, S]; raises ValueError naming the
        argument when a shape, dtype or length is wrong."""
        channels = self.cfg.channels
        if not isinstance(audio, Tensor) or audio.dim() != 3 or audio.shape[1] != channels or audio.shape[2] < 1:
            shape = list(audio.shape) if isinstance(audio, Tensor) else type(audio).__name__
            raise ValueError(f"audio: expected a tensor [B, {channels}, S >= 1], got {shape}")
        if not audio.dtype.is_floating_point:
            raise ValueError(f"audio: expected float samples, got {audio.dtype}")
        b, _, s = audio.shape
        if lengths is None:
            return torch.full((b,), s, dtype=torch.long)
        lengths = torch.as_tensor(lengths).cpu()
        if lengths.shape != (b,) or lengths.dtype.is_floating_point or bool(((lengths < 1) | (lengths > s)).any()):
            raise ValueError(f"lengths: expected {b} integer sample counts in [1, {s}], got {lengths.tolist()}")
        return lengths.long()

    @torch.no_grad()
    def encode_latent(self, audio: Tensor, lengths: Tensor | Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
        """audio [B, channels, S] right-padded (lengths [B] samples per channel, default S) -> the encoder
        output before `quantizer.input_proj`, latent [B, F, encoder_dim] with F = ceil(max(lengths) / hop),
        and frame_lengths [B] = floor(lengths / hop) (int64, CPU). Samples past an item's length are ignored."""
        lengths = self.check_audio(audio, lengths)
        b, channels, _ = audio.shape
        hop = self.cfg.hop
        longest = int(lengths.max())
        frames = -(-longest // hop)
        audio = audio[:, :, :longest].to(device=self.device, dtype=self.dtype)
        valid = (torch.arange(longest)[None] < lengths[:, None]).to(self.device)  # [B, S]
        x = torch.where(valid[:, None], audio, torch.zeros((), dtype=self.dtype, device=self.device))
        x = F.pad(x, (0, frames * hop - longest))  # [B, C, F * hop]: whole frames
        x = x.transpose(1, 2).reshape(b, frames * hop * channels, 1)  # [B, F * hop * C, 1]: L R L R ..., time-major
        for module in self.encoder:
            x = _run_stage(module, x) if isinstance(module, CodecStage) else module(x)
        return x, lengths // hop

    @torch.no_grad()
    def quantize(self, latent: Tensor, frame_lengths: Tensor) -> Tensor:
        """latent [B, F, encoder_dim], frame_lengths [B] -> codes [B, 12, F] int64 (first 12 codebooks).
        Frames past an item's length get the codes of a zero residual."""
        return self.quantizer(latent, frame_lengths)

    @torch.no_grad()
    def encode(self, audio: Tensor, lengths: Tensor | Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
        """audio [B, channels, S] at `sample_rate`, right-padded (lengths [B] samples per channel, default S)
        -> codes [B, 12, F] int64 on the encoder's device, F = ceil(max(lengths) / hop), and frame_lengths [B]
        = floor(lengths / hop) int64 on CPU: item b's codes are codes[b, :, :frame_lengths[b]], the same codes
        it gets encoded alone. A partial last frame is computed (zero-padded) and left past the length."""
        latent, frame_lengths = self.encode_latent(audio, lengths)
        return self.quantize(latent, frame_lengths), frame_lengths

    def allocate_state(self, num_slots: int) -> CodecState:
        """Zeroed state for `num_slots` chunked encodes plus the dummy slot (the last), as the decoder's."""
        return CodecState.zeros(self.cfg.encoder_stages, num_slots, dtype=self.dtype, device=self.device)

    @torch.no_grad()
    def encode_chunk(self, slots: Tensor, audio: Tensor, *, state: CodecState, frames: Tensor | None = None) -> Tensor:
        """Advance B encodes by whole frames: slots [B] (the dummy slot for padding rows, real slots distinct),
        audio [B, channels, n * hop] the next samples of each; frames [B] (default n) frames of each row that
        are real, the rest padding. Returns codes [B, 12, n]; row b's first frames[b] are its next codes, the
        same as encoding its whole recording at once (bit for bit on CPU). A recording's last partial frame
        is not encoded (as `encode` counts it out)."""
        b, channels, s = audio.shape
        hop = self.cfg.hop
        if channels != self.cfg.channels or s < hop or s % hop:
            raise ValueError(f"audio: expected [B, {channels}, n * {hop}] (whole frames), got {list(audio.shape)}")
        n = s // hop
        start = state.frames[slots]  # [B] frames encoded so far
        x = audio.to(device=self.device, dtype=self.dtype).transpose(1, 2).reshape(b, s * channels, 1)  # L R L R ...
        layer = 0
        for module in self.encoder:
            if isinstance(module, CodecStage):
                up, count = module.cfg.upsample, module.cfg.num_layers
                history = [(state.k[i][slots], state.v[i][slots]) for i in range(layer, layer + count)]
                x, history = module(x, start * up, history, None if frames is None else frames.to(self.device) * up)
                for i, (k, v) in enumerate(history, start=layer):
                    state.k[i][slots], state.v[i][slots] = k.to(state.k[i].dtype), v.to(state.v[i].dtype)
                layer += count
            else:
                x = module(x)
        real = torch.full((b,), n, device=self.device) if frames is None else frames.to(self.device)
        state.frames[slots] = start + real
        return self.quantizer(x, real)
