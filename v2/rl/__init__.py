"""RL on the runtime: trajectories, group rollouts, and the teacher-forced logprob recompute.

Owns: the package's public names. Each loads its module on first use, so `import v2.rl` loads no torch:
`Trajectory`, `collate`, `write_jsonl`, `write_npz` (trajectory.py: the record and its exports),
`RolloutBatch`, `start_rollout`, `sample_seed` (batch.py: n samples per prompt on a runtime, and their
seeds), `logprobs` (recompute.py: a trajectory's logprobs again, differentiably, by the family that made it).
Must not know: anything behind those names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from v2.lazy import lazy_names

_WHERE = {"Trajectory": "v2.rl.trajectory", "collate": "v2.rl.trajectory", "write_jsonl": "v2.rl.trajectory",
          "write_npz": "v2.rl.trajectory", "RolloutBatch": "v2.rl.batch", "sample_seed": "v2.rl.batch",
          "start_rollout": "v2.rl.batch", "logprobs": "v2.rl.recompute"}

__all__ = ["RolloutBatch", "Trajectory", "collate", "logprobs", "sample_seed", "start_rollout", "write_jsonl",
           "write_npz"]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ loads each on first use
    from v2.rl.batch import RolloutBatch, sample_seed, start_rollout
    from v2.rl.recompute import logprobs
    from v2.rl.trajectory import Trajectory, collate, write_jsonl, write_npz

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
