"""MOSS-Audio-Tokenizer-v2 decoder: 12 RVQ code streams -> interleaved stereo waveform, batched and streaming.

Owns: residual-LFQ dequantisation of the first 12 codebooks, the configured stages and up-samplers,
de-interleaving, whole-utterance `decode`, and `decode_chunk` over `CodecState`: per-slot windowed
K/V history for every attention layer plus a frame counter, preallocated and indexed by slot, with a
dummy slot for padding rows.
Must not know: the TTS model, requests, scheduling, how slots are allocated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor, nn

from v2.models.module_list import module_list_of
from v2.models.moss_codec.config import DECODE_CODEBOOKS, CodecConfig, StageConfig
from v2.models.moss_codec.layers import CodecStage, PatchUpsample, StableLinear, stable_linear


class CodesError(ValueError):
    """Codes given to the decoder are malformed; the message names the argument."""


@dataclass
class CodecState:
    """Streaming state of `num_slots` streams (+1 dummy slot, the last).

    k[i], v[i]: [num_slots + 1, heads, window - 1, head_dim] the last window - 1 keys/values of attention
    layer i, oldest first; frames: [num_slots + 1] int64 frames decoded so far.
    """

    k: list[Tensor]
    v: list[Tensor]
    frames: Tensor

    @classmethod
    def zeros(cls, stages: Sequence[StageConfig], num_slots: int, *, dtype: torch.dtype,
              device: torch.device) -> "CodecState":
        """Zeroed state of `stages`' attention layers for `num_slots` streams plus the dummy slot."""
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        ks, vs = [], []
        for stage in stages:
            shape = (num_slots + 1, stage.num_heads, stage.window - 1, stage.head_dim)
            for _ in range(stage.num_layers):
                ks.append(torch.zeros(shape, dtype=dtype, device=device))
                vs.append(torch.zeros(shape, dtype=dtype, device=device))
        return cls(ks, vs, torch.zeros(num_slots + 1, dtype=torch.long, device=device))

    @property
    def num_slots(self) -> int:
        return self.frames.shape[0] - 1

    @property
    def dummy_slot(self) -> int:
        return self.frames.shape[0] - 1

    def reset(self, slots: Tensor | list[int]) -> None:
        """Make `slots` start a new stream."""
        idx = torch.as_tensor(slots, dtype=torch.long, device=self.frames.device)
        self.frames[idx] = 0
        for t in (*self.k, *self.v):
            t[idx] = 0


