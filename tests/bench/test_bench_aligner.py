"""`python -m v2.bench --aligner CARD [--paired N [--paired-one-runtime]]`: serving with word timestamps, and what
they cost (tiny settings)."""

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
        assert row["aligner_calls_per_run"] > 0 and row["aligner_rows_per_call"] >= 1  # its forwards, their spans
        assert row["plain_on"] == "a runtime without the aligner"
        assert isinstance(row["within_goal"], bool) and "load_avg_1min" in row
    for s in report["scenarios"]:
        assert s["codes_match_baseline"] is True
        assert s["kind_seconds"].get("aligner_align", 0.0) > 0


def test_paired_on_one_runtime_runs_the_plain_requests_on_the_aligned_runtime(capsys):
    """Asking for words or not on one runtime with the aligner (no second runtime), and the aligner's launches
    and spans per launch."""
    assert main(["--card", "moss_tts_local_tiny", "--quick", "--no-progress", "--requests", "2", "--max-frames", "6",
                 "--concurrency", "2", "--aligner", "forced_aligner_tiny", "--paired", "1", "--paired-one-runtime"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "without: the aligned runtime" in out
    for row in json.loads(out[-1])["aligner_cost"]:
        assert row["plain_on"] == "the aligned runtime" and row["same_codes"] is True
        assert row["aligner_calls_per_run"] > 0 and 1 <= row["aligner_rows_per_call"] <= 2


def test_aligner_without_pairing_asks_every_request_for_words(capsys):
    assert main(["--card", "csm_tiny", "--quick", "--no-progress", "--requests", "2", "--max-frames", "6",
                 "--concurrency", "2", "--aligner", "forced_aligner_tiny"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["aligner_cost"] == [] and len(report["scenarios"]) == 2
    assert all(s["kind_seconds"].get("aligner_align", 0.0) > 0 for s in report["scenarios"])


@pytest.mark.parametrize("argv, named", [(["--paired", "1"], "--paired"),
                                         (["--aligner", "forced_aligner_tiny", "--paired", "-1"], "--paired"),
                                         (["--aligner", "forced_aligner_tiny", "--random-weights"], "--aligner"),
                                         (["--aligner", "forced_aligner_tiny", "--paired-one-runtime"],
                                          "--paired-one-runtime")])
def test_bad_aligner_options_are_refused_naming_them(argv, named, capsys):
    with pytest.raises(SystemExit):
        main(["--quick", "--no-progress", *argv])
    assert named in capsys.readouterr().err
