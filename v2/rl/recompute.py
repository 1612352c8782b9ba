"""A trajectory's logprobs recomputed, differentiably, by the family that made it.

Owns: `logprobs(model, trajectory)`: the family a trajectory names (`Trajectory.family`, found in the shipped
families' table `v2.card.FAMILIES`) recomputes it with its own `recompute.trajectory_logprobs(model,
trajectory)` (for MOSS-TTS-Local: `v2.families.moss_tts_local.recompute`, one teacher-forced pass). A
trajectory of a family that is not shipped, or that has no recompute, is refused naming `family`.
Must not know: any family's model, prompt layout or sampling.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from v2.card import FAMILIES
from v2.rl.trajectory import Trajectory


def logprobs(model: Any, trajectory: Trajectory) -> Any:
    """Teacher-forced logprobs of `trajectory` under `model` (the family's model, e.g. the policy being
    trained): a tensor [F (+1 when it stopped), 1 + G] laid out as `trajectory.logprobs`, the stop decision's
    logprob in row F, channel 0. Differentiable with respect to the model's parameters."""
    name = trajectory.family
    if name not in FAMILIES:
        raise ValueError(f"family: the trajectory's family {name!r} is not a shipped family "
                         f"(known: {', '.join(sorted(FAMILIES))})")
    module = f"{FAMILIES[name]}.recompute"
    try:
        recompute = import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        recompute = None
    trajectory_logprobs = getattr(recompute, "trajectory_logprobs", None)
    if trajectory_logprobs is None:
        raise ValueError(f"family: {name!r} has no recompute ({module}.trajectory_logprobs)")
    return trajectory_logprobs(model, trajectory)
