"""`python -m v2.bench.batch` at its smallest: one JSON line naming the bad item's field, the batch's audio the
same bytes as the one-by-one answers, and both timings."""

from __future__ import annotations

import json

from v2.bench.batch import main


def test_the_batch_bench_reports_both_timings_and_the_same_audio(capsys):
    main(["--card", "moss_tts_local_tiny", "--items", "3", "--frames", "4", "--rounds", "1", "--bad", "1"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["succeeded"], report["failed"], report["errors"]) == (2, 1, {"1": "speed"})
    assert report["same_audio_as_one_by_one"] is True
    assert report["batch_s"] > 0 and report["one_by_one_s"] > 0 and len(report["batch_runs_s"]) == 1
