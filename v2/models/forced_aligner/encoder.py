"""The aligner's audio encoder for a batch of clips in one pass: log-mel clips -> each clip's audio rows.

Owns: `BatchEncoder`, the release's per-clip encoding (a clip's chunks of 2 n_window mel frames, its last chunk
zero-padded to a whole chunk, so no other clip's length reaches it) with every clip's chunks and rows in the same
calls: the three stride-2 3x3 convs as nine strided copies each (one per kernel tap, from the zero-bordered input,
channels last) into a kept patch buffer, `CONV_TILE`-row matmul tiles written into a kept output buffer and GELU
into the next conv's kept zero-bordered input; `conv_out` in `exact.TILE`-row tiles with the chunk positions added;
then the encoder layers over all clips' rows at once (each linear on kept `exact.TILE`-row tiles, the attention
windows of every clip gathered into one masked `exact.attention` call, right-padded to the longest window),
`ln_post` and the projector.
Exact on the CPU: every row's matmul runs in a call of the same shape and alignment as before (`CONV_TILE` rows,
the inner dim padded to `exact.ALIGN`; `exact.TILE` rows for the layers' linears), the elementwise operations are
the same ones, and a window's keys past its own length are masked, which `exact.attention` makes add exactly
nothing: a clip's rows are the same bits alone, in any batch, and as the one-clip-at-a-time loop made them.
Buffers are kept between calls up to `KEEP_ELEMENTS` each, one call at a time (inference only: autograd off).
Must not know: prompts, words, the decoder, the runtime.
"""

from __future__ import annotations

import math
import threading

import torch
import torch.nn.functional as F
from torch import Tensor

from v2.models import exact
from v2.models.aut.encoder import AudioEncoder, EncoderLayer, sinusoids
from v2.models.aut.features import audio_token_count, rows_after_convs

CONV_TILE = 256  # rows per matmul call in the conv front end (a chunk's first conv makes 3200 rows)


KEEP_ELEMENTS = 1 << 24  # a buffer past this many elements is made for its call only (a large batch at the release
                         # widths would otherwise keep gigabytes; small batches, whose fixed costs these save, fit)


class _Buffers:
    """Grow-only flat buffers by name, zeroed when made; `get` gives a view of the first numel elements in the
    given shape (one over `KEEP_ELEMENTS`: a new zeroed tensor, not kept)."""

    def __init__(self) -> None:
        self._flat: dict[str, Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], like: Tensor, zero: bool = False) -> Tensor:
        n = 1
        for s in shape:
            n *= s
        if n > KEEP_ELEMENTS:
            return torch.zeros(shape, dtype=like.dtype, device=like.device)
        buf = self._flat.get(name)
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._flat[name] = torch.zeros(max(n, 1), dtype=like.dtype, device=like.device)
        view = buf[:n].view(shape)
        if zero:
            view.zero_()
        return view


