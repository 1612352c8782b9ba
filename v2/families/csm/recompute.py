"""The CSM teacher-forced logprob recompute: a trajectory's logprobs again, differentiably, for a trainer.

Owns: `logprobs(model, prompt_rows, codes, sampling)`: every chosen code's logprob under the distribution
the sampler reported it from, recomputed in one differentiable pass: one causal backbone pass over the
prompt rows and the audio rows of the frames fed (every frame but the last: the last, a stop frame or the
budget's, is never fed), codebook 0 of every frame from lm_head at the state before it, and codebooks
1..N-1 from one teacher-forced depth-decoder pass per frame. The rule is the sampler's
(`v2.models.csm.sampling`): a sampled head scores `log_softmax(processed)` (temperature -> top-k -> top-p),
a greedy head `log_softmax(raw logits)`, the temperature-1 distribution whose argmax it took. And for a
trajectory the runtime made (results.py): `recompute(trajectory, model)` (its int prompt rows embedded by
the model through `rows.embed_rows`, the prefill's own function), `trajectory_logprobs(model, trajectory)`
(the same, in the argument order `v2.rl`'s per-family dispatch calls) and `recorded(trajectory)`, what the
rollout recorded, in the same layout [F, N] (the stop frame is a frame: no extra row).
Must not know: the engine, slots, scheduling, how trajectories are stored (v2/rl/trajectory.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from v2.families.csm.rows import embed_rows
from v2.models.csm.config import CsmSampling
from v2.models.sampling import processed
from v2.sampling_settings import MIN_TEMPERATURE, HeadSampling


def _scored(logits: Tensor, ids: Tensor, head: HeadSampling) -> Tensor:
    """logits [M, V] raw, ids [M] -> [M]: the logprob the sampler reports for each chosen id under `head`."""
    z = logits.float()
    if head.temperature >= MIN_TEMPERATURE:
        m = z.shape[0]
        z = processed(z, torch.full((m,), head.temperature, device=z.device),
                      torch.full((m,), head.top_k, dtype=torch.long, device=z.device),
                      torch.full((m,), head.top_p, device=z.device))
    return torch.log_softmax(z, dim=-1).gather(1, ids[:, None])[:, 0]


def logprobs(model: Any, prompt_rows: Tensor, codes: Tensor, sampling: CsmSampling) -> Tensor:
    """Teacher-forced logprobs of one trajectory: [F, N].

    prompt_rows [T, H]: the backbone's prompt rows (as prefilled); codes [F, N]: every frame made, a stop
    frame included. Differentiable with respect to the model's parameters (and the rows, when they require
    grad)."""
    dev, n = model.device, model.num_codebooks
    codes = torch.as_tensor(codes, dtype=torch.long, device=dev).reshape(-1, n)  # [F, N]
    prompt_rows = torch.as_tensor(prompt_rows, device=dev).to(model.dtype)
    if prompt_rows.dim() != 2 or prompt_rows.shape[0] < 1:
        raise ValueError(f"prompt_rows: expected [T >= 1, H] rows, got shape {tuple(prompt_rows.shape)}")
    f, t = codes.shape[0], prompt_rows.shape[0]
    if f == 0:
        return torch.zeros(0, n, device=dev)
    seq = torch.cat([prompt_rows, model.embed_frame(codes[: f - 1]).to(prompt_rows.dtype)])  # [T + F - 1, H]
    hidden, c0_logits = model.backbone_teacher(seq[None])  # [1, T + F - 1, H], [1, T + F - 1, V]
    states, c0_logits = hidden[0, t - 1 :], c0_logits[0, t - 1 :]  # [F, H], [F, V]: frame f's from row T-1+f
    first = _scored(c0_logits, codes[:, 0], sampling.backbone)  # [F]
    _, _, depth_logits = model.depth_teacher(states, codes)  # [F, N-1, V]
    rest = _scored(depth_logits.reshape(f * (n - 1), -1), codes[:, 1:].reshape(-1), sampling.depth)
    return torch.cat([first[:, None], rest.view(f, n - 1)], dim=1)


def recompute(trajectory: Any, model: Any) -> Tensor:
    """Teacher-forced logprobs of a CSM trajectory (`v2.rl.Trajectory` this family made): [F, N], laid out as
    `recorded(trajectory)`. Differentiable with respect to the model's parameters."""
    t, dev = trajectory, model.device
    n = model.num_codebooks
    rows = torch.as_tensor(np.asarray(t.prompt_rows), dtype=torch.long, device=dev)  # [T, 1 + N]
    if rows.dim() != 2 or rows.shape[1] != 1 + n:
        raise ValueError(f"prompt_rows: expected int rows [T, {1 + n}] (a CSM trajectory), got {tuple(rows.shape)}")
    return logprobs(model, embed_rows(model, rows), torch.from_numpy(np.asarray(t.codes)), t.sampling)


def trajectory_logprobs(model: Any, trajectory: Any) -> Tensor:
    """`recompute(trajectory, model)`."""
    return recompute(trajectory, model)


def recorded(trajectory: Any) -> Tensor:
    """The logprobs a rollout recorded, in `recompute`'s layout: [F, N] float32."""
    t = trajectory
    return torch.from_numpy(np.asarray(t.logprobs, dtype=np.float32)).reshape(len(t.codes), -1)
