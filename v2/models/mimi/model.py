"""The Mimi codec (`MimiModel`): 24 kHz mono waveforms <-> codes [frames, num_quantizers], whole and streaming.

Owns: the module tree under the checkpoint's names (the encoder side from `MimiEncoder`; `upsample`,
`decoder_transformer`, `decoder`), loading (`from_pretrained` with a key prefix and an optional nested
config key; `from_seed`), the decode path (quantizer decode -> up-sampler -> decoder transformer over the
last `sliding_window` steps -> SEANet decoder, no clamp), the streaming decode over per-slot state
(`allocate_state`, `MimiState.reset`, `decode_chunk(slots, codes [B, n, Q], state=, lengths=)`), `decode`
(whole utterances = `decode_chunk` from a fresh state, hence equal to any chunking of it, bit for bit on
the CPU), and the encode path where every item is encoded as if alone (`encode`, `encode_batch`).
Must not know: the CSM backbone, requests, scheduling, how slots are allocated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.models.mimi.config import MimiConfig
from v2.models.mimi.decoder import GroupedTransConv, MimiState, SEANetDecoder, SlotKV
from v2.models.mimi.encoder import MimiEncoder
from v2.models.mimi.loader import checkpoint_files, load, read_mimi_config, seeded
from v2.models.mimi.transformer import MimiTransformer
from v2.models.stream_conv import (
    CausalConvNet, CausalTransConvNet, CodesError, Stream, check_codes, number_stateful,  # CodesError: re-exported
)


class MimiModel(MimiEncoder):
    """A Mimi checkpoint (`encoder`, `encoder_transformer`, `downsample`, `quantizer`, `upsample`,
    `decoder_transformer`, `decoder`). Both transformers attend over the last `sliding_window` steps."""

    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__(cfg, window=cfg.sliding_window, decodes=True)
        self.cfg = cfg
        self.steps = cfg.hop // cfg.seanet_hop  # transformer steps per codec frame (the resampler's stride)
        self.upsample = GroupedTransConv(cfg.hidden_size, cfg.hidden_size, cfg.downsample_kernel, self.steps,
                                         cfg.upsample_groups, rows_per_frame=1)
        self.decoder_transformer = MimiTransformer(cfg, cfg.sliding_window)
        self.decoder = SEANetDecoder(cfg, self.steps)
        kinds = (GroupedTransConv, CausalConvNet, CausalTransConvNet)  # the modules with history
        self._stateful = number_stateful([*self.upsample.modules(), *self.decoder.modules()], kinds)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, prefix: str = "", config_key: str | None = None,
                        dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> "MimiModel":
        """`path`: a checkpoint directory (config.json, model.safetensors or a sharded index) or one
        `.safetensors` file beside its config.json. `prefix`: the codec's key prefix ("codec_model." in a
        CSM checkpoint); `config_key`: the nested config dict ("codec_config" in a CSM checkpoint; None:
        config.json itself)."""
        path = Path(path)
        cfg = read_mimi_config(path.parent if path.is_file() else path, config_key)
        return load(cls, checkpoint_files(path), cfg, prefix=prefix, dtype=dtype, device=device)

    @classmethod
    def from_seed(cls, config: Mapping, seed: int, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> "MimiModel":
        """Weights drawn from `seed` (CPU generator) for the Mimi `config` (a config.json dict)."""
        return seeded(cls, MimiConfig.from_dict(config), seed, dtype=dtype, device=device)

    @property
    def hop(self) -> int:
        return self.cfg.hop

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    def allocate_state(self, num_slots: int) -> MimiState:
        """Zeroed state for `num_slots` streams plus the dummy slot."""
        c = self.cfg
        return MimiState.zeros(num_slots, self._stateful, layers=c.num_layers, kv_heads=c.num_kv_heads,
                               window=c.sliding_window, head_dim=c.head_dim, dtype=self.dtype, device=self.device)

    @torch.no_grad()
    def decode_chunk(self, slots: Tensor, codes: Tensor, *, state: MimiState, lengths: Tensor | None = None,
                     trace: dict[str, Tensor] | None = None) -> Tensor:
        """Advance B streams: slots [B] (real slots distinct; the dummy slot for padding rows), codes [B, n, Q]
        in [0, codebook_size); lengths [B] (default n) real frames of each row, the rest padding. Returns the
        waveform [B, n * hop] (row b's first lengths[b] * hop samples are its next audio) and advances each
        stream by lengths[b] frames. `trace` receives the quantizer, up-sampler and transformer outputs."""
        b, n, _ = codes.shape
        slots = slots.to(self.device)
        valid = None if lengths is None else lengths.to(self.device)
        frames = state.frames[slots]  # [B]
        io = Stream(state.convs, slots, valid, trace)
        x = self.quantizer.decode(codes.to(self.device))  # [B, n, hidden]
        io.record("quantized", x)
        x = self.upsample(x, io)  # [B, n * steps, hidden]
        io.record("upsample", x)
        kv = SlotKV(state.k, state.v, slots, None if valid is None else valid * self.steps)
        x = self.decoder_transformer(x, frames * self.steps, kv)
        io.record("transformer", x)
        x = self.decoder(x, io)  # [B, n * hop, 1]
        state.frames[slots] = frames + (n if valid is None else valid)
        return x.reshape(b, n * self.hop)

    @torch.no_grad()
    def decode(self, codes: Tensor, lengths: Tensor | None = None, *,
               trace: dict[str, Tensor] | None = None) -> Tensor:
        """Whole utterances: codes [B, T, Q] right-padded (lengths [B] real frames, default T) -> waveform
        [B, T * hop], zero past each row's lengths * hop. Equal to `decode_chunk` over any chunking."""
        codes = self.check_codes(codes, lengths)
        b, t, _ = codes.shape
        keep = None
        if lengths is not None:
            keep = torch.arange(t, device=codes.device)[None] < lengths.to(codes.device)[:, None]  # [B, T]
            codes = codes.masked_fill(~keep[..., None], 0)
        state = self.allocate_state(b)
        wav = self.decode_chunk(torch.arange(b, device=self.device), codes, state=state, trace=trace)
        if keep is not None:
            wav = wav * keep.to(self.device).repeat_interleave(self.hop, dim=1)
        return wav

    def check_codes(self, codes: Tensor, lengths: Tensor | None = None) -> Tensor:
        """codes [B, T >= 1, Q] in [0, codebook_size) as int64, or CodesError naming the argument."""
        return check_codes(codes, lengths, self.cfg.num_quantizers, self.cfg.codebook_size)

    @torch.no_grad()
    def encode_batch(self, audio: Tensor, lengths: Tensor | Sequence[int]) -> tuple[Tensor, Tensor]:
        """audio [B, S] right-padded at the codec's rate, lengths [B] samples -> codes [B, F, Q] with
        F = ceil(max(lengths) / hop), -1 past each row's ceil(lengths[b] / hop) frames, and those frame
        counts [B] (int64). Each row's codes are those of encoding it alone (bit for bit on the CPU)."""
        lengths = torch.as_tensor(lengths, dtype=torch.long).cpu()
        if audio.dim() != 2 or lengths.shape != (audio.shape[0],) or bool(((lengths < 1) | (lengths > audio.shape[1])).any()):
            raise ValueError(f"lengths: expected {audio.shape[0]} sample counts in [1, {audio.shape[-1]}], "
                             f"got {lengths.tolist()}")
        audio = audio[:, : int(lengths.max())]
        codes = self.quantize(self.latent(audio, lengths=lengths))  # [B, F, Q]
        frames = -(-lengths // self.hop)
        keep = torch.arange(codes.shape[1])[None] < frames[:, None]  # [B, F]
        return codes.masked_fill(~keep[..., None].to(codes.device), -1), frames

    def encode(self, wavs: Sequence[Tensor | np.ndarray]) -> list[Tensor]:
        """Mono waveforms at the codec's rate -> each one's codes [ceil(len / hop), Q] int64, as if alone."""
        items = [self.check_audio(w, f"wavs[{i}]") for i, w in enumerate(wavs)]
        if not items:
            return []
        lengths = torch.tensor([len(w) for w in items])
        batch = torch.zeros(len(items), int(lengths.max()), dtype=torch.float32)
        for i, w in enumerate(items):
            batch[i, : len(w)] = w.float()
        codes, frames = self.encode_batch(batch, lengths)
        return [codes[i, : int(frames[i])].cpu() for i in range(len(items))]
