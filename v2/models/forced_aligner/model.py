"""Qwen3-ForcedAligner's network: log-mel clips and prompt ids -> the head's logits at the timestamp markers.

Owns: the module tree in the release's names below `thinker.` (`audio_tower`: the shared AuT encoder and
projector, the same maths and keys; `model`: a Qwen3 decoder with its token table; `lm_head`: the 5000-class
head, no bias), the release's per-clip encoding (a clip's last chunk zero-padded to a whole chunk: `encode`; the three
convs as `exact.linear` in `CONV_TILE`-row calls, the AuT's weights),
the audio rows put in place of `<|audio_pad|>`, one causal pass over the batch right-padded (positions
0.. per clip, keys past a clip's length masked), and the head read only at the marker rows.
Exact on the CPU: every matmul is `exact.linear`, attention `exact.attention`, so a clip's logits are the
same bits alone or in any batch.
Must not know: words, tokenizers, the fix-up, files, requests, the runtime.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from v2.models import exact
from v2.models.forced_aligner.config import ForcedAlignerConfig
from v2.models.qwen3 import Qwen3Backbone
from v2.models.aut.encoder import AudioEncoder, sinusoids
from v2.models.aut.features import audio_token_count, rows_after_convs

CONV_TILE = 256  # rows per matmul call in the conv front end (a chunk's first conv makes 3200 rows)


class ForcedAligner(nn.Module):
    def __init__(self, cfg: ForcedAlignerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.audio_tower = AudioEncoder(cfg.audio)
        self.model = Qwen3Backbone(cfg.text)
        self.lm_head = exact.Linear(cfg.text.hidden_size, cfg.classes, bias=False)

    def encoder_inputs(self, mels: list[Tensor]) -> list[Tensor]:
        """Each clip's rows entering the encoder layers [N_a, d_model]: its chunks of 2 n_window frames, the
        last one zero-padded to a whole chunk (the release encodes each clip alone, so no other clip's length
        reaches it), through the convs, `conv_out` and the per-chunk positions; rows past the clip's dropped."""
        tower, chunk = self.audio_tower, 2 * self.cfg.audio.n_window
        counts = [-(-m.shape[1] // chunk) for m in mels]  # whole chunks per clip
        # [sum chunks, 1, mel, chunk]: every clip's chunks, the last one zero-padded to a whole chunk
        x = torch.cat([F.pad(m, (0, c * chunk - m.shape[1])).view(m.shape[0], c, chunk).transpose(0, 1)
                       for m, c in zip(mels, counts)])[:, None]
        for conv in (tower.conv2d1, tower.conv2d2, tower.conv2d3):
            b, _, hf, t = x.shape
            ho, to = (hf - 1) // 2 + 1, (t - 1) // 2 + 1
            patches = F.unfold(x, 3, padding=1, stride=2).transpose(1, 2)  # [B, ho * to, C * 9]
            y = exact.linear(patches, conv.weight.flatten(1), conv.bias, tile=CONV_TILE)  # [B, ho * to, C]
            x = exact.gelu(y.transpose(1, 2).reshape(b, -1, ho, to))  # [B, C, ho, to]
        b, c, f, t = x.shape
        x = tower.conv_out(x.permute(0, 3, 1, 2).reshape(b, t, c * f))  # [B, T', d]: channel-major c * F' + f
        x = x + sinusoids(t, self.cfg.audio.d_model, x.device)[None].to(x.dtype)
        assert t == rows_after_convs(chunk)
        rows = x.reshape(b * t, -1).split([n * t for n in counts])  # [chunks_i * T', d] each
        return [r[: audio_token_count(m.shape[1], self.cfg.audio)] for r, m in zip(rows, mels)]

    def encode(self, mels: list[Tensor]) -> list[Tensor]:
        """Log-mel clips [mel, T_i] -> audio rows [N_a(T_i), hidden] each (the projector's output)."""
        n_mel = self.cfg.audio.num_mel_bins
        for i, m in enumerate(mels):
            if m.dim() != 2 or m.shape[0] != n_mel or m.shape[1] < 1:
                raise ValueError(f"mels[{i}]: log-mel must be [{n_mel}, frames >= 1], got {list(m.shape)}")
        tower = self.audio_tower
        out = []
        for x in self.encoder_inputs(mels):
            for layer in tower.layers:
                x = layer(x, tower.window)  # attention inside windows of `window` rows
            out.append(tower.proj2(exact.gelu(tower.proj1(tower.ln_post(x)))))
        return out

    def embed(self, ids: Tensor, audio: Tensor) -> Tensor:
        """ids [L] -> rows [L, hidden]: the token table, `<|audio_pad|>` rows replaced in order by audio [N, hidden]."""
        x = self.model.embed_tokens(ids)  # [L, hidden]
        pads = (ids == self.cfg.ids.audio_pad).nonzero().squeeze(1)  # [N]
        if pads.shape[0] != audio.shape[0]:
            raise ValueError(f"input_ids: {pads.shape[0]} <|audio_pad|> ids for {audio.shape[0]} audio rows")
        x[pads] = audio.to(x.dtype)
        return x

    def marker_logits(self, input_ids: list[Tensor], mels: list[Tensor]) -> list[Tensor]:
        """One prompt's ids [L_i] and log-mel [mel, T_i] per clip -> logits [markers_i, classes] per clip (the
        rows of its `<timestamp>` ids, in order), all clips in one decoder pass."""
        if len(input_ids) != len(mels) or not mels:
            raise ValueError(f"input_ids / mels: one of each per clip, got {len(input_ids)} and {len(mels)}")
        rows = [self.embed(ids, a) for ids, a in zip(input_ids, self.encode(mels))]
        longest = max(r.shape[0] for r in rows)
        x = rows[0].new_zeros(len(rows), longest, rows[0].shape[1])  # [B, L, hidden], right-padded
        valid = torch.zeros(len(rows), longest, dtype=torch.bool, device=x.device)
        for b, r in enumerate(rows):
            x[b, : r.shape[0]], valid[b, : r.shape[0]] = r, True
        h = self.model(x, valid=valid)  # [B, L, hidden]
        marks = [(ids == self.cfg.ids.timestamp).nonzero().squeeze(1) for ids in input_ids]  # [M_i] each
        picked = torch.cat([h[b, m] for b, m in enumerate(marks)])  # [sum M_i, hidden]
        return list(self.lm_head(picked).split([m.shape[0] for m in marks]))
