"""Qwen3-TTS-Tokenizer-12Hz decoder: codes [B, T, G] -> 24 kHz mono waveform, whole-utterance and streaming.

Owns: the split RVQ dequantiser (`quantizer.rvq_first` / `rvq_rest`), `pre_conv`, the `pre_transformer`,
the `upsample` stages and the `decoder` blocks in the release's names and order, the final clamp; the
per-slot streaming state (`Qwen3CodecState`: every causal conv's history rows, each transformer layer's
window of keys/values, a frame counter; a dummy slot for padding rows) and `decode_chunk` over it;
`decode` (whole utterances = `decode_chunk` from a fresh state, hence equal to any chunking of it),
`decode_padded` (the reference's public decode: -1 padding), `reference_chunked_decode` (the reference's
chunk-with-left-context decode, kept to show where it departs from the whole decode).
Must not know: the talker, requests, scheduling, how slots are allocated.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from v2.models.module_list import module_list_of
from v2.models.qwen3_codec.config import DecoderConfig, Qwen3CodecConfig
from v2.models.conv_ops import tile_rows, tiled_linear
from v2.models.qwen3_codec.layers import ConvNeXtBlock, DecoderBlock, SnakeBeta
from v2.models.stream_conv import (
    Cached, CausalConvNet, CausalTransConvNet, CodesError, Stream, StreamState, check_codes, number_stateful,
)
from v2.models.qwen3_codec.transformer import PreTransformer


class Qwen3CodecState(StreamState):
    """The Qwen3 codec's streaming state (`StreamState`): frames is the next frame's RoPE position."""


class _Codebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))
        self._table = Cached()

    def table(self) -> Tensor:
        """[size, dim] codewords embedding_sum / max(cluster_usage, 1e-5)."""
        return self._table.get(self.embedding_sum,
                               lambda e: e / self.cluster_usage.clamp(min=1e-5)[:, None])


class _VQLayer(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = _Codebook(size, dim)


class _VQ(nn.Module):
    def __init__(self, count: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = module_list_of(_VQLayer(size, dim) for _ in range(count))


class _RVQ(nn.Module):
    """Decode side of one residual VQ: `vq.layers.{i}._codebook`, `output_proj` (1x1 conv, no bias)."""

    def __init__(self, count: int, cfg: DecoderConfig) -> None:
        super().__init__()
        self.vq = _VQ(count, cfg.codebook_size, cfg.vq_dim)
        self.output_proj = nn.Conv1d(cfg.vq_dim, cfg.codebook_dim, 1, bias=False)

    def forward(self, codes: Tensor) -> Tensor:
        """codes [B, n, count] -> output_proj(sum_i codeword_i) [B, n, codebook_dim] (summed in order)."""
        acc = self.vq.layers[0]._codebook.table()[codes[..., 0]]  # [B, n, vq_dim]
        for i in range(1, codes.shape[-1]):
            acc = acc + self.vq.layers[i]._codebook.table()[codes[..., i]]
        return tiled_linear(acc, self.output_proj.weight[:, :, 0], None, tile_rows(1))


class Quantizer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.rvq_first = _RVQ(1, cfg)
        self.rvq_rest = _RVQ(cfg.num_quantizers - 1, cfg)

    def forward(self, codes: Tensor) -> Tensor:
        """codes [B, n, G] -> latent [B, n, codebook_dim]."""
        return self.rvq_first(codes[..., :1]) + self.rvq_rest(codes[..., 1:])


class Qwen3CodecDecoder(nn.Module):
    """The decoder side of a Qwen3-TTS-Tokenizer-12Hz checkpoint (`decoder.*`)."""

    def __init__(self, cfg: Qwen3CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.decoder
        self.quantizer = Quantizer(d)
        self.pre_conv = CausalConvNet(d.codebook_dim, d.latent_dim, 3, 1)
        self.pre_transformer = PreTransformer(d)
        rows = 1  # rows (samples) per frame at each stage
        upsample = []
        for r in d.upsampling_ratios:
            upsample.append(nn.ModuleList([CausalTransConvNet(d.latent_dim, d.latent_dim, r, r, rows),
                                           ConvNeXtBlock(d.latent_dim, rows * r)]))
            rows *= r
        self.upsample = module_list_of(upsample)
        blocks: list[nn.Module] = [CausalConvNet(d.latent_dim, d.decoder_dim, 7, rows)]
        for i, rate in enumerate(d.upsample_rates):
            blocks.append(DecoderBlock(*d.block_dims(i), rate, rows))
            rows *= rate
        out_dim = d.block_dims(len(d.upsample_rates) - 1)[1]
        blocks += [SnakeBeta(out_dim), CausalConvNet(out_dim, 1, 7, rows)]
        self.decoder = nn.ModuleList(blocks)
        stateful = (CausalConvNet, CausalTransConvNet, ConvNeXtBlock)  # the modules with a `context`
        self._stateful = number_stateful(self.modules(), stateful)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "Qwen3CodecDecoder":
        """`path`: the `speech_tokenizer` directory (config.json, model.safetensors)."""
        from v2.models.qwen3_codec.loader import load_side

        return load_side(cls, Path(path), "decoder", dtype=dtype, device=device)

    @classmethod
    def from_seed(cls, config: dict, seed: int, *, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> "Qwen3CodecDecoder":
        """Weights drawn from `seed` (CPU generator) for the speech tokenizer `config` (a config.json dict)."""
        from v2.models.qwen3_codec.loader import seeded_side

        return seeded_side(cls, config, seed, "decoder", dtype=dtype, device=device)

    @property
    def device(self) -> torch.device:
        return self.pre_conv.conv.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.pre_conv.conv.weight.dtype

    @property
    def hop(self) -> int:
        return self.cfg.hop

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    def allocate_state(self, num_slots: int) -> Qwen3CodecState:
        """Zeroed state for `num_slots` streams plus the dummy slot."""
        d = self.cfg.decoder
        return Qwen3CodecState.zeros(num_slots, self._stateful, layers=d.num_layers, kv_heads=d.num_kv_heads,
                                     window=d.sliding_window, head_dim=d.head_dim, dtype=self.dtype,
                                     device=self.device)

    @torch.no_grad()
    def decode_chunk(self, slots: Tensor, codes: Tensor, *, state: Qwen3CodecState, lengths: Tensor | None = None,
                     trace: dict[str, Tensor] | None = None) -> Tensor:
        """Advance B streams: slots [B] (real slots distinct; the dummy slot for padding rows), codes [B, n, G]
        in [0, codebook_size); lengths [B] (default n) real frames of each row, the rest padding. Returns the
        waveform [B, n * hop] (row b's first lengths[b] * hop samples are its next audio) and advances each
        stream by lengths[b] frames. `trace` (optional) receives every stage's output, time-major."""
        b, n, _ = codes.shape
        slots = slots.to(self.device)
        valid = None if lengths is None else lengths.to(self.device)
        frames = state.frames[slots]  # [B]
        io = Stream(state.convs, slots, valid, trace)
        x = self.quantizer(codes.to(self.device))  # [B, n, codebook_dim]
        io.record("quantizer_out", x)
        x = self.pre_conv(x, io)
        io.record("pre_conv_out", x)
        x = self.pre_transformer(x, frames, state.k, state.v, slots, valid, trace)
        io.record("pre_transformer_out", x)
        for i, (up, block) in enumerate(self.upsample):
            x = up(x, io)
            io.record(f"upsample{i}_0_out", x)
            x = block(x, io)
            io.record(f"upsample{i}_1_out", x)
        for i, module in enumerate(self.decoder):
            x = module(x) if isinstance(module, SnakeBeta) else module(x, io)
            io.record(f"decoder{i}_out", x)
        state.frames[slots] = frames + (n if valid is None else valid)
        return x.clamp(-1.0, 1.0).reshape(b, n * self.hop)  # [B, n * hop, 1] -> [B, n * hop]

    @torch.no_grad()
    def decode(self, codes: Tensor, lengths: Tensor | None = None, *,
               trace: dict[str, Tensor] | None = None) -> Tensor:
        """Whole utterances: codes [B, T, G] right-padded (lengths [B] real frames, default T) ->
        waveform [B, T * hop], zero past each row's lengths * hop. Equal to `decode_chunk` over any chunking."""
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

    def decode_padded(self, codes: Tensor) -> tuple[Tensor, Tensor]:
        """The reference's public decode: codes [B, T, G] right-padded with -1; a row's frames are those whose
        first code is > -1. Returns (waveform [B, T * hop] zero past each length, sample lengths [B])."""
        if codes.dim() != 3:
            raise CodesError(f"codes: expected [B, T, G], got {list(codes.shape)}")
        frames = (codes[..., 0] > -1).sum(1)  # [B]
        if bool((frames < 1).any()):
            raise CodesError("codes: every row needs at least one frame (first code > -1)")
        wav = self.decode(codes.clamp(min=0), frames.cpu())
        return wav, frames * self.hop

    @torch.no_grad()
    def reference_chunked_decode(self, codes: Tensor, chunk_size: int = 300, left_context: int = 25) -> Tensor:
        """The reference's chunked decode of codes [B, T, G]: chunk k re-decodes min(left_context, start)
        frames before it as a separate utterance (positions from 0, zero history) and keeps the rest. Equals
        `decode` only when left_context covers the receptive field; kept for parity and comparison."""
        codes = self.check_codes(codes)
        out, start, total = [], 0, codes.shape[1]
        while start < total:
            end = min(start + chunk_size, total)
            ctx = left_context if start - left_context > 0 else start
            out.append(self.decode(codes[:, start - ctx : end])[:, ctx * self.hop :])
            start = end
        return torch.cat(out, dim=1)

    def check_codes(self, codes: Tensor, lengths: Tensor | None = None) -> Tensor:
        """codes [B, T >= 1, G] in [0, codebook_size) as int64, or CodesError naming the argument."""
        return check_codes(codes, lengths, self.cfg.groups, self.cfg.decoder.codebook_size)
