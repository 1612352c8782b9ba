"""`python -m v2.bench.engine --quick` runs on the tiny card in a fresh process; its last line is JSON with the
three parts (engine overhead, the simulated device's step period, serving vs generate_batch), every figure a
number, the runtime's codes equal to the reference loop's, and `--plot` draws the overhead sweep. Goals are
reported, not asserted: they are timings on whatever machine runs the tests."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from test_plots import assert_picture

ROOT = Path(__file__).resolve().parents[2]


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_engine_bench_quick_prints_one_json_line_with_three_parts(tmp_path):
    picture = tmp_path / "engine.png"
    done = subprocess.run([sys.executable, "-m", "v2.bench.engine", "--quick", "--repeat", "1", "--plot", str(picture)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["plot"] == str(picture)
    assert_picture(picture)  # the overhead's sweep over rows
    assert report["bench"] == "v2.engine" and report["card"] == "moss_tts_local_tiny" and report["quick"] is True
    assert {"torch", "git_commit", "cpus", "device"} <= set(report["machine"])

    over = report["overhead"]
    assert [r["rows"] for r in over["rows"]] == [1, 16, 64]
    for r in over["rows"]:
        for k in ("us_per_step", "us_per_row", "engine_us_per_step", "engine_us_per_row"):
            assert finite(r["best"][k]) and r["best"][k] > 0 and finite(r["median"][k]), (r["rows"], k)
    assert finite(over["goal"]["value"]) and isinstance(over["goal"]["met"], bool)

    sim = report["simulated_device"]
    assert sim["D_ms"] == 5.0 and sim["rows"] == 64 and sim["frames"] >= 50
    for k in ("period_ms", "engine_us_per_step", "no_overlap_estimate_ms"):
        assert finite(sim[k]) and sim[k] > 0, k
    assert sim["period_ms"] >= sim["D_ms"] * 0.9  # every step waits for the device's D
    assert sim["no_overlap_estimate_ms"] > sim["D_ms"] and isinstance(sim["goal"]["met"], bool)

    rows = report["serving_vs_generate_batch"]
    assert [(r["stream"], r["decode_audio"]) for r in rows] == [("host", False), ("threaded", False),
                                                                ("host", True), ("threaded", True)]
    for r in rows:
        assert r["codes_equal"] is True, r
        assert r["requests"] == 16 and r["frames"] == 40
        for k in ("runtime_ms_per_frame", "generate_batch_ms_per_frame", "overhead_fraction"):
            assert finite(r[k]), k
        assert r["runtime_ms_per_frame"] > 0 and r["generate_batch_ms_per_frame"] > 0
    assert all(isinstance(r["goal"]["met"], bool) for r in rows if not r["decode_audio"])
    ttfa = report["time_to_first_audio"]
    assert [r["stream"] for r in ttfa] == ["cpu_stream", "simulated_device"]
    for r in ttfa:
        assert finite(r["ttfa_ms_p50"]) and r["ttfa_ms_p50"] > 0 and r["ttfa_steps_p50"] >= 2, r