class Quantizer(nn.Module):
    """Decode side of the residual LFQ: `quantizers.{k}.{codebook, out_proj}`, `output_proj` (weight-norm folded)."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.quantizers = module_list_of(_Codebook(cfg) for _ in range(DECODE_CODEBOOKS))
        self.output_proj = StableLinear(cfg.rvq_dim, cfg.latent_dim)

    def forward(self, codes: Tensor) -> Tensor:
        """codes [B, 12, n] -> latent [B, n, latent_dim] = output_proj(sum_k out_proj_k(codebook_k[code_k]))."""
        emb = torch.stack([q.codebook(codes[:, k]) for k, q in enumerate(self.quantizers)], dim=2)  # [B, n, 12, cd]
        # sum_k (W_k e_k + b_k) as one matmul over the concatenated codebook vectors
        weight = torch.cat([q.out_proj.weight for q in self.quantizers], dim=1)  # [rvq, 12 * cd]
        bias = torch.stack([q.out_proj.bias for q in self.quantizers]).sum(0)
        return self.output_proj(stable_linear(emb.flatten(2), weight, bias))


class _Codebook(nn.Module):
    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.codebook = nn.Embedding(cfg.codebook_size, cfg.codebook_dim)
        self.out_proj = nn.Linear(cfg.codebook_dim, cfg.rvq_dim)


class MossAudioDecoder(nn.Module):
    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.quantizer = Quantizer(cfg)
        self.decoder = nn.ModuleList(
            CodecStage(m) if isinstance(m, StageConfig) else PatchUpsample(m.patch) for m in cfg.modules)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "MossAudioDecoder":
        from v2.models.moss_codec.loader import load_codec

        return load_codec(cls, Path(path), dtype=dtype, device=device)

    @classmethod
    def from_seed(cls, config: dict, seed: int, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu", init_device: torch.device | str = "cpu") -> "MossAudioDecoder":
        from v2.models.moss_codec.loader import seeded_codec

        return seeded_codec(cls, config, seed, dtype=dtype, device=device, init_device=init_device)

    @property
    def device(self) -> torch.device:
        return self.quantizer.output_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.quantizer.output_proj.weight.dtype

    @property
    def sample_rate(self) -> int:
        return self.cfg.sampling_rate

    def allocate_state(self, num_slots: int) -> CodecState:
        """Zeroed streaming state for `num_slots` streams plus the dummy slot."""
        return CodecState.zeros(self.cfg.stages, num_slots, dtype=self.dtype, device=self.device)

    @torch.no_grad()
    def decode_chunk(self, slots: Tensor, codes: Tensor, *, state: CodecState, lengths: Tensor | None = None) -> Tensor:
        """Advance B streams: slots [B] (the dummy slot for padding rows, real slots distinct), codes
        [B, 12, n] in [0, codebook_size); lengths [B] (default n) frames of each row that are real, the rest
        padding up to a shared n. Returns audio [B, channels, n * hop]; row b's first lengths[b] * hop
        samples are its audio, and its stream advances by lengths[b] frames."""
        b, _, n = codes.shape
        frames = state.frames[slots]  # [B]
        x = self.quantizer(codes)  # [B, n, latent]
        layer = 0
        for module, spec in zip(self.decoder, self.cfg.modules):
            if isinstance(module, CodecStage):
                count = spec.num_layers  # type: ignore[union-attr]
                history = [(state.k[i][slots], state.v[i][slots]) for i in range(layer, layer + count)]
                up = module.cfg.upsample
                x, history = module(x, frames * up, history, None if lengths is None else lengths * up)
                for i, (k, v) in enumerate(history, start=layer):
                    state.k[i][slots] = k.to(state.k[i].dtype)
                    state.v[i][slots] = v.to(state.v[i].dtype)
                layer += count
            else:
                x = module(x)
        state.frames[slots] = frames + (n if lengths is None else lengths)
        # [B, n * hop * channels, 1] interleaved L R L R ... -> [B, channels, n * hop]
        return x.reshape(b, n * self.cfg.hop, self.cfg.channels).transpose(1, 2)

    @torch.no_grad()
    def decode(self, codes: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Whole utterances: codes [B, 12, F] (right-padded; lengths [B] valid frames) -> [B, channels, F * hop].

        Samples past a row's `lengths * hop` are zero.
        """
        codes = self.check_codes(codes, lengths)
        b, _, f = codes.shape
        frame_valid = None
        if lengths is not None:
            frame_valid = torch.arange(f, device=codes.device)[None] < lengths.to(codes.device)[:, None]  # [B, F]
            codes = codes.masked_fill(~frame_valid[:, None], 0)
        state = self.allocate_state(b)
        audio = self.decode_chunk(torch.arange(b, device=self.device), codes.to(self.device), state=state)
        if frame_valid is not None:
            keep = frame_valid.to(self.device).repeat_interleave(self.cfg.hop, dim=1)  # [B, F * hop]
            audio = audio * keep[:, None]
        return audio

    def check_codes(self, codes: Tensor, lengths: Tensor | None = None) -> Tensor:
        if codes.dim() != 3 or codes.shape[1] != DECODE_CODEBOOKS or codes.shape[2] < 1:
            raise CodesError(f"codes: expected shape [B, {DECODE_CODEBOOKS}, F >= 1], got {list(codes.shape)}")
        if codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise CodesError(f"codes: expected integer codes, got {codes.dtype}")
        if lengths is not None:
            if lengths.shape != (codes.shape[0],) or bool((lengths < 1).any()) or bool((lengths > codes.shape[2]).any()):
                raise CodesError(f"lengths: expected [B] values in [1, {codes.shape[2]}], got {lengths.tolist()}")
            valid = torch.arange(codes.shape[2])[None, None] < lengths[:, None, None].cpu()
        else:
            valid = torch.ones_like(codes, dtype=torch.bool)
        c = codes.cpu()
        if bool(((c < 0) | (c >= self.cfg.codebook_size))[valid.expand_as(c)].any()):
            raise CodesError(f"codes: values must lie in [0, {self.cfg.codebook_size})")
        return codes.long()
