"""Qwen3-TTS-Tokenizer-12Hz encoder: mono 24 kHz waveforms -> codes [frames, G], on the shared Mimi encoder.

Owns: what the 12 Hz tokenizer's encoder adds to `v2.models.mimi.MimiEncoder` (SEANet, causal transformer,
stride-2 replicate-padded down-sampler, split RVQ: the same maths): its config (`encoder_config` of the
speech tokenizer), full causal attention in the encoder transformer (the tokenizer's reference applies no
window), keeping the first G = `encoder_valid_num_quantizers` codes, loading and seeding the `encoder.*`
side, and the reference's batching rule: a batch is right-padded with zeros to its longest item and
encoded as one sequence length, one item alone is not padded, item i keeps ceil(len_i / hop) frames.
Must not know: files, resampling, the decoder, the runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from v2.models.config import ConfigError
from v2.models.mimi.encoder import MimiEncoder
from v2.models.qwen3_codec.config import Qwen3CodecConfig


class Qwen3CodecEncoder(MimiEncoder):
    """The encoder side of a Qwen3-TTS-Tokenizer-12Hz checkpoint (`encoder.*`)."""

    def __init__(self, cfg: Qwen3CodecConfig) -> None:
        if cfg.encoder is None:
            raise ConfigError("speech_tokenizer config.json: missing field 'encoder_config' (needed to encode audio)")
        super().__init__(cfg.encoder, window=None, decodes=False)
        self.cfg = cfg

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

    @torch.no_grad()
    def quantize(self, latent: Tensor, count: int | None = None) -> Tensor:
        """latent [B, hidden, F] -> codes [B, F, count] (default: the G codes a frame keeps), semantic first."""
        return super().quantize(latent, self.cfg.valid_quantizers if count is None else count)

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
