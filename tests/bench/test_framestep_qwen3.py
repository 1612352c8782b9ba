"""`python -m v2.families.qwen3_tts.bench.framestep` on the CPU: the tiny card's frame step per bucket, eager."""

from __future__ import annotations

import json

from v2.families.qwen3_tts.bench.framestep import main


def test_the_frame_step_is_timed_per_bucket(capsys):
    assert main(["--device", "cpu", "--buckets", "2", "1", "--iters", "1", "--context", "100"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["bench"] == "v2.qwen3_tts.framestep" and out["dims"].startswith("tiny card")
    assert [r["bucket"] for r in out["buckets"]] == [1, 2]
    assert all(r["eager_ms"] > 0 and r["frames_per_s"] > 0 and "graph_ms" not in r for r in out["buckets"])
