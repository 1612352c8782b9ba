"""`python -m v2.bench.rollout` on a tiny workload: the same work in process and on a pool, one JSON line last."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray", reason="the cluster tests need Ray: pip install -e \".[ray,server]\"")

from v2.bench.rollout import main  # noqa: E402


def test_rollout_bench_measures_the_same_work_everywhere(ray_cluster, capsys):
    assert main(["--replicas", "1", "--prompts", "2", "--n", "2", "--frames", "5", "--repeat", "1",
                 "--cpus-per-replica", "0.5", "--weights-gb", "0.01"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    results = line["results"]
    for key in ("in_process", "replicas_1"):
        assert (results[key]["trajectories"], results[key]["frames"]) == (4, 20)  # min = max frames: fixed work
        assert results[key]["frames_per_s"] > 0
    assert results["replicas_1"]["speedup_vs_fewest"] == 1.0
    assert results["weight_transport"]["gb"] == 0.01 and results["weight_transport"]["worker_read_s"] >= 0
    assert line["machine"]["ray"] and line["date"]
