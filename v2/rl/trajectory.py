"""RL trajectories: the record of one sampled speech and its exports for trainers.

Owns: `Trajectory` (what a ROLLOUT request produced, with every sampled token's logprob under the
distribution it was drawn from), `to_dict` / JSONL / npz writers, and `collate` (right-padded tensors and
masks for a trainer). What a family's recompute needs beyond these fields is the family's: a subclass of
`Trajectory` in its package adds them (`to_dict` writes every field, arrays as lists).
Must not know: the model, the recompute (`v2.rl.recompute`, a family's recompute), any family's extra fields,
the engine, slots, scheduling (the runtime builds trajectories; this file defines them).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor

from v2.sampling_settings import SamplingSettings


@dataclass(frozen=True)
class Trajectory:
    """One sample: `codes[t]` the G codes of frame t, `logprobs[t]` the logprobs of frame t's draws (the
    family's columns: with a stop head, its "continue" first, then one per code; without one, one per code);
    `stop_logprob` the logprob of the stop decision that ended it (finish_reason "stop"), None otherwise."""

    request_id: int
    group_id: int
    sample_id: int
    seed: int
    weight_version: int
    prompt_rows: np.ndarray        # int64 [T, W]: the prompt rows (W: the family's row width)
    codes: np.ndarray              # int64 [F, G]: G codes per frame
    stop_decisions: np.ndarray     # bool [D]: the stop head's decision at each step (D = F, or F + 1 on stop)
    logprobs: np.ndarray           # float32 [F, C]: C the family's logprob columns per frame
    stop_logprob: float | None
    sampling: SamplingSettings
    min_frames: int
    finish_reason: str             # stop | length | abort | error
    family: str                    # the family that made it (its card's `family`): `v2.rl.logprobs` recomputes with it
    timings: dict[str, float | None] = field(default_factory=dict)
    audio: np.ndarray | None = None  # float32 [channels, samples] unless decode_audio was off

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (arrays as nested lists, a subclass's fields too; audio left out)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "audio":
                continue
            value = getattr(self, f.name)
            out[f.name] = value.tolist() if isinstance(value, np.ndarray) else value
        out["sampling"] = asdict(self.sampling)
        return out


def write_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> None:
    with Path(path).open("w") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_dict()) + "\n")


def write_npz(trajectories: Iterable[Trajectory], path: str | Path) -> None:
    """The collated arrays plus per-sample ids, seeds and versions in one compressed npz."""
    items = list(trajectories)
    arrays: dict[str, Any] = {k: v.numpy() for k, v in collate(items).items()}  # (named arrays, as savez takes them)
    np.savez_compressed(path, **arrays,
                        request_id=np.array([t.request_id for t in items]), group_id=np.array([t.group_id for t in items]),
                        sample_id=np.array([t.sample_id for t in items]), seed=np.array([t.seed for t in items]),
                        weight_version=np.array([t.weight_version for t in items]))


def collate(trajectories: list[Trajectory]) -> dict[str, Tensor]:
    """Right-padded batch for a trainer.

    codes [B, L, G] (0 where padded), logprobs [B, L, C], mask [B, L, C] (True where a logprob is real),
    lengths [B] frames, stopped [B]; L = the longest F (+ 1 when that sample stopped): the row after a
    stopped sample's last frame holds its stop decision in channel 0 only. G and C: the trajectories' own
    (their family's codes per frame and logprob columns); an empty batch has G = C = 0.
    """
    b = len(trajectories)
    rows = [len(t.codes) + (t.stop_logprob is not None) for t in trajectories]
    width = max(rows, default=0)
    groups = trajectories[0].codes.shape[1] if trajectories else 0  # codes per frame (the family's)
    columns = trajectories[0].logprobs.shape[1] if trajectories else 0
    codes = torch.zeros(b, width, groups, dtype=torch.long)
    logprobs = torch.zeros(b, width, columns, dtype=torch.float32)
    mask = torch.zeros(b, width, columns, dtype=torch.bool)
    for i, t in enumerate(trajectories):
        f = len(t.codes)
        codes[i, :f] = torch.from_numpy(t.codes)
        logprobs[i, :f] = torch.from_numpy(t.logprobs)
        mask[i, :f] = True
        if t.stop_logprob is not None:
            logprobs[i, f, 0] = t.stop_logprob
            mask[i, f, 0] = True
    return {"codes": codes, "logprobs": logprobs, "mask": mask,
            "lengths": torch.tensor([len(t.codes) for t in trajectories], dtype=torch.long),
            "stopped": torch.tensor([t.stop_logprob is not None for t in trajectories])}
