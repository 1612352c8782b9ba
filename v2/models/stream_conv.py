"""Streaming convolutions shared by the codecs' decoders: each a causal step over per-slot history rows.

Owns: `Stream` (one decode call's view of the per-slot state: each stateful op takes its history rows for
the call's slots and writes back the rows ending at each row's last real step), `Cached` (a derived tensor
made once per parameter value), `CausalConvNet` (`.conv`, history = the last (k - 1) * dilation input rows),
`CausalTransConvNet` (`.conv`, a transposed conv with kernel = taps x stride computed as a causal conv over
`taps` input frames: history = the last taps - 1 input rows, the "overlap" of an overlap-add),
`number_stateful` (give each stateful module of a decoder its state index), `StreamState` (a decoder's
per-slot state: conv histories, transformer key/value windows, frames decoded; a dummy slot for padding
rows) and `check_codes` (a decoder's codes refused, `CodesError`, naming the argument). All modules are time-major
[B, L, C].
Must not know: any codec's checkpoints or layout, how slots are allocated, the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, TypeVar, cast

import torch
from torch import Tensor, nn

from v2.models.conv_ops import causal_conv, conv_weight, last_rows, tile_rows


@dataclass
class Stream:
    """A decode call over `slots` [B]: conv histories `convs[i]` [slots + 1, ctx_i, C_i] are read for and
    written back to those slots; `frames` [B] real frames of each row (None: all n)."""

    convs: list[Tensor]
    slots: Tensor
    frames: Tensor | None
    trace: dict[str, Tensor] | None = None

    def valid(self, rows_per_frame: int) -> Tensor | None:
        return None if self.frames is None else self.frames * rows_per_frame

    def with_history(self, index: int, x: Tensor) -> Tensor:
        """history + x along time: [B, ctx + n, C]."""
        return torch.cat([self.convs[index][self.slots].to(x.dtype), x], dim=1)

    def keep(self, index: int, xp: Tensor, rows_per_frame: int) -> None:
        store = self.convs[index]
        store[self.slots] = last_rows(xp, store.shape[1], self.valid(rows_per_frame)).to(store.dtype)

    def record(self, name: str, x: Tensor) -> None:
        if self.trace is not None:
            self.trace[name] = x.detach().clone()


class Cached:
    """A derived tensor (a matmul layout, exp of a log-scale parameter) computed once per parameter value."""

    def __init__(self) -> None:
        self.source: Any = None
        self.value: Tensor | None = None

    def get(self, source: Tensor, make: Any) -> Tensor:
        if self.source is not source or self.value is None:
            self.source, self.value = source, make(source)
        return self.value


class CausalConvNet(nn.Module):
    """Conv1d (bias) left-padded with its own (k - 1) * dilation history rows; stride 1."""

    def __init__(self, cin: int, cout: int, kernel: int, rows_per_frame: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation)
        self.kernel, self.dilation, self.rows_per_frame = kernel, dilation, rows_per_frame
        self.context, self.channels = (kernel - 1) * dilation, cin
        self.tile = tile_rows(rows_per_frame)
        self.state_index = -1  # set by the decoder when context > 0
        self._w = Cached()

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        n = x.shape[1]
        xp = io.with_history(self.state_index, x) if self.context else x
        w = self._w.get(self.conv.weight, conv_weight)
        y = causal_conv(xp, n, w, self.conv.bias, self.kernel, self.dilation, self.tile)
        if self.context:
            io.keep(self.state_index, xp, self.rows_per_frame)
        return y


class CausalTransConvNet(nn.Module):
    """ConvTranspose1d (bias, kernel = taps x stride) with the last kernel - stride samples dropped: output
    block j (stride samples) = sum_m W[:, :, q + m * stride] . x[j - m] + bias, a causal conv over `taps`
    input frames into stride x C_out outputs. rows_per_frame counts INPUT rows."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, rows_per_frame: int) -> None:
        super().__init__()
        if kernel % stride:
            raise ValueError(f"transposed conv kernel {kernel} is not a multiple of its stride {stride}")
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride)
        self.stride, self.taps, self.rows_per_frame = stride, kernel // stride, rows_per_frame
        self.context, self.channels = self.taps - 1, cin
        self.tile = tile_rows(rows_per_frame)
        self.state_index = -1
        self._w, self._b = Cached(), Cached()

    def _weight(self, w: Tensor) -> Tensor:
        cin, cout, _ = w.shape
        # [Cin, Cout, taps (m), stride (q)] -> [q, Cout, a = taps - 1 - m (oldest first), Cin]
        w4 = w.reshape(cin, cout, self.taps, self.stride).flip(2).permute(3, 1, 2, 0)
        return w4.reshape(self.stride * cout, self.taps * cin)

    def forward(self, x: Tensor, io: Stream) -> Tensor:
        b, n, _ = x.shape
        xp = io.with_history(self.state_index, x) if self.context else x
        w = self._w.get(self.conv.weight, self._weight)
        conv_bias = self.conv.bias
        assert conv_bias is not None  # built with a bias
        bias = self._b.get(conv_bias, lambda t: t.repeat(self.stride))  # [stride * Cout]
        y = causal_conv(xp, n, w, bias, self.taps, 1, self.tile)  # [B, n, stride * Cout]
        if self.context:
            io.keep(self.state_index, xp, self.rows_per_frame)
        return y.reshape(b, n * self.stride, -1)  # [B, n * stride, Cout]


