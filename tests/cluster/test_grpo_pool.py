"""`python -m v2.examples.grpo --replicas 2` trains through the rollout pool exactly as on one runtime."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray", reason="the cluster tests need Ray: pip install -e \".[ray,server]\"")

from v2.examples.grpo import main  # noqa: E402

# iteration 0 (seed 0) runs every sample to the cap, so its step changes nothing; iteration 1's step does,
# and iteration 2 then rolls out on pushed weights that differ from the card's
ARGS = ["--iterations", "3", "--n", "4", "--max-frames", "12", "--target-frames", "6"]


def test_grpo_through_the_pool_matches_one_runtime(ray_cluster, capsys):
    assert main(ARGS) == 0
    single = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert main(ARGS + ["--replicas", "2"]) == 0
    pooled = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [x["runtime_version_now"] for x in pooled] == [1, 2, 3]
    assert pooled[1]["loss"] != 0.0
    for a, b in zip(single, pooled):  # the same trajectories, so the same rewards, loss and weights after
        for key in ("iteration", "weight_version", "mean_reward", "mean_frames"):
            assert a[key] == b[key]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-3)
        assert b["max_rollout_vs_recompute"] < 1e-4
