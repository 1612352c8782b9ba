"""The aligner's audio encoder for a batch of clips in one pass: log-mel clips -> each clip's audio rows.

Owns: `BatchEncoder`, the release's per-clip encoding (a clip's chunks of 2 n_window mel frames, its last chunk
zero-padded to a whole chunk, so no other clip's length reaches it) with every clip's chunks and rows in the same
calls: the three stride-2 3x3 convs as nine strided copies each (one per kernel tap, from the zero-bordered input,
channels last) into a kept patch buffer, `CONV_TILE`-row matmul tiles written into a kept output buffer and GELU
into the next conv's kept zero-bordered input; `conv_out` in `exact.TILE`-row tiles with the chunk positions added;
then the shared AuT stack (`AudioEncoder.encode_rows`: the layers over all clips' rows at once, every attention
window in one masked call, `ln_post` and the projector) on this encoder's kept tiles.
Exact on the CPU: every row's matmul runs in a call of the same shape and alignment as before (`CONV_TILE` rows,
the inner dim padded to `exact.ALIGN`; the stack's own exact forms after it), and the elementwise operations are
the same ones: a clip's rows are the same bits alone, in any batch, and as the one-clip-at-a-time loop made them.
Buffers are kept between calls up to `KEEP_ELEMENTS` each, one call at a time (inference only: autograd off).
Must not know: prompts, words, the decoder, the runtime.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import Tensor

from v2.models import exact
from v2.models.aut.encoder import AudioEncoder, sinusoids
from v2.models.aut.features import audio_token_count, rows_after_convs
from v2.models.aut.kept import KeptBuffers, gelu_into

CONV_TILE = 256  # rows per matmul call in the conv front end (a chunk's first conv makes 3200 rows)


KEEP_ELEMENTS = 1 << 24  # a buffer past this many elements is made for its call only (a large batch at the release
                         # widths would otherwise keep gigabytes; small batches, whose fixed costs these save, fit)


class BatchEncoder:
    """Encodes a batch of log-mel clips with the tower's weights (read at each call: never copied stale)."""

    def __init__(self, tower: AudioEncoder) -> None:
        self.tower = tower
        self.bufs = KeptBuffers(KEEP_ELEMENTS)
        self._weights: dict[str, tuple[int, int, Tensor]] = {}  # conv -> (data_ptr, version, padded weight's .t())
        self._positions: dict[tuple[int, int, torch.device, torch.dtype], Tensor] = {}
        self._lock = threading.Lock()  # the kept buffers serve one call at a time (what a call returns is its own)

    def __getstate__(self) -> dict[str, object]:
        """A copy (deepcopy, pickle) takes the tower only: buffers, caches and the lock are made anew."""
        return {"tower": self.tower}

    def __setstate__(self, state: dict[str, object]) -> None:
        tower = state["tower"]
        assert isinstance(tower, AudioEncoder)
        self.__init__(tower)  # type: ignore[misc]

    def _conv_weight_t(self, name: str, weight: Tensor) -> Tensor:
        """weight [cout, cin, 3, 3] -> [cin * 9 padded to ALIGN, cout] (what `exact.linear` multiplies by)."""
        hit = self._weights.get(name)
        if hit is None or hit[:2] != (weight.data_ptr(), weight._version):
            flat = weight.detach().flatten(1)  # [cout, cin * 9], (cin, kh, kw) order as F.unfold's
            padded = F.pad(flat, (0, -flat.shape[1] % exact.ALIGN)).contiguous()  # [cout, inner']
            hit = self._weights[name] = (weight.data_ptr(), weight._version, padded.t())
        return hit[2]

    def _conv(self, n: int, x: Tensor, name: str) -> Tensor:
        """One stride-2 3x3 conv (padding 1) of x [chunks, H + 2, W + 2, cin] (zero border, channels last)
        -> its pre-activation rows [chunks * ho * to, cout] (a kept buffer's rows, whole tiles)."""
        conv = getattr(self.tower, name)
        b, hp, wp, cin = x.shape
        ho, to = (hp - 3) // 2 + 1, (wp - 3) // 2 + 1
        rows, inner = b * ho * to, cin * 9
        wt = self._conv_weight_t(name, conv.weight)
        tiled = -(-rows // CONV_TILE) * CONV_TILE
        patches = self.bufs.get(f"{name}.in", (tiled, wt.shape[0]), x)  # columns past `inner` stay zero
        cols = patches[:rows, :inner].view(b, ho, to, cin, 3, 3)  # column cin * 9 + 3 kh + kw
        if not exact.on(x):  # one launch: [chunks, ho, to, cin, 3, 3] windows of the input
            s0, s1, s2, s3 = x.stride()
            cols.copy_(x.as_strided((b, ho, to, cin, 3, 3), (s0, 2 * s1, 2 * s2, s3, s1, s2)))
        else:  # nine copies with the channels innermost (on a CPU one strided copy is 3x slower)
            for kh in range(3):
                for kw in range(3):
                    cols[..., kh, kw].copy_(x[:, kh: kh + 2 * ho - 1: 2, kw: kw + 2 * to - 1: 2])
        out = self.bufs.get(f"{name}.out", (tiled, wt.shape[1]), x)
        if exact.on(x):
            exact.tiles_linear_into(patches, rows, wt, conv.bias, out, CONV_TILE)
        else:
            torch.addmm(conv.bias, patches, wt, out=out)
        return out[:rows]

    def conv_rows(self, mels: list[Tensor]) -> list[Tensor]:
        """Each clip's rows entering the layers [N_a(T_i), d_model] (`_conv_rows`, one call at a time)."""
        with self._lock:
            return self._conv_rows(mels)

    def encode(self, mels: list[Tensor]) -> list[Tensor]:
        """Log-mel clips [mel, T_i] -> audio rows [N_a(T_i), output_dim] each (`_encode`, one call at a time)."""
        with self._lock:
            return self._encode(mels)

    @torch.no_grad()
    def _conv_rows(self, mels: list[Tensor]) -> list[Tensor]:
        """Each clip's rows entering the layers [N_a(T_i), d_model]: its chunks through the convs, `conv_out`
        and the per-chunk positions, the rows past the clip's own dropped."""
        tower, cfg = self.tower, self.tower.cfg
        chunk = 2 * cfg.n_window
        counts = [-(-m.shape[1] // chunk) for m in mels]  # whole chunks per clip
        b, n_mel = sum(counts), mels[0].shape[0]
        weight = tower.conv2d1.weight  # the buffers take the weights' dtype
        x = self.bufs.get("conv2d1.src", (b, n_mel + 2, chunk + 2, 1), weight, zero=True)
        at = 0
        for m, c in zip(mels, counts):  # a clip's chunks: frames [i chunk, (i + 1) chunk), zeros past its end
            full = m.shape[1] // chunk
            if full:  # the whole chunks [full, mel, chunk]
                whole = m[:, : full * chunk].unflatten(1, (full, chunk)).transpose(0, 1)
                x[at: at + full, 1: n_mel + 1, 1: chunk + 1, 0].copy_(whole)
            if full < c:
                x[at + full, 1: n_mel + 1, 1: m.shape[1] - full * chunk + 1, 0].copy_(m[:, full * chunk:])
            at += c
        names = ("conv2d1", "conv2d2", "conv2d3")
        for k, name in enumerate(names):
            ho, to = (x.shape[1] - 3) // 2 + 1, (x.shape[2] - 3) // 2 + 1
            y = self._conv(b * ho * to, x, name)  # [chunks * ho * to, C]
            c = y.shape[1]
            if k + 1 < len(names):
                x = self.bufs.get(f"{names[k + 1]}.src", (b, ho + 2, to + 2, c), y)
                for border in (x[:, 0], x[:, -1], x[:, :, 0], x[:, :, -1]):
                    border.zero_()  # the padding of 1 (the inside is all written below)
                gelu_into(y.view(b, ho, to, c), x[:, 1: ho + 1, 1: to + 1])
            else:
                x = self.bufs.get("conv_out.src", (b, ho, to, c), y)  # [chunks, F', T', C]
                gelu_into(y.view(b, ho, to, c), x)
        f, t = x.shape[1], x.shape[2]
        flat = self.bufs.tile("conv_out", b * t, c * f, x)  # [chunks * T', C * F']: channel-major c * F' + f
        flat.view(b, t, c, f).copy_(x.permute(0, 2, 3, 1))
        rows = self.bufs.linear("", flat, tower.conv_out, fresh=True).view(b, t, -1)  # [chunks, T', d]
        rows += self._sinusoids(t, rows)[None]
        assert t == rows_after_convs(chunk)
        per_clip = rows.view(b * t, -1).split([n * t for n in counts])  # [chunks_i * T', d] each
        return [r[: audio_token_count(m.shape[1], cfg)] for r, m in zip(per_clip, mels)]

    def _sinusoids(self, t: int, like: Tensor) -> Tensor:
        key = (t, like.shape[-1], like.device, like.dtype)
        if key not in self._positions:
            self._positions[key] = sinusoids(t, like.shape[-1], like.device).to(like.dtype)
        return self._positions[key]

    @torch.no_grad()
    def _encode(self, mels: list[Tensor]) -> list[Tensor]:
        """Log-mel clips [mel, T_i] -> audio rows [N_a(T_i), output_dim] each (the projector's output)."""
        return self.tower.encode_rows(self._conv_rows(mels), self.bufs)
