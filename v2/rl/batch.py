"""Group rollouts on a runtime: n samples per prompt, one shared prefill each, trajectories back.

Owns: turning prompts (text, request fields, or prompt rows) and sampling options into ROLLOUT requests,
each sample's seed (`sample_seed(seed, prompt index, sample index)`: no two samples of a rollout share
noise, and the recorded seed alone reproduces the sample), submitting each group so its prompt is
prefilled once, and `RolloutBatch`: the trajectories in a stable order, or as they finish.
Must not know: model internals, scheduling, the engine's internals (it only calls `runtime.submit_many`).
"""

from __future__ import annotations

import queue
from typing import Any, Iterator

import numpy as np
import torch

from v2.rl.trajectory import Trajectory

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit ints that spreads every input bit."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def sample_seed(seed: int, prompt_index: int, sample_index: int) -> int:
    """The seed of sample `sample_index` of prompt `prompt_index` in a rollout seeded `seed`: a 63-bit int
    (what a request's `seed` accepts), distinct for distinct (prompt, sample) pairs in practice."""
    h = _mix64((seed & _MASK64) ^ 0x9E3779B97F4A7C15)
    h = _mix64(h ^ (prompt_index & _MASK64))
    return _mix64(h ^ ((sample_index * 0xD1B54A32D192ED03) & _MASK64)) >> 1


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


def _request(prompt: Any, fields: frozenset[str]) -> dict[str, Any]:
    """A prompt as request fields: a text is the text spoken, or, where the request takes a conversation and no
    text (a speaking chat model), the user's turn."""
    if isinstance(prompt, str):
        if "text" not in fields and "messages" in fields:
            return {"messages": [{"role": "user", "content": prompt}]}
        return {"text": prompt}
    if isinstance(prompt, dict):
        return dict(prompt)
    if isinstance(prompt, (torch.Tensor, np.ndarray, list, tuple)):
        return {"prompt_rows": prompt}
    raise TypeError(f"prompts: expected text, a dict of request fields, or prompt rows, got {type(prompt).__name__}")


def start_rollout(runtime: Any, prompts: list[Any], *, n: int, seed: int, decode_audio: bool = False,
                  max_frames: int | None = None, min_frames: int = 0, first_prompt_index: int = 0,
                  **sampling: Any) -> RolloutBatch:
    """`first_prompt_index`: the index of `prompts[0]` in a larger rollout split across runtimes (its groups
    then get exactly the seeds and group ids the whole rollout on one runtime gives them)."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts: expected a list of prompts, got {type(prompts).__name__} "
                        "(wrap a single text in a list: [text])")
    keys = tuple(runtime.sampling_keys)  # the family's nested sampling (a code predictor's head, say)
    unknown = set(sampling) - set(keys)
    if unknown:
        raise TypeError(f"rollout: unknown option(s) {sorted(unknown)}; sampling options are {list(keys)}")
    if n < 1:
        raise ValueError(f"n: must be >= 1, got {n}")
    handles = []
    fields = frozenset(getattr(runtime, "request_fields", ()))
    for g, prompt in enumerate(prompts, start=first_prompt_index):
        base = _request(prompt, fields)
        base.update(profile="rollout", decode_audio=decode_audio, min_frames=min_frames, stream=False)
        if keys or "sampling" in base:  # a family without nested sampling takes no `sampling` field
            base["sampling"] = {**base.get("sampling", {}), **sampling}
        if max_frames is not None:
            base["max_frames"] = max_frames
        members = [{**base, "seed": sample_seed(seed, g, i)} for i in range(n)]
        handles += runtime.submit_many(members, share_prompt=n > 1, group_id=g)
    return RolloutBatch(handles)
