"""`python -m v2.families.csm.bench.framestep` on a CPU: the tiny card's frame step per bucket, eager, one JSON line."""

from __future__ import annotations

import json

from v2.families.csm.bench.framestep import main


def test_the_frame_step_bench_times_each_bucket_and_prints_json(capsys):
    assert main(["--device", "cpu", "--buckets", "2", "1", "--iters", "1", "--context", "80"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["bench"] == "v2.csm.framestep" and out["dims"].startswith("tiny card") and out["context"] == 80
    assert [r["bucket"] for r in out["buckets"]] == [1, 2]
    assert all(r["eager_ms"] > 0 and "graph_ms" not in r for r in out["buckets"])
