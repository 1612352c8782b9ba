"""The GRPO example runs on CPU: rollouts, exact logprobs, a policy step, and versioned weight pushes."""

from __future__ import annotations

import json
import math

from v2.examples.grpo import main


def test_grpo_example_trains_and_pushes_versions(capsys):
    assert main(["--iterations", "2", "--n", "3", "--max-frames", "24"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [x["iteration"] for x in lines] == [0, 1]
    assert [x["weight_version"] for x in lines] == [0, 1]  # each rollout ran on the last pushed weights
    assert [x["runtime_version_now"] for x in lines] == [1, 2]
    for x in lines:
        assert x["max_rollout_vs_recompute"] < 1e-4 and math.isfinite(x["loss"]) and -5 < x["mean_reward"] <= 0
