"""`python -m v2.bench --aligner CARD [--paired N]`: serving with word timestamps, and what they cost (tiny settings)."""

from __future__ import annotations

import json

import pytest

from v2.bench.__main__ import main


def test_paired_aligner_bench_prints_the_cost_table_and_json(capsys):
    assert main(["--card", "qwen3_tts_tiny", "--quick", "--no-progress", "--requests", "2", "--max-frames", "8",
                 "--concurrency", "1", "--aligner", "forced_aligner_tiny", "--paired", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("word timestamps (forced_aligner_tiny)") for line in out)
    report = json.loads(out[-1])
    assert report["aligner"] == "forced_aligner_tiny" and report["engine_overhead"] == []
    assert [(r["concurrency"], r["stream"]) for r in report["aligner_cost"]] == [(1, True), (1, False)]
    for row in report["aligner_cost"]:
        assert row["same_codes"] is True  # the aligner never changes the audio
        assert row["plain"]["runs"] == row["words"]["runs"] == 1
        assert row["plain"]["audio_s_per_s"] > 0 and row["words"]["audio_s_per_s"] > 0
        assert row["aligner_engine_s_per_run"] > 0  # the timestamps were asked for and aligned
        assert isinstance(row["within_goal"], bool) and "load_avg_1min" in row
    for s in report["scenarios"]:
        assert s["codes_match_baseline"] is True
        assert s["kind_seconds"].get("aligner_align", 0.0) > 0


def test_aligner_without_pairing_asks_every_request_for_words(capsys):
    assert main(["--card", "csm_tiny", "--quick", "--no-progress", "--requests", "2", "--max-frames", "6",
                 "--concurrency", "2", "--aligner", "forced_aligner_tiny"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["aligner_cost"] == [] and len(report["scenarios"]) == 2
    assert all(s["kind_seconds"].get("aligner_align", 0.0) > 0 for s in report["scenarios"])


@pytest.mark.parametrize("argv, named", [(["--paired", "1"], "--paired"),
                                         (["--aligner", "forced_aligner_tiny", "--paired", "-1"], "--paired"),
                                         (["--aligner", "forced_aligner_tiny", "--random-weights"], "--aligner")])
def test_bad_aligner_options_are_refused_naming_them(argv, named, capsys):
    with pytest.raises(SystemExit):
        main(["--quick", "--no-progress", *argv])
    assert named in capsys.readouterr().err
