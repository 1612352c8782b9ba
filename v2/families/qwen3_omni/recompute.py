"""The Qwen3-Omni teacher-forced logprob recompute: a trajectory's thinker and talker logprobs again,
differentiably, for a trainer (`v2.rl.logprobs(model, trajectory)` dispatches here).

Owns: `trajectory_logprobs(model, trajectory)` -> `OmniLogprobs`: `thinker` [n (+1 when `<|im_end|>` ended the
text)]: one causal thinker pass over the prompt's rows (the audio encoder's rows at the placeholders) and the
fed text tokens, each choice scored under the processed distribution it was drawn from (the request's
temperature / top-k / top-p; greedy: its point mass); `talker` [F (+1 when it stopped), 16]: the talker's prompt
rows embedded from the same pass (Pt of the thinker's embedding rows, C of the codec ids, Ph of the thinker's
residual stream entering layer `accept_hidden_layer` at the audio positions), the text rows it was fed (Pt of
each later token, then tts_eos, then tts_pad), and Qwen3-TTS's teacher-forced talker + code predictor
recompute (`v2.families.qwen3_tts.recompute.logprobs`: the same maths, no minimum frame count here).
`model`: the family's `weights` (a module dict with `thinker` and `talker`). Must not know: the engine, slots.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from v2.families.qwen3_tts.recompute import logprobs as talker_logprobs
from v2.models.sampling import processed


class OmniLogprobs(NamedTuple):
    thinker: Tensor  # [n (+1)]: each text choice's logprob (the stop choice last)
    talker: Tensor   # [F (+1), G]: group 0 then the code predictor's groups (the stop choice in row F, column 0)


def trajectory_logprobs(model: Any, trajectory: Any) -> OmniLogprobs:
    t = trajectory
    thinker, talker = model["thinker"], model["talker"]
    if getattr(t, "text_ids", None) is None:
        raise ValueError("trajectory: no text ids (not a Qwen3-Omni trajectory?)")
    dev = thinker.device
    rows = torch.as_tensor(np.asarray(t.prompt_rows), dtype=torch.long, device=dev)  # [T, 3]
    text = torch.as_tensor(np.asarray(t.text_ids), dtype=torch.long, device=dev)  # [n]
    stopped = t.text_stop_logprob is not None
    eos = int(t.text_eos)
    choices = len(text) + int(stopped)
    fed = text[: choices - 1]
    x = thinker.model.embed_tokens(torch.cat([rows[:, 0], fed]))  # [T + fed, H]
    audio_at = (rows[:, 1] >= 0).nonzero().squeeze(1)  # [N]
    if audio_at.numel():
        audio = torch.as_tensor(np.asarray(t.audio_rows), device=dev).to(x.dtype)
        x = x.index_copy(0, audio_at, audio[rows[audio_at, 1]])
    inputs: list[Tensor] = []
    h = thinker.model(x[None], layer_inputs=inputs)[0]  # [T + fed, H], one causal pass
    prompt = rows.shape[0]
    decisions = torch.cat([text, torch.full((int(stopped),), eos, dtype=torch.long, device=dev)])  # [choices]
    temperature, top_k, top_p = t.thinker_sampling
    logits = thinker.logits(h[prompt - 1 :]).float()  # [choices, V]
    z = processed(logits, torch.full((choices,), float(temperature), device=dev),
                  torch.full((choices,), int(top_k), dtype=torch.long, device=dev),
                  torch.full((choices,), float(top_p), device=dev))
    think = torch.log_softmax(z, dim=-1).gather(1, decisions[:, None])[:, 0]
    if t.talker_rows is None or talker is None:
        return OmniLogprobs(think, torch.zeros(0, 16, device=dev))
    accept_layer = talker.omni.accept_hidden_layer
    a = inputs[accept_layer][0] if accept_layer < len(inputs) else h
    prefix = _talker_prompt(talker, torch.as_tensor(np.asarray(t.talker_rows), dtype=torch.long, device=dev),
                            x, a, rows)
    tts_eos = talker.special_text_rows()[1][None]
    trailing = torch.cat([talker.embed_text(text[1:]), tts_eos])  # [n, H]
    speech = talker_logprobs(talker, prefix, trailing, torch.from_numpy(np.asarray(t.codes)), t.sampling,
                             min_frames=0, final_stop=t.stop_logprob is not None)
    return OmniLogprobs(think, speech)


def _talker_prompt(talker: Any, rows: Tensor, embed: Tensor, accept: Tensor, thinker_rows: Tensor) -> Tensor:
    """rows [P, 3 + G] (prepare.py's layout) -> [P, H]: Pt(E[text]) + C[codec] + Ph(A at the audio row's
    position); embed / accept: the thinker's rows at its prompt's positions."""
    text, codec, index = rows[:, 0], rows[:, 1], rows[:, 2]
    x = torch.where((text >= 0)[:, None], talker.embed_text(text.clamp(min=0)), 0.0)
    x = x + torch.where((codec >= 0)[:, None], talker.embed_codec(codec.clamp(min=0)), 0.0)
    at = (index >= 0).nonzero().squeeze(1)
    if at.numel():
        where = torch.full((int(thinker_rows[:, 1].max()) + 1,), -1, dtype=torch.long, device=rows.device)
        audio = (thinker_rows[:, 1] >= 0).nonzero().squeeze(1)
        where[thinker_rows[audio, 1]] = audio  # audio row index -> its prompt position
        x = x.index_add(0, at, talker.project_hidden(accept[where[index[at]]]))
    return x


def recorded(trajectory: Any) -> OmniLogprobs:
    """What the rollout recorded, in `trajectory_logprobs`' layout."""
    t = trajectory
    think = torch.from_numpy(np.asarray(t.text_logprobs, dtype=np.float32))
    if t.text_stop_logprob is not None:
        think = torch.cat([think, torch.tensor([t.text_stop_logprob], dtype=torch.float32)])
    talk = torch.from_numpy(np.asarray(t.logprobs, dtype=np.float32)).reshape(len(t.codes), -1)
    if t.stop_logprob is not None:
        stop = torch.zeros(1, talk.shape[1])
        stop[0, 0] = t.stop_logprob
        talk = torch.cat([talk, stop])
    return OmniLogprobs(think, talk)
