"""A trajectory's logprobs recomputed, differentiably, by the family that made it.

Owns: `logprobs(model, trajectory)`: the family a trajectory names (`Trajectory.family`, found in the
families' registry, v2/registry.py) recomputes it with its own `recompute.trajectory_logprobs(model,
trajectory)` (`<its package>.recompute`). A trajectory of a family this installation does not have, or
that has no recompute, is refused naming `family`.
Must not know: any family's model, prompt layout or sampling.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from v2.registry import UnknownFamily, family_package
from v2.rl.trajectory import Trajectory


def logprobs(model: Any, trajectory: Trajectory) -> Any:
    """Teacher-forced logprobs of `trajectory` under `model` (the family's model, e.g. the policy being
    trained), laid out as `trajectory.logprobs`: for a speech family a tensor [F (+1 when it stopped), 1 + G],
    the stop decision's logprob in row F, channel 0; for a family with several sampled loops the family's
    own record of one such tensor per loop (e.g. a thinker's and a talker's). Differentiable with respect to
    the model's parameters."""
    name = trajectory.family
    try:
        module = f"{family_package(name)}.recompute"
    except UnknownFamily as e:
        raise ValueError(f"family: the trajectory's family {name!r} is not installed here ({e})") from None
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