class BatchEncoder:
    """Encodes a batch of log-mel clips with the tower's weights (read at each call: never copied stale)."""

    def __init__(self, tower: AudioEncoder) -> None:
        self.tower = tower
        self.bufs = _Buffers()
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
                _gelu_into(y.view(b, ho, to, c), x[:, 1: ho + 1, 1: to + 1])
            else:
                x = self.bufs.get("conv_out.src", (b, ho, to, c), y)  # [chunks, F', T', C]
                _gelu_into(y.view(b, ho, to, c), x)
        f, t = x.shape[1], x.shape[2]
        flat = self._tile("conv_out", b * t, c * f, x)  # [chunks * T', C * F']: channel-major c * F' + f
        flat.view(b, t, c, f).copy_(x.permute(0, 2, 3, 1))
        rows = self._linear("", flat, tower.conv_out, fresh=True).view(b, t, -1)  # [chunks, T', d]
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
        tower = self.tower
        rows = self._conv_rows(mels)
        x = torch.cat(rows) if len(rows) > 1 else rows[0]  # [R, d]: every clip's rows
        sizes = [r.shape[0] for r in rows]
        windows = [(start + o, min(tower.window, n - o))  # (first row, rows) of every attention window
                   for start, n in zip(_starts(sizes), sizes) for o in range(0, n, tower.window)]
        width = max(n for _, n in windows)
        slots = None  # every window full width: the rows are the windows' rows already, nothing masked
        if any(n != width for _, n in windows):
            first = torch.tensor([s for s, _ in windows])[:, None]  # [W, 1]
            valid = torch.arange(width)[None] < torch.tensor([n for _, n in windows])[:, None]  # [W, width]
            at = torch.where(valid, first + torch.arange(width)[None], 0)  # padded slot -> row (padding: row 0)
            slots = (at.view(-1).to(x.device), valid.view(-1).nonzero().squeeze(1).to(x.device),
                     valid.to(x.device)[:, None, None, :])  # gather [W width], back [R], key mask [W, 1, 1, width]
        for layer in tower.layers:
            x = self._layer(layer, x, slots, len(windows), width)
        r = x.shape[0]
        h = self._tile("h", r, x.shape[1], x)
        h.copy_(tower.ln_post(x))
        g = self._tile("g", r, tower.proj1.weight.shape[0], x)
        _gelu_into(self._linear("proj1", h, tower.proj1), g)
        return list(self._linear("proj2", g, tower.proj2, fresh=True).split(sizes))  # [N_a, output_dim] each

    def _tile(self, name: str, r: int, cols: int, like: Tensor) -> Tensor:
        """A kept input buffer's rows [:r, :cols], of whole `exact.TILE`-row tiles with the columns padded to
        `exact.ALIGN` (never written: zero), as `exact.linear` pads its copy."""
        tiled = -(-r // exact.TILE) * exact.TILE
        return self.bufs.get(name, (tiled, cols + (-cols % exact.ALIGN)), like)[:r, :cols]

    def _linear(self, name: str, rows: Tensor, module: exact.Linear, fresh: bool = False) -> Tensor:
        """`module` of rows [r, in] (a `_tile` view) -> [r, out]: `exact.linear`'s calls on the kept tile's whole
        tiles, written into a kept output buffer (`fresh`: a new one, for what outlives the call)."""
        if not exact.on(rows):
            return module(rows)
        r, w = rows.shape[0], module.weight
        tiles = rows.as_strided((-(-r // exact.TILE) * exact.TILE, rows.stride(0)), (rows.stride(0), 1))  # [tiled, in']
        shape = (tiles.shape[0], w.shape[0])
        out = rows.new_empty(shape) if fresh else self.bufs.get(name, shape, rows)
        exact.tiles_linear_into(tiles, r, exact.aligned_weight(w).t(), module.bias, out, exact.TILE)
        return out[:r]

    def _layer(self, layer: EncoderLayer, x: Tensor, slots: tuple[Tensor, Tensor, Tensor] | None, windows: int,
               width: int) -> Tensor:
        """`aut.encoder.EncoderLayer.forward`'s maths over several clips' rows x [R, d], each window of rows
        attending inside itself: pre-LN attention (the windows right-padded into one call, `slots`' key mask on the
        padding; none when every window is `width` rows), then the pre-LN MLP; the linears on kept tiles."""
        r, d = x.shape
        a, heads = layer.self_attn, layer.heads
        h = self._tile("h", r, d, x)
        h.copy_(layer.self_attn_layer_norm(x))
        qkv = [self._linear(n, h, p) for n, p in (("q", a.q_proj), ("k", a.k_proj), ("v", a.v_proj))]  # [R, d] each
        if slots is not None:  # a padded slot reads row 0 (a masked key; its query's output is dropped)
            qkv = [t.index_select(0, slots[0]) for t in qkv]  # [W width, d] each
        q, k, v = (t.view(windows, width, heads, d // heads).transpose(1, 2) for t in qkv)  # [W, heads, width, hd]
        o = exact.attention(q, k, v, None if slots is None else slots[2]).transpose(1, 2)  # [W, width, heads, hd]
        att = self._tile("att", r, d, x)
        if slots is None:
            att.view(windows, width, heads, d // heads).copy_(o)
        else:
            att.copy_(o.reshape(windows * width, d).index_select(0, slots[1]))  # [R, d] in row order
        x = x + self._linear("out", att, a.out_proj)
        h.copy_(layer.final_layer_norm(x))
        g = self._tile("ffn", r, layer.fc1.weight.shape[0], x)
        _gelu_into(self._linear("fc1", h, layer.fc1), g)
        return x + self._linear("fc2", g, layer.fc2)


def _gelu_into(x: Tensor, out: Tensor) -> None:
    """`exact.gelu`'s CPU operations, in place where they can be (x is overwritten): (0.5 x) (1 + erf(x / sqrt 2)),
    the same products and sum (a + 1 == 1 + a), without the temporaries."""
    if not exact.on(x):
        out.copy_(exact.gelu(x))
        return
    torch.mul(x, 0.5, out=out)
    x.mul_(1.0 / math.sqrt(2.0)).erf_().add_(1.0)
    out.mul_(x)


def _starts(sizes: list[int]) -> list[int]:
    out, at = [], 0
    for n in sizes:
        out.append(at)
        at += n
    return out
