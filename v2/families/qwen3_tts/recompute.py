"""The Qwen3-TTS teacher-forced logprob recompute: a trajectory's logprobs again, differentiably, for a trainer.

Owns: `logprobs(model, prompt_rows, trailing, codes, sampling)`: every sampled token's logprob under the same
processed distribution it was drawn from, recomputed in one differentiable pass: one causal talker pass
over the prompt rows and the fed frame rows (no cache), group 0 of every frame (its distribution holds the
stop id: the repetition penalty over the distinct earlier group-0 ids, EOS masked before `min_frames`, the
control ids suppressed, then the talker's temperature / top-k / top-p), and groups 1..G-1 from one
teacher-forced code-predictor pass per frame under the code predictor's settings. The layout is the
sampler's (`Qwen3Generation.logprobs`): row t = group 0 of frame t, then groups 1..G-1 of frame t; a run
that stopped has one more row, the EOS choice in column 0 and zeros elsewhere. And for a trajectory the
runtime made (`v2/families/qwen3_tts/results.py`): `recompute(trajectory, model)` (its int prompt rows and
trailing text ids embedded by the model, `rows.embed_rows`, so the prompt's text rows get gradients too;
its x-vector, codes, sampling, floor and stop), `trajectory_logprobs(model, trajectory)` (the same, in the
argument order `v2.rl`'s per-family dispatch calls), and `recorded(trajectory)`, what the rollout recorded
in the same layout.
Must not know: the engine, slots, scheduling, how trajectories are stored (v2/rl/trajectory.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from v2.families.qwen3_tts.rows import embed_rows
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors, group0_logits
from v2.models.sampling import processed

MIN_FRAMES = 2  # the reference's min_new_tokens: EOS is masked at group-0 choices 0 and 1


def _chosen(z: Tensor, ids: Tensor) -> Tensor:
    """log_softmax(z)[ids]: z [N, V] processed logits, ids [N] -> [N]."""
    return torch.log_softmax(z, dim=-1).gather(1, ids[:, None])[:, 0]


def recompute(trajectory: Any, model: Qwen3TTS) -> Tensor:
    """Teacher-forced logprobs of a Qwen3-TTS trajectory (`v2.rl.Trajectory` this family made): [F (+1 when it
    stopped), G], laid out as `recorded(trajectory)`. Differentiable with respect to the model's parameters."""
    t, dev = trajectory, model.device
    if getattr(t, "trailing", None) is None:
        raise ValueError("trajectory: no trailing text ids (not a Qwen3-TTS trajectory?)")
    rows = torch.as_tensor(np.asarray(t.prompt_rows), dtype=torch.long, device=dev)  # [T, 2 + G]
    if rows.dim() != 2 or rows.shape[1] != 2 + model.num_code_groups:
        raise ValueError(f"prompt_rows: expected int rows [T, {2 + model.num_code_groups}], got {tuple(rows.shape)}")
    xvec = None if t.speaker_vector is None else torch.as_tensor(t.speaker_vector, device=dev).to(model.dtype)
    prompt = embed_rows(model, rows, xvec)  # [T, H]
    trailing = model.embed_text(torch.as_tensor(np.asarray(t.trailing), dtype=torch.long, device=dev))  # [Tt, H]
    return logprobs(model, prompt, trailing, torch.from_numpy(np.asarray(t.codes)), t.sampling,
                    min_frames=t.min_frames, final_stop=t.stop_logprob is not None)


def trajectory_logprobs(model: Qwen3TTS, trajectory: Any) -> Tensor:
    """`recompute(trajectory, model)`."""
    return recompute(trajectory, model)


def recorded(trajectory: Any) -> Tensor:
    """The logprobs a rollout recorded, in `recompute`'s layout: [F (+1), G] float32."""
    t = trajectory
    table = torch.from_numpy(np.asarray(t.logprobs, dtype=np.float32)).reshape(len(t.codes), -1)  # [F, G]
    if t.stop_logprob is None:
        return table
    stop = torch.zeros(1, table.shape[1])
    stop[0, 0] = t.stop_logprob
    return torch.cat([table, stop])


