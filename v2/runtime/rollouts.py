"""Group rollouts on the runtime: n samples per prompt, one shared prefill each, trajectories back.

Owns: turning prompts (text, request fields, or prompt rows) and sampling options into ROLLOUT requests
(member i of a group seeded `seed + i`), submitting each group so its prompt is prefilled once, and
`RolloutBatch`: the trajectories in a stable order, or as they finish.
Must not know: model internals, scheduling.
"""

from __future__ import annotations

import queue
from typing import Any, Iterator

import numpy as np
import torch

from v2.rollout import Trajectory

_SAMPLING_KEYS = ("temperature", "top_k", "top_p", "repetition_penalty", "stop", "audio")


class RolloutBatch:
    """Handles of a rollout in prompt-major, sample-minor order."""

    def __init__(self, handles: list[Any]) -> None:
        self.handles = handles
        self._finished: queue.Queue[int] = queue.Queue()
        for i, h in enumerate(handles):
            h.on_done(lambda _r, i=i: self._finished.put(i))

    def trajectories(self, timeout: float | None = None) -> list[Trajectory]:
        """Every trajectory, in the stable order (waits for all)."""
        return [h.result(timeout).trajectory for h in self.handles]

    def __iter__(self) -> Iterator[Trajectory]:
        """Trajectories as they finish."""
        for _ in self.handles:
            yield self.handles[self._finished.get()].result().trajectory

    def cancel(self) -> None:
        for h in self.handles:
            h.cancel()


def _request(prompt: Any) -> dict[str, Any]:
    if isinstance(prompt, str):
        return {"text": prompt}
    if isinstance(prompt, dict):
        return dict(prompt)
    if isinstance(prompt, (torch.Tensor, np.ndarray, list, tuple)):
        return {"prompt_rows": prompt}
    raise TypeError(f"prompts: expected text, a dict of request fields, or prompt rows, got {type(prompt).__name__}")


def start_rollout(runtime: Any, prompts: list[Any], *, n: int, seed: int, decode_audio: bool = False,
                  max_frames: int | None = None, min_frames: int = 0, **sampling: Any) -> RolloutBatch:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts: expected a list of prompts, got {type(prompts).__name__} "
                        "(wrap a single text in a list: [text])")
    unknown = set(sampling) - set(_SAMPLING_KEYS)
    if unknown:
        raise TypeError(f"rollout: unknown option(s) {sorted(unknown)}; sampling options are {list(_SAMPLING_KEYS)}")
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    handles = []
    for g, prompt in enumerate(prompts):
        base = _request(prompt)
        base.update(profile="rollout", decode_audio=decode_audio, min_frames=min_frames, stream=False,
                    sampling={**base.get("sampling", {}), **sampling})
        if max_frames is not None:
            base["max_frames"] = max_frames
        members = [{**base, "seed": seed + i} for i in range(n)]
        handles += runtime.submit_many(members, share_prompt=n > 1, group_id=g)
    return RolloutBatch(handles)
