"""The pool's record of the weights its replicas must hold: every update still needed to rebuild them.

Owns: `WeightUpdate` (one update: named tensors held in Ray's object store, or a checkpoint directory, and
its version) and `WeightLog`, the ordered updates a freshly restarted replica replays to reach the current
version. An update is dropped from the log once a later one makes it redundant: named tensors whose names
a later tensor update covers, or everything before a checkpoint marked `full` (it holds every weight a
trainer changes). So a trainer that pushes the same parameters every step keeps one update in the log.
Also `pack` / `unpack`: named tensors as raw bytes (numpy) with their dtype and shape, so the object store
holds them in one copy and a replica reads them in place (tensors pickled as tensors are copied on both
sides; bf16 has no numpy dtype, so bytes it is).
Must not know: Ray (a reference into the object store is carried as an opaque value), the runtime.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class Packed:
    """{name: (raw bytes, torch dtype name, shape)}; values that are not tensors are kept as they are."""

    tensors: dict[str, tuple[np.ndarray, str, tuple[int, ...]]] = field(default_factory=dict)
    others: dict[str, Any] = field(default_factory=dict)


def pack(named: dict[str, Any]) -> Packed:
    out = Packed()
    for name, value in named.items():
        if isinstance(value, torch.Tensor) and value.layout is torch.strided and not value.is_meta:
            t = value.detach().cpu().contiguous()
            out.tensors[name] = (t.reshape(-1).view(torch.uint8).numpy(), str(t.dtype).removeprefix("torch."),
                                 tuple(t.shape))
        else:
            out.others[name] = value  # arrays travel in place already; anything else is the runtime's to refuse
    return out


def unpack(packed: Any) -> dict[str, Any]:
    """Tensors viewing the packed bytes (read-only: the runtime copies them into its parameters)."""
    if not isinstance(packed, Packed):
        return packed  # a caller's own object-store dict of tensors
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns that the store's bytes are not writable
        tensors = {name: torch.from_numpy(raw).view(getattr(torch, dtype)).reshape(shape)
                   for name, (raw, dtype, shape) in packed.tensors.items()}
    return {**tensors, **packed.others}


@dataclass
class WeightUpdate:
    version: int
    tensors: Any = None                # an object-store reference to {name: tensor}, or None
    path: str | None = None            # a safetensors checkpoint directory, or None
    full: bool = False                 # (checkpoints) it holds every weight that was ever updated
    names: frozenset[str] | None = None  # (tensors) the names it sets, once known

    def __post_init__(self) -> None:
        if (self.tensors is None) == (self.path is None):
            raise ValueError("a weight update holds either tensors or a checkpoint path")

    def covers(self, earlier: "WeightUpdate") -> bool:
        """Whether replaying this update after `earlier` leaves nothing of `earlier` behind."""
        if self.path is not None:
            return self.full
        return earlier.path is None and earlier.names is not None and self.names is not None \
            and earlier.names <= self.names


class WeightLog:
    """The updates since the weights a replica loads at start-up, oldest first; `version` is the newest's."""

    def __init__(self, version: int = 0) -> None:
        self.base_version = version
        self.updates: list[WeightUpdate] = []

    @property
    def version(self) -> int:
        return self.updates[-1].version if self.updates else self.base_version

    def push(self, update: WeightUpdate) -> None:
        if update.version <= self.version:
            raise ValueError(f"version: must be greater than the current version {self.version}, got {update.version}")
        self.updates.append(update)
        self.prune()

    def pop(self, update: WeightUpdate) -> None:
        """Take back the newest update (it was refused). Updates it had made redundant are gone for good,
        which is sound: a refused update changes nothing, and the replicas still hold what they held."""
        assert self.updates and self.updates[-1] is update, "only the newest update can be taken back"
        self.updates.pop()

    def learned(self, update: WeightUpdate, names: frozenset[str]) -> None:
        """The names an update set (known once a replica applied it, for a reference passed in)."""
        if update.names is None:
            update.names = names
            self.prune()

    def prune(self) -> None:
        kept: list[WeightUpdate] = []
        for i, u in enumerate(self.updates):
            if not any(later.covers(u) for later in self.updates[i + 1:]):
                kept.append(u)
        self.updates = kept

    def after(self, version: int) -> list[WeightUpdate]:
        """What a replica at `version` still has to apply, in order."""
        return [u for u in self.updates if u.version > version]