def logprobs(model: Qwen3TTS, prompt_rows: Tensor, trailing: Tensor, codes: Tensor, sampling: Qwen3TTSSampling, *,
             min_frames: int = MIN_FRAMES, final_stop: bool = False) -> Tensor:
    """Teacher-forced logprobs of one trajectory: [F (+1 when `final_stop`), G].

    prompt_rows [T, H]: the talker's prompt rows (as prefilled); trailing [Tt, H]: the trailing text rows,
    row t-1 fed with frame t-1 at step t (P(tts_pad) past the end); codes [F, G] the frames (cut before the
    EOS); `min_frames`: EOS is masked at choices t < min_frames (>= F + 1: a forced continue);
    `final_stop`: the run ended by choosing EOS after frame F-1 (its logprob is the extra row's column 0).
    Differentiable with respect to the model's parameters (and the rows, when they require grad).
    """
    dev, g = model.device, model.num_code_groups
    codes = torch.as_tensor(codes, dtype=torch.long, device=dev).reshape(-1, g)  # [F, G]
    prompt_rows = torch.as_tensor(prompt_rows, device=dev).to(model.dtype)
    if prompt_rows.dim() != 2 or prompt_rows.shape[0] < 1:
        raise ValueError(f"prompt_rows: expected [T >= 1, H] rows, got shape {tuple(prompt_rows.shape)}")
    trailing = torch.as_tensor(trailing, device=dev).to(model.dtype).reshape(-1, prompt_rows.shape[-1])  # [Tt, H]
    if min_frames < 0:
        raise ValueError(f"min_frames: must be >= 0, got {min_frames}")
    f, t_prompt = codes.shape[0], prompt_rows.shape[0]
    steps = f + int(final_stop)  # group-0 choices to score
    if steps == 0:
        return torch.zeros(0, g, device=dev)
    eos = model.cfg.codec.eos
    # the rows fed after frames 0..steps-2: frame(codes) + the trailing text row, or P(tts_pad) past its end
    fed = steps - 1
    pad = model.special_text_rows()[2]
    text = torch.cat([trailing[:fed], pad.expand(max(fed - trailing.shape[0], 0), -1)])  # [fed, H]
    seq = torch.cat([prompt_rows, model.embed_frame(codes[:fed]) + text])  # [T + fed, H]
    hidden = model.talker.model(seq[None])[0]  # [T + fed, H], one causal pass
    states = hidden[t_prompt - 1:]  # [steps, H]: choice t is made from the state after row T-1+t

    s = Qwen3TTSSamplingTensors.build([sampling] * steps, [0] * steps, dev)
    decisions = torch.cat([codes[:, 0], torch.full((steps - f,), eos, dtype=torch.long, device=dev)])  # [steps]
    v = model.cfg.talker.vocab_size
    onehot = F.one_hot(decisions, v)  # [steps, V]
    seen = (onehot.cumsum(0) - onehot) > 0  # the group-0 ids chosen before each choice
    allow_eos = torch.arange(steps, device=dev) >= min_frames
    x = group0_logits(model.group0_logits(states), s, seen, allow_eos, eos, model.suppress_mask(dev))
    group0 = _chosen(processed(x, s.temperature[:, 0], s.top_k[:, 0], s.top_p[:, 0], full=s.full_sort), decisions)

    out = [group0[:f, None]]
    if f:
        _, cp_logits = model.code_predictor_teacher(states[:f], codes)  # [F, G-1, V']
        n = f * (g - 1)
        row = torch.arange(n, device=dev) % f  # settings per (frame, group) row; one setting for all
        z = processed(cp_logits.reshape(n, -1), s.temperature[row, 1], s.top_k[row, 1], s.top_p[row, 1],
                      full=s.full_sort)  # [F * (G-1), V']
        out.append(_chosen(z, codes[:, 1:].reshape(n)).view(f, g - 1))
    else:
        out.append(torch.zeros(0, g - 1, device=dev))
    table = torch.cat(out, dim=1)  # [F, G]
    if final_stop:
        stop = torch.cat([group0[f:], torch.zeros(g - 1, device=dev)])[None]  # [1, G]
        table = torch.cat([table, stop])
    return table
