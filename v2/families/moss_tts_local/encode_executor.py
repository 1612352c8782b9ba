"""The codec encoder's executor: a batch of ENCODE plans -> one chunked encoder call -> codes per row.

Owns: the encoder's per-slot streaming state (fresh state for a recording that starts), the ENCODE batch
in two halves (`pack`: the rows' audio, slots and real frames as host tensors; `launch`: one
`encode_chunk` call -> codes [rows, n, G] on the device) and `read` (per plan, per row its real frames'
codes, copied off the possibly pinned host buffer).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from v2.runtime.device import to_device
from v2.runtime.family import Batch


class EncodeExecutor:
    """Every row of every plan in one `encode_chunk` call over the encoder's slot-indexed state."""

    def __init__(self, encoder: Any, num_slots: int) -> None:
        self.encoder = encoder
        self.state = encoder.allocate_state(num_slots)

    def start(self, slots: Sequence[int]) -> None:
        """Fresh streams in `slots` (nothing of an earlier recording is ever read)."""
        self.state.reset(to_device(torch.tensor(list(slots), dtype=torch.long), self.encoder.device))

    def pack(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """Host half: (audio [B, C, n * hop], slots [B], real frames [B]), rows in plan order."""
        rows = [r for p in batch.plans for r in p.payload.rows]
        audio = torch.from_numpy(np.stack([r.audio for r in rows]))  # [B, C, n * hop]
        slots = torch.tensor([r.slot for r in rows], dtype=torch.long)
        frames = torch.tensor([r.frames for r in rows], dtype=torch.long)
        return audio, slots, frames

    def launch(self, packed: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """Device half: codes [rows, n, G] on the encoder's device (row k real for its first `frames` frames)."""
        audio, slots, frames = (to_device(t, self.encoder.device) for t in packed)
        codes = self.encoder.encode_chunk(slots, audio, state=self.state, frames=frames)  # [B, G, n]
        return codes.transpose(1, 2)  # [B, n, G]

    def read(self, host: np.ndarray, batch: Batch) -> list[list[np.ndarray]]:
        """host [rows, n, G] -> per plan, per row its real frames' codes [frames, G] (copies: the host
        copy may be pinned memory, which codes kept for a request's life must not hold)."""
        out: list[list[np.ndarray]] = []
        k = 0
        for plan in (p.payload for p in batch.plans):
            out.append([np.array(host[k + j, : r.frames]) for j, r in enumerate(plan.rows)])
            k += len(plan.rows)
        return out
