"""Qwen3-Omni code2wav: codes [B, T, 16] -> 24 kHz mono waveform, whole-utterance and streaming.

Owns: the module tree under the release's names (`code2wav.code_embedding`, `pre_transformer.{layers, norm}`,
`upsample.i.{0, 1}`, `decoder.0 .. decoder.6`), the per-slot streaming state (`Code2WavState`: each causal
conv's history rows, each transformer layer's key/value window, a frame counter; a dummy slot for padding
rows), `decode_chunk` over it, `decode` (whole utterances = `decode_chunk` from a fresh state, hence equal to
any chunking of it) and `reference_chunked_decode` (the reference's lossy chunk-with-left-context decode,
kept for parity). The blocks are the Qwen3-TTS codec's (v2/models/qwen3_codec/) except where
`code2wav_blocks` says: the input is a mean of code embeddings (no RVQ, no pre_conv), the transformer has no
projections, and the decoder blocks' transposed convs are cut at both ends, so a stream's first `lead`
samples (555 at release rates) are not audio and a whole decode of T frames is T * hop - lead samples.
Must not know: the talker, requests, scheduling, how slots are allocated.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from v2.models.module_list import module_list_of
from v2.models.qwen3_omni.config import Code2WavConfig
from v2.models.qwen3_codec.layers import ConvNeXtBlock, SnakeBeta
from v2.models.qwen3_omni.code2wav_blocks import (
    Code2WavTransformer, TrimmedDecoderBlock, code_mean, decoder_config, decoder_blocks, lead_rows,
)
from v2.models.stream_conv import (
    CausalConvNet, CausalTransConvNet, Stream, StreamState, check_codes, number_stateful,
)

class Code2WavState(StreamState):
    """code2wav's streaming state (`StreamState`): frames is the next frame's RoPE position."""


class Code2WavChunk(NamedTuple):
    """One `decode_chunk` call: audio [B, n * hop] and start [B]: row b's new audio is
    audio[b, start[b] : lengths[b] * hop] (start = `lead` on the chunk that begins a stream, else 0)."""

    audio: Tensor
    start: Tensor


class Code2Wav(nn.Module):
    """`code2wav.*` of a Qwen3-Omni checkpoint."""

    def __init__(self, config: Code2WavConfig) -> None:
        super().__init__()
        self.config = config
        self.cfg = cfg = decoder_config(config)  # the Qwen3 codec's view its blocks read
        h = cfg.hidden_size
        self.code_embedding = nn.Embedding(cfg.num_quantizers * cfg.codebook_size, h)
        self.pre_transformer = Code2WavTransformer(cfg)
        rows = 1  # rows per frame at each stage
        upsample = []
        for r in cfg.upsampling_ratios:
            upsample.append(nn.ModuleList([CausalTransConvNet(h, h, r, r, rows), ConvNeXtBlock(h, rows * r)]))
            rows *= r
        self.upsample = module_list_of(upsample)
        blocks: list[nn.Module] = [CausalConvNet(h, cfg.decoder_dim, 7, rows)]
        self._leads: list[tuple[int, int, int]] = []  # (rate, rows per frame, lead rows) at each block's output
        lead = 0
        blocks += decoder_blocks(cfg, rows)
        for rate in cfg.upsample_rates:
            rows, lead = rows * rate, (lead + 1) * rate
            self._leads.append((rate, rows, lead))
        out_dim = cfg.block_dims(len(cfg.upsample_rates) - 1)[1]
        blocks += [SnakeBeta(out_dim), CausalConvNet(out_dim, 1, 7, rows)]
        self.decoder = nn.ModuleList(blocks)
        self.hop, self.lead = rows, lead
        self._stateful = number_stateful(self.modules(), (CausalConvNet, CausalTransConvNet, ConvNeXtBlock))

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "Code2Wav":
        """The `code2wav.*` tensors of a Qwen3-Omni checkpoint directory (strict: every key of this part)."""
        from v2.models.qwen3_omni.loader import build_part, open_checkpoint

        ckpt = open_checkpoint(Path(path))
        if ckpt.config.code2wav is None:
            raise ValueError("config.json: 'enable_audio_output' is false: this checkpoint has no code2wav")
        return build_part(cls, ckpt.config.code2wav, ckpt, "code2wav.", dtype=dtype, device=device)

    @property
    def device(self) -> torch.device:
        return self.code_embedding.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.code_embedding.weight.dtype

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def allocate_state(self, num_slots: int) -> Code2WavState:
        """Zeroed state for `num_slots` streams plus the dummy slot."""
        c = self.cfg
        return Code2WavState.zeros(num_slots, self._stateful, layers=c.num_layers, kv_heads=c.num_kv_heads,
                                   window=c.sliding_window, head_dim=c.head_dim, dtype=self.dtype, device=self.device)

    @torch.no_grad()
    def decode_chunk(self, slots: Tensor, codes: Tensor, *, state: Code2WavState, lengths: Tensor | None = None,
                     trace: dict[str, Tensor] | None = None) -> Code2WavChunk:
        """Advance B streams: slots [B] (real slots distinct; the dummy slot for padding rows), codes [B, n, G]
        in [0, codebook_size); lengths [B] (default n) real frames of each row, the rest padding. Advances each
        stream by lengths[b] frames. `trace` (optional) receives stage outputs, time-major."""
        b, n, _ = codes.shape
        slots = slots.to(self.device)
        valid = None if lengths is None else lengths.to(self.device)
        frames = state.frames[slots]  # [B]
        io = Stream(state.convs, slots, valid, trace)
        x = code_mean(self.code_embedding.weight, codes.to(self.device), self.cfg.codebook_size)  # [B, n, H]
        io.record("embed_mean", x)
        x = self.pre_transformer(x, frames, state.k, state.v, slots, valid, trace)
        io.record("transformer_out", x)
        for up, block in self.upsample:
            x = block(up(x, io), io)
        io.record("upsampled", x)
        x = self.decoder[0](x, io)
        # a chunk where no stream begins has no lead rows (on a CPU that is checked; elsewhere masked anyway)
        starts = frames.device.type != "cpu" or bool((frames == 0).any())
        for module, (rate, rows, lead) in zip(list(self.decoder)[1:-2], self._leads):
            assert isinstance(module, TrimmedDecoderBlock)
            x = module.forward_lead(x, io, lead_rows(frames, x.shape[1] * rate, rows, lead) if starts else None)
        x = self.decoder[-1](self.decoder[-2](x), io)
        state.frames[slots] = frames + (n if valid is None else valid)
        start = torch.where(frames == 0, self.lead, 0)
        return Code2WavChunk(x.clamp(-1.0, 1.0).reshape(b, n * self.hop), start)  # [B, n * hop, 1] -> [B, n * hop]

    @torch.no_grad()
    def decode(self, codes: Tensor, lengths: Tensor | None = None, *,
               trace: dict[str, Tensor] | None = None) -> Tensor:
        """Whole utterances: codes [B, T, G] right-padded (lengths [B] real frames, default T) ->
        waveform [B, T * hop - lead], zero past each row's lengths * hop - lead (the reference's `forward`)."""
        codes = self.check_codes(codes, lengths)
        b, t, _ = codes.shape
        keep = None
        if lengths is not None:
            keep = torch.arange(t, device=codes.device)[None] < lengths.to(codes.device)[:, None]  # [B, T]
            codes = codes.masked_fill(~keep[..., None], 0)
        state = self.allocate_state(b)
        wav = self.decode_chunk(torch.arange(b, device=self.device), codes, state=state, trace=trace).audio
        wav = wav[:, self.lead :]
        if lengths is not None:
            ends = lengths.to(self.device)[:, None] * self.hop - self.lead  # [B, 1]
            wav = wav.masked_fill(torch.arange(wav.shape[1], device=self.device)[None] >= ends, 0.0)
        return wav

    @torch.no_grad()
    def reference_chunked_decode(self, codes: Tensor, chunk_size: int = 300, left_context: int = 25) -> Tensor:
        """The reference's `chunked_decode` of codes [B, T, G]: chunk k re-decodes min(left_context, start) frames
        before it as a separate utterance and drops their ctx * hop samples; each chunk also loses its last lead
        samples, so the result is shorter than `decode` (kept for parity and comparison)."""
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
        return check_codes(codes, lengths, self.cfg.num_quantizers, self.cfg.codebook_size)