class Stateful(Protocol):
    """What a decoder's state allocation reads of a module with history: `context` rows of `channels`, and
    the index of its history in the state (`state_index`, set by `number_stateful`)."""

    context: int
    channels: int
    state_index: int


def number_stateful(modules: Iterable[nn.Module], kinds: tuple[type[nn.Module], ...]) -> list[Stateful]:
    """The modules of `kinds` with history (context > 0), in order, each told its state index."""
    found: list[Stateful] = []
    for m in modules:
        if isinstance(m, kinds) and int(getattr(m, "context")) > 0:
            found.append(cast(Stateful, m))  # each of `kinds` sets context, channels and state_index in __init__
    for i, item in enumerate(found):
        item.state_index = i
    return found


class CodesError(ValueError):
    """Codes given to a decoder are malformed; the message names the argument."""


def check_codes(codes: Tensor, lengths: Tensor | None, width: int, codebook_size: int) -> Tensor:
    """codes [B, T >= 1, width] integer in [0, codebook_size) (frames past `lengths` [B] unchecked) as int64,
    or CodesError naming `codes` or `lengths`."""
    if not isinstance(codes, Tensor) or codes.dim() != 3 or codes.shape[2] != width or codes.shape[1] < 1:
        shape = list(codes.shape) if isinstance(codes, Tensor) else type(codes).__name__
        raise CodesError(f"codes: expected shape [B, T >= 1, {width}], got {shape}")
    if codes.dtype.is_floating_point or codes.dtype == torch.bool:
        raise CodesError(f"codes: expected integer codes, got {codes.dtype}")
    valid = torch.ones(codes.shape[:2], dtype=torch.bool)
    if lengths is not None:
        if lengths.shape != (codes.shape[0],) or bool((lengths < 1).any()) or bool((lengths > codes.shape[1]).any()):
            raise CodesError(f"lengths: expected [B] values in [1, {codes.shape[1]}], got {lengths.tolist()}")
        valid = torch.arange(codes.shape[1])[None] < lengths.cpu()[:, None]
    c = codes.cpu()
    if bool(((c < 0) | (c >= codebook_size))[valid].any()):
        raise CodesError(f"codes: values must lie in [0, {codebook_size})")
    return codes.long()


S = TypeVar("S", bound="StreamState")


@dataclass
class StreamState:
    """Streaming state of `num_slots` streams plus a dummy slot (the last) for padding rows.
    convs[i]: [slots + 1, context_i, C_i] the last input rows of stateful conv i (time-major);
    k[j], v[j]: [slots + 1, kv_heads, window - 1, head_dim] transformer layer j's key/value window (after RoPE,
    oldest first); frames: [slots + 1] int64 codec frames decoded so far."""

    convs: list[Tensor]
    k: list[Tensor]
    v: list[Tensor]
    frames: Tensor

    @classmethod
    def zeros(cls: type[S], num_slots: int, stateful: list[Stateful], *, layers: int, kv_heads: int, window: int,
              head_dim: int, dtype: torch.dtype, device: torch.device) -> S:
        """Zeroed state for `num_slots` streams plus the dummy slot: each stateful conv's history, and a
        key/value window of `window - 1` steps for each of `layers` transformer layers."""
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        s = num_slots + 1
        convs = [torch.zeros(s, m.context, m.channels, dtype=dtype, device=device) for m in stateful]
        shape = (s, kv_heads, window - 1, head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        return cls(convs, k, v, torch.zeros(s, dtype=torch.long, device=device))

    @property
    def num_slots(self) -> int:
        return self.frames.shape[0] - 1

    @property
    def dummy_slot(self) -> int:
        return self.frames.shape[0] - 1

    def nbytes_per_slot(self) -> int:
        return sum(t[0].numel() * t.element_size() for t in (*self.convs, *self.k, *self.v))

    def reset(self, slots: Tensor | list[int]) -> None:
        """Make `slots` start a new stream (zero history = the reference's zero padding at the start)."""
        idx = torch.as_tensor(slots, dtype=torch.long, device=self.frames.device)
        self.frames[idx] = 0
        for t in (*self.convs, *self.k, *self.v):
            t[idx] = 0
