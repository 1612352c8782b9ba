"""The front executor: a batch of ENCODE plans -> Mimi's encoder -> codes per recording.

Owns: every recording of every plan through `MimiModel.encode` (each encoded as if alone: its codes do
not depend on the batch), in two halves (`pack`: host tensors; `launch`: the device call -> codes
[recordings, F_max, N], -1 past each one's frames) and `read` (per plan, per recording its codes [F_i, N],
copied off the possibly pinned host buffer).
Must not know: requests, loops' state, scheduling policy, threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from v2.runtime.family import Batch


class EncodeExecutor:
    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def pack(self, batch: Batch) -> list[Tensor]:
        return [torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for p in batch.plans for a in p.payload.audio]

    @torch.no_grad()
    def launch(self, wavs: list[Tensor]) -> Tensor:
        codes = self.encoder.encode([w.to(self.encoder.device) for w in wavs])  # [F_i, N] each, as if alone
        out = torch.full((len(codes), max(len(c) for c in codes), codes[0].shape[1]), -1, dtype=torch.long)
        for i, c in enumerate(codes):
            out[i, : len(c)] = c
        return out  # [recordings, F_max, N]

    def read(self, host: np.ndarray, batch: Batch) -> list[list[np.ndarray]]:
        hop, out, k = self.encoder.hop, [], 0
        for plan in (p.payload for p in batch.plans):
            out.append([np.array(host[k + j, : -(-len(a) // hop)]) for j, a in enumerate(plan.audio)])
            k += len(plan.audio)
        return out
