"""Mimi's split residual vector quantizer (`quantizer.*`): latent frames <-> codes, semantic group first.

Owns: `semantic_residual_vector_quantizer` (the first `num_semantic_quantizers` codebooks) and
`acoustic_residual_vector_quantizer` (the rest), each with `input_proj` / `output_proj` (1x1 convs without
bias, present when the quantizers' width differs from the latent's; `output_proj` only on a model that
decodes) and `layers.{i}.codebook` (`embed_sum`, `cluster_usage`; codewords = embed_sum /
max(cluster_usage, 1e-5), derived once per parameter value). Encode: both groups quantize the same latent,
each by residual nearest-codeword search (Euclidean, first index on ties). Decode: each group sums its
codewords in order and projects; the two are added. Time-major [B, frames, C] throughout.
Must not know: checkpoints, convolutions, streaming, the runtime.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from v2.models import exact
from v2.models.mimi.config import MimiConfig
from v2.models.mimi.ops import nearest
from v2.models.module_list import module_list_of

TILE = 64  # rows per matmul call (one row per frame)


class _Codebook(nn.Module):
    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(cfg.codebook_size))
        self.embed_sum = nn.Parameter(torch.zeros(cfg.codebook_size, cfg.codebook_dim))
        self._key: tuple[int, int, int, int] | None = None
        self._table: Tensor | None = None

    def table(self) -> Tensor:
        """The codewords [codebook_size, codebook_dim], recomputed when either parameter changes."""
        e, u = self.embed_sum, self.cluster_usage
        key = (id(e), e._version, id(u), u._version)
        if self._table is None or key != self._key:
            with torch.inference_mode(False):  # kept past the call (v2/models/persist.py)
                self._table = (e / u.clamp(min=1e-5)[:, None]).detach()
            self._key = key
        return self._table


class _VQ(nn.Module):
    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__()
        self.codebook = _Codebook(cfg)


class _RVQ(nn.Module):
    def __init__(self, cfg: MimiConfig, count: int, decodes: bool) -> None:
        super().__init__()
        self.input_proj: nn.Conv1d | None = None
        self.output_proj: nn.Conv1d | None = None
        if cfg.vq_hidden != cfg.hidden_size:
            self.input_proj = nn.Conv1d(cfg.hidden_size, cfg.vq_hidden, 1, bias=False)
            if decodes:
                self.output_proj = nn.Conv1d(cfg.vq_hidden, cfg.hidden_size, 1, bias=False)
        self.layers = module_list_of(_VQ(cfg) for _ in range(count))

    def encode(self, latent: Tensor, count: int) -> Tensor:
        """latent [B, F, hidden] -> codes [B, F, count] of the first `count` codebooks."""
        x = latent if self.input_proj is None else exact.linear(latent, self.input_proj.weight[:, :, 0], None, TILE)
        b, f, d = x.shape
        residual = x
        codes = []
        for vq in self.layers[:count]:
            table = vq.codebook.table()
            index = nearest(residual.reshape(b * f, d), table, TILE).view(b, f)  # [B, F]
            residual = residual - table[index]
            codes.append(index)
        return torch.stack(codes, dim=-1)

    def decode(self, codes: Tensor) -> Tensor:
        """codes [B, n, count] -> the projected sum of their codewords [B, n, hidden] (summed in order)."""
        acc = self.layers[0].codebook.table()[codes[..., 0]]  # [B, n, vq]
        for i in range(1, codes.shape[-1]):
            acc = acc + self.layers[i].codebook.table()[codes[..., i]]
        return acc if self.output_proj is None else exact.linear(acc, self.output_proj.weight[:, :, 0], None, TILE)


class SplitRVQ(nn.Module):
    def __init__(self, cfg: MimiConfig, decodes: bool) -> None:
        super().__init__()
        self.semantic = cfg.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = _RVQ(cfg, self.semantic, decodes)
        self.acoustic_residual_vector_quantizer = _RVQ(cfg, cfg.num_quantizers - self.semantic, decodes)

    def encode(self, latent: Tensor, count: int) -> Tensor:
        """latent [B, F, hidden] -> codes [B, F, count] (1 <= count <= num_quantizers), semantic first."""
        semantic = min(count, self.semantic)
        codes = self.semantic_residual_vector_quantizer.encode(latent, semantic)
        if count > semantic:
            acoustic = self.acoustic_residual_vector_quantizer.encode(latent, count - semantic)
            codes = torch.cat([codes, acoustic], dim=-1)
        return codes

    def decode(self, codes: Tensor) -> Tensor:
        """codes [B, n, num_quantizers] -> latent [B, n, hidden]."""
        out = self.semantic_residual_vector_quantizer.decode(codes[..., : self.semantic])
        if codes.shape[-1] > self.semantic:
            out = out + self.acoustic_residual_vector_quantizer.decode(codes[..., self.semantic :])
        return out
