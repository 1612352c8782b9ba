"""`python -m v2.bench` and `python -m v2.bench.http` on the Qwen3-TTS tiny card (tiny sweeps): the workload and
the sequential baseline come from the card's family, the runtime's codes equal that baseline at every
concurrency, and both end with one JSON line; a family without a random-weights build refuses the flag."""

from __future__ import annotations

import json
import math

import pytest

CARD = "qwen3_tts_tiny"


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_serving_bench_runs_on_the_qwen3_tts_card_against_its_reference_loop(capsys):
    from v2.bench.__main__ import main

    assert main(["--card", CARD, "--quick", "--no-progress", "--requests", "3", "--max-frames", "5",
                 "--concurrency", "1", "3"]) == 0
    out = capsys.readouterr().out
    assert "baseline (sequential reference loop + decode())" in out
    report = last_json(out)
    assert report["card"] == CARD and report["baseline"]["requests"] == 3
    assert report["baseline"]["audio_s"] == pytest.approx(3 * 5 * 1920 / 24000)  # 5 frames of 80 ms each
    assert [(s["concurrency"], s["stream"]) for s in report["scenarios"]] == [(1, True), (1, False), (3, True), (3, False)]
    for s in report["scenarios"]:
        assert s["codes_match_baseline"] is True  # batched == the reference loop alone, same seeds
        assert s["audio_s"] == report["baseline"]["audio_s"] and s["audio_s_per_s"] > 0
        assert s["finish_reasons"] == ["length"]
    assert math.isfinite(report["scenarios"][0]["ttfa_p50_s"])
    assert report["scenarios"][2]["mean_ar_batch"] > 1
    assert report["engine_overhead"] == []  # no stand-ins for this family's executors


def test_http_bench_runs_on_the_qwen3_tts_card(capsys):
    from v2.bench.http import main

    assert main(["--card", CARD, "--concurrency", "2", "--requests", "2", "--max-frames", "4", "--repeat", "1",
                 "--ttfb-requests", "0"]) == 0
    report = last_json(capsys.readouterr().out)
    assert report["card"] == CARD and [r["concurrency"] for r in report["levels"]] == [2]
    (level,) = report["levels"]
    assert level["same_audio_seconds"] is True  # the same seeded requests both ways
    assert level["http"]["audio_s"] == pytest.approx(2 * 4 * 1920 / 24000)


def test_workload_requests_come_from_the_family():
    from v2.bench.serving import family_bench, workload
    from v2.runtime import Runtime

    with Runtime.from_card(CARD, device="cpu") as rt:
        made = workload(3, seed=2, max_frames=7, runtime=rt)
        assert made == workload(3, seed=2, max_frames=7)  # a Base checkpoint: voice design, text alone
        with pytest.raises(ValueError, match="^--random-weights"):
            family_bench(rt.card).runtime(rt.card, device="cpu", random_weights=True)


def test_random_weights_on_a_family_without_them_is_refused_before_the_run(capsys):
    from v2.bench.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["--card", CARD, "--random-weights", "--quick", "--no-progress"])
    assert e.value.code == 2 and "--random-weights" in capsys.readouterr().err
